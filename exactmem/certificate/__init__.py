"""Certificates: the file format and emitting it (docs/certificate-format.md)."""

from exactmem.certificate.build import (
    CERTIFICATE_FORMAT,
    build_certificate,
    certificate_text,
    claim_float_exact,
    claim_subset,
    dataset_from_certificate,
    digest_of,
    read_certificate,
    spec_from_certificate,
    write_certificate,
)
from exactmem.certificate.encode import spec_from_json, spec_to_json

__all__ = ["CERTIFICATE_FORMAT", "build_certificate", "certificate_text", "claim_float_exact",
           "claim_subset", "dataset_from_certificate", "digest_of", "read_certificate",
           "spec_from_certificate", "spec_from_json", "spec_to_json", "write_certificate"]
