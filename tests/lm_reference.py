"""An independent judge of language-model certificates (mpmath at 400 bits and more; no
exactmem import): reads a decoded certificate by its documented meaning
(docs/trained-models.md, "Certificate"), evaluates the real-valued function of the stored
weights with mpmath, and says whether every claim the checker would state is true.

Used by the LM fuzzer (tests/lm_fuzzing.py, scripts/fuzz_lm_checker.py): a certificate the
checker accepts must be judged true here.  The judge is deliberately plain: lists of mpf,
one position at a time, mpmath's own exp / tanh / erf / sqrt / log at a working precision
far beyond the checker's (each logit is then within ``2**-(prec - 40)`` of its value for the
small models the fuzzer uses), and a margin counts as proved only above ``2**-(prec - 60)``.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from fractions import Fraction
from typing import Any

import mpmath

INT = re.compile(r"-?(0|[1-9][0-9]*)")
RAT = re.compile(r"-?(0|[1-9][0-9]*)(/[1-9][0-9]*)?")
FORMAT = "exactmem.lm-certificate/1"


class Malformed(Exception):
    """The certificate does not follow the documented format."""


def canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def _int(x: Any, lo: int = 1, hi: int = 1 << 16) -> int:
    if type(x) is not int or not lo <= x <= hi:
        raise Malformed(f"not an integer in [{lo}, {hi}]: {type(x).__name__}")
    return x


def _rational(text: Any) -> Fraction:
    if type(text) is not str or len(text) > 40002 or not RAT.fullmatch(text) or text == "-0":
        raise Malformed("not a canonical rational")
    num, _, den = text.partition("/")
    p, q = _long(num), _long(den) if den else 1
    if den and (q == 1 or math.gcd(p, q) != 1):
        raise Malformed("not in lowest terms")
    return Fraction(p, q)


def _tensor(entry: Any, shape: list[int]) -> list[list[Fraction]]:
    if type(entry) is not dict or set(entry) != {"shape", "scale", "values"}:
        raise Malformed("tensor fields")
    if type(entry["shape"]) is not list or any(type(x) is not int for x in entry["shape"]) \
            or entry["shape"] != shape:
        raise Malformed("tensor shape")
    e = _int(entry["scale"], 0, 1100)
    vals = entry["values"]
    size = shape[0] * (shape[1] if len(shape) == 2 else 1)
    if type(vals) is not list or len(vals) != size:
        raise Malformed("tensor size")
    nums = []
    for v in vals:
        if type(v) is not str or len(v) > 20001 or not INT.fullmatch(v) or v == "-0":
            raise Malformed("tensor value")
        nums.append(int(v) if len(v) < 4000 else _long(v))
    if e and not any(p & 1 for p in nums):
        raise Malformed("scale not least")
    cols = shape[1] if len(shape) == 2 else size
    return [[Fraction(p, 1 << e) for p in nums[i:i + cols]] for i in range(0, size, cols)]


def _long(text: str) -> int:
    neg = text.startswith("-")
    digits = text[1:] if neg else text
    value = 0
    for k in range(0, len(digits), 1000):
        chunk = digits[k:k + 1000]
        value = value * 10 ** len(chunk) + int(chunk)
    return -value if neg else value


def read(cert: Any) -> dict[str, Any]:
    """The certificate's meaning: model, sequences, labels, claims; :class:`Malformed` if it
    does not follow the format (digest and dataset hash included)."""
    if type(cert) is not dict or set(cert) != {"format", "model", "dataset", "claims",
                                               "digest"} or cert["format"] != FORMAT:
        raise Malformed("top level")
    body = {k: v for k, v in cert.items() if k != "digest"}
    if cert["digest"] != "sha256:" + hashlib.sha256(canonical(body).encode()).hexdigest():
        raise Malformed("digest")
    ds = cert["dataset"]
    if type(ds) is not dict or set(ds) != {"sha256", "data"}:
        raise Malformed("dataset entry (the fuzzer embeds its datasets)")
    data = ds["data"]
    if type(data) is not dict or set(data) != {"format", "task", "inputs", "vocab_size",
                                               "sequences", "labels"}:
        raise Malformed("dataset fields")
    if (data["format"], data["task"], data["inputs"]) != ("exactmem.dataset/1", "seq2seq",
                                                          "token-ids"):
        raise Malformed("dataset kind")
    if ds["sha256"] != hashlib.sha256(canonical(data).encode()).hexdigest():
        raise Malformed("dataset hash")
    m = cert["model"]
    keys = {"architecture", "vocab_size", "context", "d_model", "heads", "layers", "d_ff",
            "activation", "layer_norm_eps", "tied_head", "tensors"}
    flags = {"parallel_residual": True, "gated_mlp": True, "score_scale": False,
             "inverse_layer_scale": True}
    if type(m) is not dict or not keys <= set(m) or \
            not set(m) <= keys | {"norm", "final_norm", "kv_heads", "rotary_dims", *flags}:
        raise Malformed("model fields")
    if any(k in m and m[k] is not value for k, value in flags.items()):
        raise Malformed("model flags")
    v, t, d, h, n_layers, ff = (_int(m[k]) for k in ("vocab_size", "context", "d_model",
                                                      "heads", "layers", "d_ff"))
    if d % h or m["architecture"] not in ("pre-ln-decoder", "post-ln-decoder") or \
            m["activation"] not in ("gelu_tanh", "gelu_erf", "relu", "silu") or \
            m.get("norm", "layernorm") not in ("layernorm", "rmsnorm") or \
            type(m["tied_head"]) is not bool or m.get("final_norm", False) is not False:
        raise Malformed("model header")
    kv = _int(m["kv_heads"], 1, h - 1) if "kv_heads" in m else h
    rot = _int(m["rotary_dims"], 2, d // h) if "rotary_dims" in m else 0
    if h % kv or rot % 2 or ("parallel_residual" in m and m["architecture"] != "pre-ln-decoder"):
        raise Malformed("model options")
    eps = _rational(m["layer_norm_eps"])
    if eps < 0:
        raise Malformed("eps")
    final = "final_norm" not in m
    shapes = {"wte": [v, d]}
    if rot:
        shapes["rope.inv_freq"] = [rot // 2]
    else:
        shapes["wpe"] = [t, d]
    width = d + 2 * kv * (d // h)
    optional = set()
    if final:
        shapes.update({"lnf.weight": [d], "lnf.bias": [d]})
        optional.add("lnf.bias")
    if not m["tied_head"]:
        shapes["head"] = [v, d]
    for i in range(n_layers):
        p = f"h{i}."
        for name, shape in (("ln1", [d]), ("attn", [d, width]), ("attn.proj", [d, d]),
                            ("ln2", [d]), ("mlp.fc", [d, ff]), ("mlp.proj", [ff, d]),
                            *((("mlp.gate", [d, ff]),) if "gated_mlp" in m else ())):
            shapes[p + name + ".weight"] = shape
            shapes[p + name + ".bias"] = [shape[-1]]
            optional.add(p + name + ".bias")
    ts = m["tensors"]
    if type(ts) is not dict or not set(ts) <= set(shapes) or \
            not set(shapes) - optional <= set(ts):
        raise Malformed("tensor names")
    tensors = {k: _tensor(ts[k], shapes[k]) for k in ts}
    seqs, labels, size = data["sequences"], data["labels"], _int(data["vocab_size"], 1, v)
    if type(seqs) is not list or not seqs or type(labels) is not list or \
            len(labels) != len(seqs):
        raise Malformed("sequences")
    n = len(seqs[0]) if type(seqs[0]) is list else 0
    if not 1 <= n <= t:
        raise Malformed("sequence length")
    for s, y in zip(seqs, labels, strict=False):
        if type(s) is not list or type(y) is not list or len(s) != n or len(y) != n:
            raise Malformed("sequence")
        for x in s:
            _int(x, 0, size - 1)
        for x in y:
            _int(x, 0, 1 << 62)
    claims = cert["claims"]
    if type(claims) is not dict or not {"partial", "positions"} <= set(claims) or \
            not set(claims) <= {"partial", "positions", "code_length_bits"} or \
            type(claims["partial"]) is not bool:
        raise Malformed("claims")
    pos = claims["positions"]
    if type(pos) is not list or len(pos) != len(seqs):
        raise Malformed("positions")
    for row in pos:
        if type(row) is not list or any(type(p) is not int or not 0 <= p < n for p in row) \
                or any(b <= a for a, b in zip(row, row[1:], strict=False)):
            raise Malformed("positions row")
        if not claims["partial"] and len(row) != n:
            raise Malformed("all positions claimed")
    coded = None
    if "code_length_bits" in claims:
        rows = claims["code_length_bits"]
        if type(rows) is not list or len(rows) != len(seqs):
            raise Malformed("code lengths")
        coded = [_rational(c) for c in rows]
        for c, s, y in zip(coded, seqs, labels, strict=False):
            if c < 0 or any(y[k] != s[k + 1] for k in range(n - 1)) or y[-1] >= size:
                raise Malformed("code length of a sequence not labelled with its next tokens")
    return {"v": v, "d": d, "heads": h, "layers": n_layers, "tensors": tensors, "eps": eps,
            "post": m["architecture"] == "post-ln-decoder", "act": m["activation"],
            "norm": m.get("norm", "layernorm"), "final": final, "tied": m["tied_head"],
            "seqs": seqs, "labels": labels, "positions": pos, "coded": coded, "size": size,
            "n": n, "kv": kv, "rot": rot, "parallel": "parallel_residual" in m,
            "gated": "gated_mlp" in m, "scaled": "score_scale" not in m,
            "inverse": "inverse_layer_scale" in m}


class Undefined(Exception):
    """A norm divides by zero: the function is not defined there."""


def _mpf(x: Fraction) -> Any:
    return mpmath.mpf(x.numerator) / x.denominator


def logits(model: dict[str, Any], toks: list[int]) -> list[list[Any]]:
    """Every position's logits, at the current mpmath precision."""
    ts = {k: [[_mpf(x) for x in row] for row in rows] for k, rows in model["tensors"].items()}
    d, heads = model["d"], model["heads"]
    dh = d // heads
    eps = _mpf(model["eps"])

    def vec(name: str, size: int) -> list[Any]:  # a 1-D tensor is one row; absent: 0
        return ts[name][0] if name in ts else [mpmath.mpf(0)] * size

    def lin(x: list[Any], name: str) -> list[Any]:
        w = ts[name + ".weight"]
        b = vec(name + ".bias", len(w[0]))
        return [mpmath.fsum(x[i] * w[i][j] for i in range(len(x))) + b[j]
                for j in range(len(w[0]))]

    def norm(x: list[Any], name: str) -> list[Any]:
        g, b = vec(name + ".weight", d), vec(name + ".bias", d)
        c = x if model["norm"] == "rmsnorm" else [a - mpmath.fsum(x) / d for a in x]
        var = mpmath.fsum(a * a for a in c) / d + eps
        if var == 0:
            raise Undefined("a norm of a zero vector with eps 0")
        s = 1 / mpmath.sqrt(var)
        return [a * s * gi + bi for a, gi, bi in zip(c, g, b, strict=False)]

    def act(x: Any) -> Any:
        if model["act"] == "relu":
            return max(x, mpmath.mpf(0))
        if model["act"] == "gelu_erf":
            return x / 2 * (1 + mpmath.erf(x / mpmath.sqrt(2)))
        if model["act"] == "silu":
            return x / (1 + mpmath.exp(-x))
        inner = mpmath.sqrt(2 / mpmath.pi) * (x + mpmath.mpf(44715) / 10 ** 6 * x ** 3)
        return x / 2 * (1 + mpmath.tanh(inner))

    kv, rot = model["kv"], model["rot"]

    def rotate(x: list[Any], p: int) -> list[Any]:  # rotate_half on the first rot dims
        x, half = list(x), rot // 2
        for j in range(half):
            ang = p * ts["rope.inv_freq"][0][j]
            c, s = mpmath.cos(ang), mpmath.sin(ang)
            x[j], x[j + half] = x[j] * c - x[j + half] * s, x[j + half] * c + x[j] * s
        return x

    def attention(hs: list[list[Any]], name: str) -> list[list[Any]]:
        qkv = [lin(x, name) for x in hs]
        layer = int(name.split(".")[0][1:])
        div = (mpmath.sqrt(dh) if model["scaled"] else 1) * \
            (layer + 1 if model["inverse"] else 1)
        out = []
        for p in range(len(hs)):
            row = []
            for h in range(heads):
                g = h // (heads // kv)
                q = rotate(qkv[p][h * dh:(h + 1) * dh], p)
                keys = [rotate(qkv[j][d + g * dh:d + (g + 1) * dh], j) for j in range(p + 1)]
                scores = [mpmath.fsum(a * b for a, b in zip(q, key, strict=True))
                          / div for key in keys]
                top = max(scores)
                w = [mpmath.exp(s - top) for s in scores]
                total = mpmath.fsum(w)
                row += [mpmath.fsum(w[j] * qkv[j][d + (kv + g) * dh + k] for j in range(p + 1))
                        / total for k in range(dh)]
            out.append(row)
        return [lin(a, name + ".proj") for a in out]

    def mlp(x: list[Any], pre: str) -> list[Any]:
        u = [act(a) for a in lin(x, pre + ("mlp.gate" if model["gated"] else "mlp.fc"))]
        if model["gated"]:
            u = [a * b for a, b in zip(u, lin(x, pre + "mlp.fc"), strict=True)]
        return lin(u, pre + "mlp.proj")

    xs = [list(ts["wte"][t]) if rot else
          [a + b for a, b in zip(ts["wte"][t], ts["wpe"][p], strict=True)]
          for p, t in enumerate(toks)]
    for i in range(model["layers"]):
        pre = f"h{i}."
        if model["parallel"]:
            att = attention([norm(x, pre + "ln1") for x in xs], pre + "attn")
            ys = [mlp(norm(x, pre + "ln2"), pre) for x in xs]
            xs = [[a + b + c for a, b, c in zip(x, y, z, strict=True)]
                  for x, y, z in zip(xs, att, ys, strict=True)]
            continue
        hs = xs if model["post"] else [norm(x, pre + "ln1") for x in xs]
        att = attention(hs, pre + "attn")
        xs = [[a + b for a, b in zip(x, y, strict=True)] for x, y in zip(xs, att, strict=True)]
        if model["post"]:
            xs = [norm(x, pre + "ln1") for x in xs]
        hs = xs if model["post"] else [norm(x, pre + "ln2") for x in xs]
        ys = [mlp(x, pre) for x in hs]
        xs = [[a + b for a, b in zip(x, y, strict=False)] for x, y in zip(xs, ys, strict=False)]
        if model["post"]:
            xs = [norm(x, pre + "ln2") for x in xs]
    if model["final"]:
        xs = [norm(x, "lnf") for x in xs]
    head = ts["wte"] if model["tied"] else ts["head"]
    return [[mpmath.fsum(a * b for a, b in zip(x, row, strict=True)) for row in head]
            for x in xs]


