"""exactmem: exactly certified memorizing Transformers.

Build the memorization constructions of Kajitsuka & Sato (2025), Mahdavi et al. (2024)
and Dana et al. (2025) in exact rational arithmetic, certify that every sequence is
memorized, and re-check the certificate with a small standard-library-only checker.
"""

# ``exactmem.search`` is the search function below, not the subpackage: import the subpackage
# first so that a later ``import exactmem.search...`` finds it loaded and leaves the name alone.
import exactmem.search as _search_package  # noqa: F401
from exactmem.api import (
    CertifyResult,
    CheckResult,
    ExportResult,
    ExtractResult,
    InfoResult,
    LMInfoResult,
    PrecisionResult,
    ProveResult,
    SearchResult,
    certify,
    certify_model,
    check,
    check_proof,
    check_search,
    export,
    extract,
    generate,
    info,
    precision,
    prove,
    save_dataset,
    search,
)
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
    # the API: one function per CLI verb (docs/api.md)
    "CertifyResult", "CheckResult", "ExportResult", "ExtractResult", "InfoResult", "LMInfoResult",
    "PrecisionResult",
    "ProveResult", "SearchResult", "certify", "certify_model", "check", "check_proof",
    "check_search", "export", "extract", "generate",
    "info", "precision", "prove", "save_dataset", "search",
]
