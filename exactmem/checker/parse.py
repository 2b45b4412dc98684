"""Reading a certificate into plain Python values (standard library only).

The grammar is strict (docs/certificate-format.md): no duplicate keys, no unknown or missing
fields, no JSON floats, NaN or Infinity, rationals written canonically as ASCII
``-?(0|[1-9][0-9]*)(/[1-9][0-9]*)?`` in lowest terms, JSON integers where integers are
meant.  Resource limits (:data:`MAX_FILE_BYTES`, :data:`MAX_DIGITS`, the JSON reader's
nesting limit, :data:`MAX_NODES` JSON values, :data:`MAX_DEN_BITS` bits of a common
denominator, :data:`MAX_MATRIX_BITS` bits of a scaled matrix) make every input get an
answer quickly, in bounded memory.  Any deviation raises
:class:`Unusable`, naming the field.  A matrix becomes ``(rows of int numerators, den)``.
"""

import gzip
import json
import os
import re
import stat
import zlib
from collections.abc import Sequence
from fractions import Fraction
from math import gcd
from pathlib import Path
from typing import Any, NoReturn

from .verdict import Unusable

Matrix = tuple[list[list[int]], int]  # integer rows over one positive denominator

MAX_FILE_BYTES = 1 << 30  # a certificate or bound dataset file (after decompression)
MAX_DIGITS = 20000  # decimal digits of one integer, numerator or denominator
MAX_NODES = 1 << 25  # JSON values (containers and scalars) in one file
MAX_DEN_BITS = 1 << 17  # bits of any common denominator the checker forms
MAX_MATRIX_BITS = 1 << 30  # entries x bits of the common denominator, per matrix
CHUNK = 1 << 20  # bytes read (or decompressed) at a time
MAX_INFLATION = 32  # a gzip file's text is at most this many times the file ...
MIN_INFLATED = 1 << 20  # ... or at most this many bytes, whichever is larger
_RAT = re.compile(r"(-?)(0|[1-9][0-9]*)(?:/([1-9][0-9]*))?")  # ASCII digits only


