"""Verification records: one checker run per user flow (docs/checker.md, "Verification
records").

``certify-model`` runs the checker on the certificate it writes, ``check`` runs it again on
request, and ``export`` used to run it a third time.  After a ``VERIFIED`` verdict on a
certificate *file*, :func:`record` stores a small JSON record in this user's cache folder
(``$EXACTMEM_CACHE``, else ``$XDG_CACHE_HOME/exactmem/verified``, else
``~/.cache/exactmem/verified``), keyed by the SHA-256 of the certificate's bytes.  It holds:

- the SHA-256 of the certificate's bytes;
- the SHA-256 of the checker's source files (:func:`exactmem.checker.entry.checker_sha256`);
- the SHA-256 of every file the certificate binds (each JSON object of the certificate
  with a ``path`` and a ``sha256``: a bound dataset, bound weights), by its path relative
  to the certificate's folder;
- the claim lines the checker printed.

:func:`lookup` returns the record only when all of these hash to the same values *now*: the
same bytes, the same checker, the same bound files.  ``export`` reuses such a record instead
of checking again (``export --recheck`` runs the checker anyway); ``exactmem check`` always
runs the checker, since checking is what it is for.

What a reused record rests on: that this user's cache folder holds only records this tool
wrote (anyone who can write there can also edit the installed checker), and SHA-256.  It is
a cache of a verdict, not a proof: a certificate handed to someone else is checked by them.
"""

from __future__ import annotations

import hashlib
import json
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

FORMAT = "exactmem.verification-record/1"
CHUNK = 1 << 20


def folder() -> Path:
    """Where the records live (module docstring)."""
    if os.environ.get("EXACTMEM_CACHE"):
        return Path(os.environ["EXACTMEM_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "exactmem" / "verified"


def file_sha256(path: Path) -> str:
    """The SHA-256 (hex) of a file's bytes, read in chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
    return h.hexdigest()


def _bindings(value: Any) -> list[str]:
    """The ``path`` of every object of the certificate that binds a file by SHA-256."""
    out: list[str] = []
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, dict):
            if isinstance(v.get("path"), str) and isinstance(v.get("sha256"), str):
                out.append(v["path"])
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)
    return sorted(set(out))


def state(path: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The hashes a record stores, as they are now; None when a bound file is missing or
    the certificate is not JSON (nothing to reuse then).  A caller that looks a record up
    and then records its own verdict computes it once and passes it to both."""
    from exactmem.checker.entry import checker_sha256

    p = Path(path)
    try:
        data = p.read_bytes()
        cert = json.loads(data)
        bound = {rel: file_sha256(p.parent / rel) for rel in _bindings(cert)}
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    return {"format": FORMAT, "certificate_sha256": hashlib.sha256(data).hexdigest(),
            "checker_sha256": checker_sha256(), "bound": bound}


def record(path: str | os.PathLike[str], claim: str | None,
           now: dict[str, Any] | None = None) -> None:
    """Store the record of a ``VERIFIED`` verdict on the certificate file ``path`` (``now``:
    its :func:`state`, if the caller has it); a cache that cannot be written is skipped
    silently (the verdict stands without it)."""
    from exactmem.files.atomic import write_text_atomic

    now = now if now is not None else state(path)
    if now is None:
        return
    rec = {**now, "claim": claim or "",
           "when": datetime.now(UTC).isoformat(timespec="seconds")}
    try:
        where = folder()
        where.mkdir(parents=True, exist_ok=True)
        write_text_atomic(where / f"{rec['certificate_sha256']}.json",
                          json.dumps(rec, sort_keys=True) + "\n")
    except OSError:
        return


def lookup(path: str | os.PathLike[str],
           now: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """The record of an earlier ``VERIFIED`` verdict on exactly this certificate, its bound
    files and this checker (``now``: its :func:`state`, if the caller has it), or None."""
    now = now if now is not None else state(path)
    if now is None:
        return None
    try:
        text = (folder() / f"{now['certificate_sha256']}.json").read_text()
        rec = json.loads(text)
    except (OSError, ValueError):
        return None
    if not isinstance(rec, dict) or any(rec.get(k) != v for k, v in now.items()):
        return None
    return rec
