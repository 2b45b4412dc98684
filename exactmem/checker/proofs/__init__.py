"""The proof side of the trusted checker (standard library only): DRUP, LRAT, the search
re-encoder and the checker of whole search answers (modules: docs/proof-checker.md)."""