def judge(cert: Any, prec: int = 400) -> tuple[bool, str]:
    """``(True, "")`` when the certificate is well-formed and every claim holds: each claimed
    position's label is the unique argmax by more than ``2**-(prec - 60)``, each claimed
    code length is at least the sequence's code length; else ``(False, why)``.  Margins
    closer than that are decided at four times the precision."""
    try:
        model = read(cert)
    except Malformed as exc:
        return False, f"malformed: {exc}"
    need = [i for i, row in enumerate(model["positions"]) if row or model["coded"]]
    for i in need:
        ok, why = _sequence(model, i, prec)
        if ok is None:
            ok, why = _sequence(model, i, 4 * prec)
        if not ok:
            return False, f"sequence {i}: {why}"
    return True, ""


def _sequence(model: dict[str, Any], i: int, prec: int) -> tuple[bool | None, str]:
    with mpmath.workprec(prec):
        try:
            ls = logits(model, model["seqs"][i])
        except Undefined as exc:
            return False, str(exc)
        tol = mpmath.mpf(2) ** -(prec - 60)
        for p in model["positions"][i]:
            y = model["labels"][i][p]
            if y >= model["v"]:
                return False, f"label {y} beyond the vocabulary"
            others = [x for k, x in enumerate(ls[p]) if k != y]
            if others:
                margin = ls[p][y] - max(others)
                if abs(margin) <= tol:
                    return None, f"position {p}: margin within 2^-{prec - 60}"
                if margin < 0:
                    return False, f"position {p}: label {y} is not the argmax"
        if model["coded"] is not None:
            code = mpmath.mpf(0)
            for p, y in enumerate(model["labels"][i]):
                if y >= model["v"]:
                    return False, f"label {y} beyond the vocabulary"
                top = max(ls[p])
                lse = top + mpmath.log(mpmath.fsum(mpmath.exp(x - top) for x in ls[p]))
                code += (lse - ls[p][y]) / mpmath.log(2)
            claimed = _mpf(model["coded"][i])
            if claimed < code - tol * (1 + abs(code)):
                return False, f"claimed code length {mpmath.nstr(claimed, 8)} < " \
                              f"{mpmath.nstr(code, 12)}"
    return True, ""


def code_lengths(cert: Any, prec: int = 400) -> list[Any]:
    """Each sequence's code length in bits (mpmath), for crafting code-length claims."""
    model = read(cert)
    out = []
    with mpmath.workprec(prec):
        for i, s in enumerate(model["seqs"]):
            ls = logits(model, s)
            code = mpmath.mpf(0)
            for p, y in enumerate(model["labels"][i]):
                top = max(ls[p])
                code += (top + mpmath.log(mpmath.fsum(mpmath.exp(x - top) for x in ls[p]))
                         - ls[p][y]) / mpmath.log(2)
            out.append(code)
    return out
