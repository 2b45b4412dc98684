"""The trusted checker: standard library only, its own exact forward pass, never searches.

Usable without the rest of exactmem: copy this folder and run ``python -m <folder> CERT``.
"""

from .verify import CheckReport, check_certificate, check_file

__all__ = ["CheckReport", "check_certificate", "check_file"]