class JsonFloat:
    """A float literal met in the JSON text; never a valid value, kept to name its field."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text


def kind_of(value: Any) -> str:
    if isinstance(value, JsonFloat):
        return f"the JSON float {value.text}"
    return {bool: "a boolean", int: "an integer", str: "a string", list: "a list",
            dict: "an object", type(None): "null"}.get(type(value), type(value).__name__)


def show(x: Fraction) -> str:
    """A Fraction as text, short enough for a message whatever its size."""
    bits = max(abs(x.numerator), x.denominator).bit_length()
    if bits > 256:
        return f"<a rational of {bits} bits>"
    return str(x.numerator) if x.denominator == 1 else f"{x.numerator}/{x.denominator}"


def number(x: int) -> str:
    """An integer as text for a message or a claim: its digits, or its bit length when it
    has more than 1,000 digits (beyond what a line should hold, and Python's int-to-str
    limit)."""
    bits = abs(x).bit_length()
    if bits <= 3300:
        return str(x)
    return f"<{'minus ' if x < 0 else ''}a number of {bits} bits>"


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = {}
    for key, value in pairs:
        if key in out:
            raise Unusable(f"duplicate key {key!r} in a JSON object")
        out[key] = value
    return out


def _constant(name: str) -> NoReturn:
    raise Unusable(f"{name} is not a number this format allows")


def decimal(text: str) -> int:
    """A string of ASCII digits (optionally ``-``) of at most MAX_DIGITS digits -> int,
    by halves (no dependence on Python's integer-string limit)."""
    negative = text.startswith("-")
    digits = text[1:] if negative else text
    if text == "-0":
        raise Unusable("-0 is not a canonical number")
    if len(digits) > MAX_DIGITS:
        raise Unusable(f"a number of {len(digits)} digits exceeds the limit of {MAX_DIGITS}")

    def conv(d: str) -> int:
        if len(d) <= 4000:
            return int(d)
        h = len(d) // 2
        return conv(d[:-h]) * int(10 ** h) + conv(d[-h:])

    value = conv(digits)
    return -value if negative else value


def lcm(a: int, b: int, where: str = "a common denominator") -> int:
    """``lcm(a, b)``, refused beyond :data:`MAX_DEN_BITS` bits (before anything computes
    with it): the one way the checker forms a common denominator."""
    m = a * b // gcd(a, b)
    if m.bit_length() > MAX_DEN_BITS:
        raise Unusable(f"{where}: a common denominator of {m.bit_length()} bits exceeds the "
                       f"limit of {MAX_DEN_BITS} bits (MAX_DEN_BITS)")
    return m


def bounded(den: int, where: str = "a common denominator") -> int:
    """``den`` unchanged when within :data:`MAX_DEN_BITS` bits, else :class:`Unusable`."""
    return lcm(den, 1, where)


def count_nodes(chunk: bytes | bytearray | str) -> int:
    """An upper bound on the JSON values that start in ``chunk`` (bytes or text): one per
    ``[`` not closed at once (a first element), ``,`` (a next one) and ``:`` (a member's
    value); the root is one more."""
    if isinstance(chunk, str):
        return chunk.count("[") - chunk.count("[]") + chunk.count(",") + chunk.count(":")
    return chunk.count(b"[") - chunk.count(b"[]") + chunk.count(b",") + chunk.count(b":")


def loads(text: str, max_nodes: int | None = None) -> Any:
    """Strict JSON text -> Python values (floats become :class:`JsonFloat` markers); at
    most ``max_nodes`` (MAX_NODES) values, counted before parsing."""
    most = MAX_NODES if max_nodes is None else max_nodes
    if 1 + count_nodes(text) > most:
        raise Unusable(f"more than {most} JSON values (the limit MAX_NODES)")
    return _parse(text)


def _parse(text: str) -> Any:
    try:
        return json.loads(text, object_pairs_hook=_pairs, parse_float=JsonFloat,
                          parse_int=decimal, parse_constant=_constant)
    except RecursionError:
        raise Unusable("JSON nested too deeply") from None
    except json.JSONDecodeError as exc:
        raise Unusable(f"not valid JSON (line {exc.lineno} column {exc.colno}: {exc.msg})") \
            from None


def _chunks(fh: Any, path: Path | str, cap: int, max_nodes: int,
            packed: int | None = None) -> bytearray:
    """The bytes of ``fh`` read CHUNK at a time; stops as soon as more than ``cap`` bytes or
    more than ``max_nodes`` JSON values (:func:`count_nodes`) have been seen, and, for a
    gzip file of ``packed`` bytes, as soon as the text passes ``MAX_INFLATION * packed``
    bytes and :data:`MIN_INFLATED`."""
    data, nodes = bytearray(), 1
    inflated = None if packed is None else max(MIN_INFLATED, MAX_INFLATION * packed)
    while True:
        chunk = fh.read(CHUNK)
        if not chunk:
            return data
        data += chunk
        nodes += count_nodes(chunk)
        if len(data) > cap:
            raise Unusable(f"{path}: more than {cap} bytes of JSON text (the limit "
                           "MAX_FILE_BYTES, after decompression)")
        if inflated is not None and len(data) > inflated:
            raise Unusable(f"{path}: a gzip file of {packed} bytes inflating to more than "
                           f"{inflated} bytes (the limit: {MAX_INFLATION} times the file "
                           f"(MAX_INFLATION), at least {MIN_INFLATED} bytes (MIN_INFLATED))")
        if nodes > max_nodes:
            raise Unusable(f"{path}: more than {max_nodes} JSON values (the limit MAX_NODES)")


def read_json(path: Path | str, max_bytes: int | None = None,
              max_nodes: int | None = None) -> Any:
    """Read a JSON file: a regular file of at most ``max_bytes`` (MAX_FILE_BYTES) bytes and
    ``max_nodes`` (MAX_NODES) JSON values, UTF-8 without BOM, optionally gzip-compressed
    (recognised by its magic bytes; decompressed a chunk at a time, and both limits hold
    for the decompressed text, so a small file that inflates to much more stops early; a
    gzip file may inflate to at most :data:`MAX_INFLATION` times its size, or
    :data:`MIN_INFLATED` bytes, so the reading work is bounded by the file itself)."""
    cap = MAX_FILE_BYTES if max_bytes is None else max_bytes
    most = MAX_NODES if max_nodes is None else max_nodes
    try:
        info = os.stat(path)
        if not stat.S_ISREG(info.st_mode):
            raise Unusable(f"{path}: not a regular file")
        if info.st_size > cap:
            raise Unusable(f"{path}: {info.st_size} bytes exceeds the limit of {cap} "
                           "(MAX_FILE_BYTES)")
        with open(path, "rb") as fh:
            if fh.read(2) == b"\x1f\x8b":
                fh.seek(0)
                try:
                    with gzip.GzipFile(fileobj=fh) as gz:
                        data = _chunks(gz, path, cap, most, info.st_size)
                except (OSError, EOFError, zlib.error) as exc:
                    raise Unusable(f"{path}: not a readable gzip file ({exc})") from None
            else:
                fh.seek(0)
                data = _chunks(fh, path, cap, most)
    except OSError as exc:
        raise Unusable(f"{path}: cannot read ({exc.strerror})") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise Unusable(f"{path}: not UTF-8 text (byte {exc.start})") from None
    del data
    if text.startswith("\ufeff"):
        raise Unusable(f"{path}: starts with a byte-order mark; JSON text has none")
    return _parse(text)


def obj(value: Any, where: str, required: Sequence[str],
        optional: Sequence[str] = ()) -> dict[str, Any]:
    """An object with exactly the ``required`` keys and possibly some ``optional`` ones."""
    if type(value) is not dict:
        raise Unusable(f"{where}: expected an object, found {kind_of(value)}")
    for key in required:
        if key not in value:
            raise Unusable(f"{where}.{key}: missing")
    for key in value:
        if key not in required and key not in optional:
            raise Unusable(f"{where}.{key}: unknown field")
    return value


def integer(value: Any, where: str, lo: int | None = None, hi: int | None = None) -> int:
    """A JSON integer (not a boolean, not a float) within ``[lo, hi]``."""
    if type(value) is not int:
        raise Unusable(f"{where}: expected an integer, found {kind_of(value)}")
    if (lo is not None and value < lo) or (hi is not None and value > hi):
        low = "-inf" if lo is None else number(lo)
        high = "inf" if hi is None else number(hi)
        raise Unusable(f"{where}: {number(value)} is outside [{low}, {high}]")
    return value


def exact_shape(value: Any, where: str, expected: list[int]) -> list[int]:
    """A tensor shape: exactly the list of JSON integers ``expected`` (a boolean is not an
    integer, so ``[true, 2]`` is not ``[1, 2]``)."""
    if type(value) is not list or any(type(x) is not int for x in value) \
            or value != expected:
        found = kind_of(value) if type(value) is not list else "[" + ", ".join(
            number(x) if type(x) is int else kind_of(x) for x in value[:4]) + (
            ", ...]" if len(value) > 4 else "]")
        raise Unusable(f"{where}: expected {expected}, found {found}")
    return value


def typed(value: Any, kind: type, where: str) -> Any:
    if type(value) is not kind:
        raise Unusable(f"{where}: expected {kind_of(kind())}, found {kind_of(value)}")
    return value


def choice(value: Any, options: Sequence[str], where: str) -> str:
    text: str = typed(value, str, where)
    if text not in options:
        raise Unusable(f"{where}: expected one of {list(options)}, found {text[:80]!r}")
    return text


_SMALL = {str(i): (i, 1) for i in range(-64, 65)}  # the commonest weights, read at once


def ratio(text: Any, where: str) -> tuple[int, int]:
    """Canonical ``"p"`` / ``"p/q"`` -> ``(p, q)``: ASCII digits, q > 1 and gcd 1, no -0."""
    if type(text) is str and text in _SMALL:
        return _SMALL[text]
    if type(text) is not str:
        hint = f" (write \"{text}\")" if type(text) is int and abs(text) < 10 ** 30 else ""
        raise Unusable(f"{where}: expected a 'p/q' string, found {kind_of(text)}{hint}")
    m = _RAT.fullmatch(text) if len(text) <= 2 * MAX_DIGITS + 2 else None
    if m is None or text == "-0":
        raise Unusable(f"{where}: {text[:40]!r} is not a canonical rational "
                       "'-?(0|[1-9][0-9]*)(/[1-9][0-9]*)?'")
    p = decimal(m.group(1) + m.group(2))
    q = decimal(m.group(3)) if m.group(3) else 1
    if m.group(3) and (q == 1 or gcd(p, q) != 1):
        raise Unusable(f"{where}: {text[:40]!r} is not in lowest terms")
    return p, q


def matrix(value: Any, where: str, rows: int | None = None,
           cols: int | None = None) -> Matrix:
    """A non-empty list of equal rows of rationals -> ``(num rows, den)``; optional shape."""
    if type(value) is not list or not value or any(type(r) is not list for r in value):
        raise Unusable(f"{where}: expected a non-empty list of rows")
    width = len(value[0])
    if width == 0 or any(len(r) != width for r in value):
        raise Unusable(f"{where}: rows must be non-empty and of one length")
    if (rows is not None and len(value) != rows) or (cols is not None and width != cols):
        raise Unusable(f"{where}: shape {len(value)}x{width}, expected "
                       f"{rows if rows is not None else '*'}x{cols if cols is not None else '*'}")
    pq = [[ratio(x, f"{where}[{i}][{j}]") for j, x in enumerate(r)] for i, r in enumerate(value)]
    den = 1
    for q in {q for r in pq for _, q in r}:
        den = lcm(den, q, where)
    if len(pq) * width * den.bit_length() > MAX_MATRIX_BITS:
        raise Unusable(f"{where}: {len(pq)}x{width} entries over a common denominator of "
                       f"{den.bit_length()} bits exceed the limit of {MAX_MATRIX_BITS} bits "
                       "(MAX_MATRIX_BITS)")
    return [[p * (den // q) for p, q in r] for r in pq], den


def vector(value: Any, where: str, length: int) -> Matrix:
    """A bias: a list of ``length`` rationals -> ``(column rows, den)``; ``None`` -> zeros."""
    if value is None:
        return [[0] for _ in range(length)], 1
    if type(value) is not list or len(value) != length:
        raise Unusable(f"{where}: expected null or a list of {length} rationals")
    return matrix([[x] for x in value], where)


def _affine(m: dict[str, Any], where: str, width: int) -> tuple[Matrix, Matrix, bool]:
    wt = matrix(m["weight"], f"{where}.weight", cols=width)
    return wt, vector(m["bias"], f"{where}.bias", len(wt[0])), m["bias"] is not None


BIASES = ("query_bias", "key_bias", "value_bias", "output_bias")


def _head(h: Any, hw: str, width: int) -> dict[str, Any]:
    """A head: four matrices; optional biases (``None`` when absent) and a positive
    ``scale`` (a ratio, default 1)."""
    obj(h, hw, ("query", "key", "value", "output"), (*BIASES, "scale"))
    v = matrix(h["value"], f"{hw}.value", cols=width)
    q = matrix(h["query"], f"{hw}.query", cols=width)
    k = matrix(h["key"], f"{hw}.key", rows=len(q[0]), cols=width)
    o = matrix(h["output"], f"{hw}.output", rows=width, cols=len(v[0]))
    head: dict[str, Any] = {"query": q, "key": k, "value": v, "output": o}
    for name, rows in zip(BIASES, (len(q[0]), len(k[0]), len(v[0]), width)):
        if name in h and h[name] is None:
            raise Unusable(f"{hw}.{name}: a list of {rows} rationals (leave an absent bias out)")
        head[name] = vector(h[name], f"{hw}.{name}", rows) if name in h else None
    scale = ratio(h.get("scale", "1"), f"{hw}.scale")
    if scale[0] <= 0:
        raise Unusable(f"{hw}.scale: a score scale must be positive")
    head["scale"] = scale
    return head


def _uniform(h: dict[str, Any]) -> bool:
    """The head's weights are uniform: ``W_K = 0``, or ``W_Q = 0`` without a query bias."""
    def zero(m: Matrix | None) -> bool:
        return m is None or all(x == 0 for r in m[0] for x in r)

    return zero(h["key"]) or (zero(h["query"]) and zero(h["query_bias"]))


def _attention(la: Any, w: str, width: int, n: int) -> dict[str, Any]:
    obj(la, w, ("type", "kind", "residual", "keys", "heads"), ("causal",))
    causal = typed(la.get("causal", False), bool, f"{w}.causal")
    akind = choice(la["kind"], ("uniform", "hardmax", "softmax"), f"{w}.kind")
    residual = typed(la["residual"], bool, f"{w}.residual")
    keys = la["keys"]
    if keys is not None:
        if type(keys) is not list or not keys:
            raise Unusable(f"{w}.keys: expected null or a non-empty list of positions")
        for j, k in enumerate(keys):
            integer(k, f"{w}.keys[{j}]", 0, n - 1)
            if j and k <= keys[j - 1]:
                raise Unusable(f"{w}.keys: positions must be strictly increasing")
    if causal and keys is not None and keys[0] != 0:
        raise Unusable(f"{w}.keys: a causal layer's keys include position 0")
    if type(la["heads"]) is not list or not la["heads"]:
        raise Unusable(f"{w}.heads: expected a non-empty list")
    heads = [_head(h, f"{w}.heads[{j}]", width) for j, h in enumerate(la["heads"])]
    zero = [_uniform(h) for h in heads]
    if akind == "uniform" and not all(zero):
        raise Unusable(f"{w}: uniform attention with non-zero query and key weights")
    return {"type": "attention", "kind": akind, "residual": residual, "keys": keys,
            "heads": heads, "zero_scores": zero, "causal": causal}


def extended(layers: list[dict[str, Any]]) -> str | None:
    """The first feature beyond Kajitsuka & Sato's model (positions, biases, scales, causal
    masks) that the network uses, or ``None``."""
    for i, la in enumerate(layers):
        if la["type"] == "embedding" and la["positions"] is not None:
            return f"layer {i}: positional embeddings"
        if la["type"] == "attention":
            if la["causal"]:
                return f"layer {i}: a causal mask"
            for h in la["heads"]:
                if h["scale"] != (1, 1) or any(h[b] is not None for b in BIASES):
                    return f"layer {i}: attention biases or score scales"
    return None


def network(value: Any) -> tuple[dict[str, Any], list[dict[str, Any]], dict[str, Any]]:
    """Parse and shape-check ``network``; returns (input, layers, readout) as plain dicts."""
    obj(value, "network", ("input", "layers", "readout"))
    inp = obj(value["input"], "network.input", ("kind", "dim", "seq_len"))
    kind = choice(inp["kind"], ("token-ids", "vectors"), "network.input.kind")
    dim = integer(inp["dim"], "network.input.dim", 1)
    n = integer(inp["seq_len"], "network.input.seq_len", 1)
    if type(value["layers"]) is not list:
        raise Unusable("network.layers: expected a list")
    layers = []
    width = dim
    for i, la in enumerate(value["layers"]):
        w = f"network.layers[{i}]"
        t = obj(la, w, ("type",), ("table", "positions", "weight", "bias", "residual", "maps",
                                   "kind", "keys", "heads", "causal"))["type"]
        if (t == "embedding") != (i == 0 and kind == "token-ids"):
            raise Unusable(f"{w}: a token-ids network starts with its one embedding layer")
        if t == "embedding":
            obj(la, w, ("type", "table"), ("positions",))
            table = matrix(la["table"], f"{w}.table", cols=dim)
            pos = matrix(la["positions"], f"{w}.positions", len(table[0]), n) \
                if "positions" in la else None
            layers.append({"type": t, "table": table, "positions": pos})
            width = len(table[0])
        elif t == "linear":
            obj(la, w, ("type", "weight", "bias"))
            wt, b, present = _affine(la, w, width)
            layers.append({"type": "feedforward", "maps": [(wt, b)], "residual": False,
                           "bias_present": [present]})
            width = len(wt[0])
        elif t == "feedforward":
            obj(la, w, ("type", "residual", "maps"))
            residual = typed(la["residual"], bool, f"{w}.residual")
            if type(la["maps"]) is not list or not la["maps"]:
                raise Unusable(f"{w}.maps: expected a non-empty list")
            maps: list[tuple[Matrix, Matrix]] = []
            biased: list[bool] = []
            inw = width
            for j, m in enumerate(la["maps"]):
                wt, b, p = _affine(obj(m, f"{w}.maps[{j}]", ("weight", "bias")),
                                   f"{w}.maps[{j}]", inw)
                maps.append((wt, b))
                biased.append(p)
                inw = len(wt[0])
            if residual and inw != width:
                raise Unusable(f"{w}: a residual block must keep the dimension {width}")
            layers.append({"type": "feedforward", "maps": maps, "residual": residual,
                           "bias_present": biased})
            width = inw
        elif t == "attention":
            layers.append(_attention(la, w, width, n))
        else:
            raise Unusable(f"{w}.type: unknown layer type {t!r}")
    ro = obj(value["readout"], "network.readout", ("kind", "positions"))
    rkind = choice(ro["kind"], ("scalar", "argmax"), "network.readout.kind")
    read_at = choice(ro["positions"], ("last", "first", "every"), "network.readout.positions")
    if rkind == "scalar" and width != 1:
        raise Unusable(f"network.readout: a scalar readout needs output dimension 1, not {width}")
    read = {"last": [n - 1], "first": [0], "every": list(range(n))}[read_at]
    return {"kind": kind, "dim": dim, "n": n, "out_dim": width}, layers, \
        {"kind": rkind, "positions": read, "name": read_at}
