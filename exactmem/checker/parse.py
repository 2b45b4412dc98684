"""Reading a certificate into plain Python values (standard library only).

Rationals are ``"p/q"`` strings; a matrix becomes ``(rows of int numerators, den)`` with
one shared positive denominator.  Any deviation raises :class:`Unusable`, naming the field.
"""

import re
from fractions import Fraction

_RAT = re.compile(r"^([+-]?\d+)(?:/(\d+))?$")


class Unusable(Exception):
    """The certificate cannot be read (not the format, a field malformed)."""


def rational(text, where):
    """``"p"`` or ``"p/q"`` -> Fraction; anything else (floats included) is unusable."""
    if not isinstance(text, str):
        raise Unusable(f"{where}: expected a 'p/q' string, found {type(text).__name__}")
    m = _RAT.match(text)
    if m is None or (m.group(2) is not None and int(m.group(2)) == 0):
        raise Unusable(f"{where}: {text!r} is not a rational 'p/q'")
    return Fraction(int(m.group(1)), int(m.group(2) or 1))


def matrix(obj, where, rows=None, cols=None):
    """A list of rows of rationals -> ``(num rows, den)``; optional shape check."""
    if not isinstance(obj, list) or not obj or not all(isinstance(r, list) for r in obj):
        raise Unusable(f"{where}: expected a non-empty list of rows")
    width = len(obj[0])
    if any(len(r) != width for r in obj):
        raise Unusable(f"{where}: rows of different lengths")
    if (rows is not None and len(obj) != rows) or (cols is not None and width != cols):
        raise Unusable(f"{where}: shape {len(obj)}x{width}, expected {rows}x{cols}")
    fr = [[rational(x, f"{where}[{i}][{j}]") for j, x in enumerate(r)] for i, r in enumerate(obj)]
    den = 1
    for r in fr:
        for x in r:
            den = den * x.denominator // _gcd(den, x.denominator)
    return [[x.numerator * (den // x.denominator) for x in r] for r in fr], den


def vector(obj, where, length):
    """A bias: a list of ``length`` rationals -> ``(column rows, den)``; ``None`` -> zeros."""
    if obj is None:
        return [[0] for _ in range(length)], 1
    if not isinstance(obj, list) or len(obj) != length:
        raise Unusable(f"{where}: expected a list of {length} rationals")
    return matrix([[x] for x in obj], where)


def _gcd(a, b):
    while b:
        a, b = b, a % b
    return abs(a)


def field(obj, key, kind, where):
    if not isinstance(obj, dict) or key not in obj:
        raise Unusable(f"{where}.{key}: missing")
    value = obj[key]
    if kind is int and (type(value) is not int):
        raise Unusable(f"{where}.{key}: expected an integer")
    if kind is not int and not isinstance(value, kind):
        raise Unusable(f"{where}.{key}: expected {kind.__name__}")
    return value


def network(obj):
    """Parse and shape-check ``network``; returns (input, layers, readout) as plain dicts."""
    inp = field(obj, "input", dict, "network")
    kind = field(inp, "kind", str, "network.input")
    dim = field(inp, "dim", int, "network.input")
    n = field(inp, "seq_len", int, "network.input")
    if kind not in ("token-ids", "vectors") or dim < 1 or n < 1:
        raise Unusable("network.input: kind must be token-ids/vectors, dim and seq_len >= 1")
    layers = []
    width = dim
    for i, la in enumerate(field(obj, "layers", list, "network")):
        w = f"network.layers[{i}]"
        t = field(la, "type", str, w)
        if t == "embedding":
            if i != 0 or kind != "token-ids":
                raise Unusable(f"{w}: an embedding must be the first layer of a token-ids network")
            table = matrix(field(la, "table", list, w), f"{w}.table", cols=dim)
            layers.append({"type": t, "table": table})
            width = len(table[0])
            continue
        if i == 0 and kind == "token-ids":
            raise Unusable(f"{w}: a token-ids network must start with an embedding")
        if t in ("linear", "feedforward"):
            maps_raw = [la] if t == "linear" else field(la, "maps", list, w)
            if not maps_raw:
                raise Unusable(f"{w}.maps: empty")
            maps, present, inw = [], [], width
            for j, m in enumerate(maps_raw):
                mw = w if t == "linear" else f"{w}.maps[{j}]"
                wt = matrix(field(m, "weight", list, mw), f"{mw}.weight", cols=inw)
                maps.append((wt, vector(m.get("bias"), f"{mw}.bias", len(wt[0]))))
                present.append(m.get("bias") is not None)
                inw = len(wt[0])
            residual = la.get("residual") is True
            if residual and inw != width:
                raise Unusable(f"{w}: residual block changes the dimension")
            layers.append({"type": "feedforward", "maps": maps, "residual": residual,
                           "bias_present": present})
            width = inw
        elif t == "attention":
            akind = field(la, "kind", str, w)
            if akind not in ("uniform", "hardmax", "softmax"):
                raise Unusable(f"{w}.kind: unknown attention kind {akind!r}")
            keys = la.get("keys")
            if keys is not None and (not isinstance(keys, list) or not keys or
                                     any(type(k) is not int or not 0 <= k < n for k in keys)):
                raise Unusable(f"{w}.keys: expected null or positions in [0, {n})")
            heads = []
            for j, h in enumerate(field(la, "heads", list, w)):
                hw = f"{w}.heads[{j}]"
                v = matrix(field(h, "value", list, hw), f"{hw}.value", cols=width)
                s = len(v[0])
                q = matrix(field(h, "query", list, hw), f"{hw}.query", cols=width)
                k = matrix(field(h, "key", list, hw), f"{hw}.key", rows=len(q[0]), cols=width)
                o = matrix(field(h, "output", list, hw), f"{hw}.output", rows=width, cols=s)
                heads.append({"query": q, "key": k, "value": v, "output": o})
            if not heads:
                raise Unusable(f"{w}.heads: empty")
            zero = [all(x == 0 for r in h["query"][0] for x in r) or
                    all(x == 0 for r in h["key"][0] for x in r) for h in heads]
            if akind == "uniform" and not all(zero):
                raise Unusable(f"{w}: uniform attention with non-zero query and key weights")
            layers.append({"type": t, "kind": akind, "residual": la.get("residual") is True,
                           "keys": keys, "heads": heads, "zero_scores": zero})
        else:
            raise Unusable(f"{w}.type: unknown layer type {t!r}")
    ro = field(obj, "readout", dict, "network")
    rkind = field(ro, "kind", str, "network.readout")
    pos = field(ro, "positions", str, "network.readout")
    if rkind not in ("scalar", "argmax") or pos not in ("last", "first", "every"):
        raise Unusable("network.readout: kind scalar/argmax, positions last/first/every")
    if rkind == "scalar" and width != 1:
        raise Unusable(f"network.readout: a scalar readout needs output dimension 1, not {width}")
    read = {"last": [n - 1], "first": [0], "every": list(range(n))}[pos]
    return {"kind": kind, "dim": dim, "n": n, "out_dim": width}, layers, \
        {"kind": rkind, "positions": read}
