"""Package layout (the metadata is in pyproject.toml).

``proofs/`` stays at the repository's top level but is installed inside the package as
``exactmem._proofs`` (``exactmem prove`` runs it), so no generic top-level ``proofs``
package is installed.
"""

from setuptools import find_packages, setup

setup(
    packages=[*find_packages(include=["exactmem", "exactmem.*"]),
              "exactmem._proofs", "exactmem._proofs.reference"],
    package_dir={"exactmem._proofs": "proofs"},
)
