"""Crafted files that once took the machine, built small for the tests
and full size for the acceptance run:

    python tests/crafted_limits.py OUT_DIR

writes ``bomb.json.gz`` (about 1 MB that inflates to 1 GiB of ``[{},{},...]``),
``coprime.json`` (a reference certificate whose embedding table has 15 denominators of
20,000 digits each, pairwise coprime: their lcm has about 10^6 bits) and
``heads.safetensors`` (3 KB declaring 10^9 attention heads in its structure), each of
which ``exactmem check`` / ``certify-model`` must refuse in seconds, exit 2.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import struct
import sys
import zlib
from math import log10
from pathlib import Path
from typing import Any

REFERENCE = Path(__file__).resolve().parent.parent / "proofs" / "reference" / \
    "kajitsuka2025-next-token-ids.json"
PRIMES = (3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41, 43, 47, 53)


def gzip_bomb(path: Path, inflated: int) -> Path:
    """A gzip file of ``[{},{},...]`` that decompresses to about ``inflated`` bytes,
    compressed a block at a time (the whole text never sits in memory)."""
    block = b"{}," * (1 << 18)
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)  # 31: a gzip container
    with path.open("wb") as fh:
        fh.write(packer.compress(b"["))
        for _ in range(max(1, inflated // len(block))):
            fh.write(packer.compress(block))
        fh.write(packer.compress(b"{}]"))
        fh.write(packer.flush())
    return path


def _digest(cert: dict[str, Any]) -> str:
    body = {k: v for k, v in cert.items() if k != "digest"}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def coprime_certificate(path: Path, digits: int = 19_990, count: int = 15) -> Path:
    """The reference certificate with ``count`` table entries ``1/p^k``, each denominator
    of about ``digits`` digits, pairwise coprime (powers of distinct primes); digest fixed."""
    cert = json.loads(REFERENCE.read_text())
    table = cert["network"]["layers"][0]["table"]
    cells = [(i, j) for i in range(len(table)) for j in range(len(table[0]))]
    assert len(cells) >= count
    saved = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(0)
    try:
        for (i, j), p in zip(cells, PRIMES[:count], strict=False):
            table[i][j] = f"1/{p ** int(digits / log10(p))}"
    finally:
        sys.set_int_max_str_digits(saved)
    cert["digest"] = _digest(cert)
    path.write_text(json.dumps(cert, sort_keys=True, separators=(",", ":")))
    return path


def heads_safetensors(path: Path, heads: int = 10 ** 9) -> Path:
    """A safetensors file with one 2x2 embedding table whose structure declares an attention
    layer of ``heads`` heads (its tensors absent)."""
    skel = {"format": "exactmem.skeleton/1",
            "input": {"kind": "token-ids", "dim": 2, "seq_len": 2},
            "layers": [{"type": "embedding"},
                       {"type": "attention", "kind": "hardmax", "residual": False,
                        "keys": None, "heads": heads}],
            "readout": {"kind": "argmax", "positions": "last"}}
    data = struct.pack("<4d", 1.0, 0.0, 0.0, 1.0)
    header = {"__metadata__": {"exactmem.skeleton": json.dumps(skel)},
              "layers.0.table": {"dtype": "F64", "shape": [2, 2], "data_offsets": [0, 32]}}
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    path.write_bytes(struct.pack("<Q", len(text)) + text + data)
    return path


def gunzip_size(path: Path) -> int:
    """Decompressed size (for the record), read a chunk at a time."""
    total = 0
    with gzip.open(path, "rb") as fh:
        while chunk := fh.read(1 << 24):
            total += len(chunk)
    return total


if __name__ == "__main__":
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    for made in (gzip_bomb(out / "bomb.json.gz", 1 << 30),
                 coprime_certificate(out / "coprime.json"),
                 heads_safetensors(out / "heads.safetensors")):
        print(f"{made}: {made.stat().st_size} bytes")
