"""Data model: datasets, the exact network description, its exact forward pass and sizes."""

from exactmem.model.dataset import Dataset, dataset_from_json, load_dataset, save_dataset
from exactmem.model.dataset_checks import DatasetReport, require_consistent, validate
from exactmem.model.evaluate import Evaluation, Failure, evaluate
from exactmem.model.sizes import Sizes, sizes
from exactmem.model.spec import (
    Affine,
    Attention,
    Embedding,
    FeedForward,
    Head,
    Linear,
    NetworkSpec,
    Readout,
)

__all__ = [
    "Affine", "Attention", "Dataset", "DatasetReport", "Embedding", "Evaluation", "Failure",
    "FeedForward", "Head", "Linear", "NetworkSpec", "Readout", "Sizes", "dataset_from_json",
    "evaluate", "load_dataset", "require_consistent", "save_dataset", "sizes", "validate",
]
