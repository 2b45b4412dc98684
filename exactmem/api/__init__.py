"""The public Python API: one function per CLI verb, typed results (docs/api.md).

>>> import exactmem
>>> ds = exactmem.generate(N=20, n=4, vocab=5, classes=3, seed=1)
>>> exactmem.certify(ds, "lookup").verified
True

Importing this package loads neither torch, nor z3, nor onnx: each function imports what it
needs when called.
"""

from exactmem.api.exports import export
from exactmem.api.extracting import ExtractResult, extract
from exactmem.api.model import certify_model
from exactmem.api.proofs import check_proof, check_search
from exactmem.api.result_types import (
    CertifyResult,
    CheckResult,
    DtypeFidelity,
    ExportResult,
    InfoResult,
    LemmaResult,
    LMInfoResult,
    PrecisionResult,
    ProveResult,
    SearchResult,
)
from exactmem.api.verbs import certify, check, generate, info, precision, prove, search
from exactmem.model.dataset import load_dataset, save_dataset

__all__ = ["CertifyResult", "CheckResult", "DtypeFidelity", "ExportResult", "ExtractResult",
           "InfoResult", "LemmaResult", "LMInfoResult", "PrecisionResult", "ProveResult",
           "SearchResult", "certify", "certify_model", "check", "check_proof", "check_search",
           "export", "extract", "generate", "info", "load_dataset", "precision", "prove",
           "save_dataset", "search"]
