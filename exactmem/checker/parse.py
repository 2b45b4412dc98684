"""Reading a certificate's fields from its JSON values (standard library only).

The grammar is strict (docs/certificate-format.md): no unknown or missing fields, rationals
written canonically as ASCII ``-?(0|[1-9][0-9]*)(/[1-9][0-9]*)?`` in lowest terms, JSON
integers where integers are meant; the JSON text itself is read by :mod:`.strict_json`.
Resource limits (:data:`MAX_DEN_BITS` bits of a common denominator, :data:`MAX_MATRIX_BITS`
bits of a scaled matrix, and the digits of a number, :data:`.strict_json.MAX_DIGITS`) make
every input get an answer quickly, in bounded memory.  Any deviation raises
:class:`Unusable`, naming the field.  A matrix becomes ``(rows of int numerators, den)``.
"""

import re
from collections.abc import Sequence
from fractions import Fraction
from math import gcd
from typing import Any

from .strict_json import MAX_DIGITS, JsonFloat, decimal
from .verdict import Unusable

Matrix = tuple[list[list[int]], int]  # integer rows over one positive denominator
Layer = dict[str, Any]  # a layer as :func:`network` returns it (its keys are listed there)
Head = dict[str, Any]  # an attention head as :func:`_head` returns it

MAX_DEN_BITS = 1 << 17  # bits of any common denominator the checker forms
MAX_MATRIX_BITS = 1 << 30  # entries x bits of the common denominator, per matrix
_RAT = re.compile(r"(-?)(0|[1-9][0-9]*)(?:/([1-9][0-9]*))?")  # ASCII digits only


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


def _head(h: Any, hw: str, width: int) -> Head:
    """A head: four matrices; optional biases (``None`` when absent) and a positive
    ``scale`` (a ratio, default 1)."""
    obj(h, hw, ("query", "key", "value", "output"), (*BIASES, "scale"))
    v = matrix(h["value"], f"{hw}.value", cols=width)
    q = matrix(h["query"], f"{hw}.query", cols=width)
    k = matrix(h["key"], f"{hw}.key", rows=len(q[0]), cols=width)
    o = matrix(h["output"], f"{hw}.output", rows=width, cols=len(v[0]))
    head: Head = {"query": q, "key": k, "value": v, "output": o}
    for name, rows in zip(BIASES, (len(q[0]), len(k[0]), len(v[0]), width)):
        if name in h and h[name] is None:
            raise Unusable(f"{hw}.{name}: a list of {rows} rationals (leave an absent bias out)")
        head[name] = vector(h[name], f"{hw}.{name}", rows) if name in h else None
    scale = ratio(h.get("scale", "1"), f"{hw}.scale")
    if scale[0] <= 0:
        raise Unusable(f"{hw}.scale: a score scale must be positive")
    head["scale"] = scale
    return head


def _uniform(h: Head) -> bool:
    """The head's weights are uniform: ``W_K = 0``, or ``W_Q = 0`` without a query bias."""
    def zero(m: Matrix | None) -> bool:
        return m is None or all(x == 0 for r in m[0] for x in r)

    return zero(h["key"]) or (zero(h["query"]) and zero(h["query_bias"]))


def _attention(la: Any, w: str, width: int, n: int) -> Layer:
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


def extended(layers: Sequence[Layer]) -> str | None:
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


def network(value: Any) -> tuple[dict[str, Any], list[Layer], dict[str, Any]]:
    """Parse and shape-check ``network``; returns (input, layers, readout) as plain dicts."""
    obj(value, "network", ("input", "layers", "readout"))
    inp = obj(value["input"], "network.input", ("kind", "dim", "seq_len"))
    kind = choice(inp["kind"], ("token-ids", "vectors"), "network.input.kind")
    dim = integer(inp["dim"], "network.input.dim", 1)
    n = integer(inp["seq_len"], "network.input.seq_len", 1)
    if type(value["layers"]) is not list:
        raise Unusable("network.layers: expected a list")
    layers: list[Layer] = []
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
