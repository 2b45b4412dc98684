"""The trusted checker: standard library only, its own exact forward pass, never searches.

Two parts (docs/checker.md): the certificate checker in this folder (:mod:`.verify`, the
forward pass, rigorous softmax and language-model bounds, float-exact claims;
docs/certificate-format.md) and the proof checker in :mod:`.proofs` (CNF, LRAT, the search
re-encoder; docs/proof-checker.md).  Usable without the rest of exactmem: copy this folder
and run ``python -m <folder> CERT``.
"""

from .report import CheckReport
from .verify import check_certificate, check_file

__all__ = ["CheckReport", "check_certificate", "check_file"]
