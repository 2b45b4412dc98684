"""exactmem: exactly certified memorizing Transformers.

Build the memorization constructions of Kajitsuka & Sato (2025), Mahdavi et al. (2024)
and Dana et al. (2025) in exact rational arithmetic, certify that every sequence is
memorized, and re-check the certificate with a small standard-library-only checker.
"""

from exactmem.errors import (
    AssumptionError,
    CertificateError,
    ConstructionError,
    DatasetError,
    ExactmemError,
    InconsistentLabelsError,
    NotExactError,
    SpecError,
)
from exactmem.model import (
    Affine,
    Attention,
    Dataset,
    Embedding,
    FeedForward,
    Head,
    Linear,
    NetworkSpec,
    Readout,
    evaluate,
    load_dataset,
    sizes,
)

__version__ = "0.1.0"

__all__ = [
    "Affine", "AssumptionError", "Attention", "CertificateError", "ConstructionError", "Dataset",
    "DatasetError", "Embedding", "ExactmemError", "FeedForward", "Head", "InconsistentLabelsError",
    "Linear", "NetworkSpec", "NotExactError", "Readout", "SpecError", "__version__", "evaluate",
    "load_dataset", "sizes",
]
