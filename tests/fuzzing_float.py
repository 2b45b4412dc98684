"""Float-exact claims for the checker's fuzzer: genuine certificates that claim IEEE formats,
mutations aimed at the float-exact rule, crafted attacks, and an oracle that never uses the
checker (docs/float-exact.md states the semantics it encodes).

Oracle (:func:`float_reference_accepts`): the certificate without its float claim must be a
true certificate by :func:`fuzzing.reference_accepts`; and for every claimed format

1. every weight and vector input is zero or a *normal* float of the format (the producer's
   exact rounding, :mod:`exactmem.floats.formats`), and
2. the producer's float evaluation (:mod:`exactmem.floats.mpfr_eval`, every operation
   correctly rounded) gives exactly the exact outputs in three runs: the format's full IEEE
   range (gradual underflow); its normal range only (what a machine that flushes subnormals
   can hold; weights are rounded into it too); and the latter with the hidden units of every
   feed-forward block reversed (another summation order).

Shared by tests/checker/test_float_exact_fuzz.py and scripts/fuzz_checker.py.
"""

from __future__ import annotations

import copy
import dataclasses
import random
from collections.abc import Callable
from fractions import Fraction
from pathlib import Path
from typing import Any

import gmpy2
from fuzzing import genuine, redigest, reference_accepts, text_of, write

from exactmem.arith import ScaledMatrix
from exactmem.arith.rational import format_rational
from exactmem.certificate import build_certificate, claim_float_exact
from exactmem.certificate.build import digest_of
from exactmem.certificate.encode import spec_from_json
from exactmem.constructions import get
from exactmem.constructions.base import BuildResult
from exactmem.datasets.draw import generate
from exactmem.floats.fidelity import exact_values_of
from exactmem.floats.formats import FORMATS as FLOATS
from exactmem.floats.formats import FloatFormat, round_to_format
from exactmem.floats.mpfr_eval import exact_values, forward_float
from exactmem.model.dataset import dataset_from_json
from exactmem.model.evaluate import evaluate
from exactmem.model.spec import (
    Affine,
    Embedding,
    FeedForward,
    Linear,
    NetworkSpec,
    Readout,
)

Cert = dict[str, Any]

# significand bits P, exponent of the smallest normal, overflow exponent (2^hi), per format
RANGES = {"bfloat16": (8, -126, 128), "float16": (11, -14, 16), "float32": (24, -126, 128),
          "float64": (53, -1022, 1024)}


def tiny_network(scales: list[Fraction], seed: int = 7, N: int = 64) -> Cert:  # noqa: N803
    """``N`` one-token sequences, each token embedded as the one-hot vector of its label
    (4 classes), then ``x -> s x`` per scale, argmax readout: exact for any positive scales;
    its float claims depend only on the scales' range."""
    ds = generate("next-token", N=N, n=1, vocab=N, classes=4, seed=seed)
    table = [[0] * N for _ in range(4)]
    for seq, y in zip(ds.sequences, ds.labels, strict=True):
        table[y][seq[0]] = 1
    layers: list[Any] = [Embedding(ScaledMatrix.from_rows(table))]
    layers += [Linear(Affine(ScaledMatrix.from_rows([[s * int(i == j) for j in range(4)]
                                                     for i in range(4)]))) for s in scales]
    spec = NetworkSpec(input_kind="token-ids", input_dim=N, seq_len=1, layers=tuple(layers),
                       readout=Readout("argmax", "last"))
    ev = evaluate(spec, ds)
    assert ev.memorized
    return build_certificate(ds, BuildResult(spec, {}), "lookup", ev)


def _float_ready(name: str, task_args: dict[str, Any], bits: int) -> Callable[[], Cert]:
    def make() -> Cert:
        ds = generate("next-token", **task_args)
        con = get(name)
        result = con.build(ds, {**con.defaults(), "max_bits": bits})
        return build_certificate(ds, result, name, evaluate(result.spec, ds))
    return make


# genuine certificates, each claiming every format the producer finds
FLOAT_SETTINGS: dict[str, Callable[[], Cert]] = {
    "float:lookup": lambda: genuine("lookup"),
    "float:vardi2022-relu": lambda: genuine("vardi2022-relu"),
    "float:lookup-24": _float_ready("lookup", {"N": 12, "n": 4, "vocab": 6, "classes": 3,
                                               "seed": 1}, 24),
    "float:kajitsuka-8": _float_ready("kajitsuka2025-next-token",
                                      {"N": 16, "n": 3, "vocab": 4, "classes": 2, "seed": 1}, 8),
    # at the edge of the normal range: bfloat16/float32 (2^-126), float16 (2^-14 products),
    # float64 (2^-1022 products)
    "float:edge-bf16": lambda: tiny_network([Fraction(1, 2 ** 126)], N=16),
    "float:edge-f16": lambda: tiny_network([Fraction(1, 2 ** 7)] * 2, N=16),
    "float:edge-f64": lambda: tiny_network([Fraction(1, 2 ** 511)] * 2, N=16),
}


def float_genuine(name: str) -> Cert:
    cert = FLOAT_SETTINGS[name]()
    held = claim_float_exact(cert)
    assert held, name
    return cert


# ---------------------------------------------------------------- the oracle
class _NormalOnly(FloatFormat):
    """``fmt``'s significand and only its normal exponent range: a result below the
    smallest normal underflows (to zero or to the smallest normal), as no FTZ machine can
    hold it; weights are rounded into the same range."""

    def context(self) -> gmpy2.context:
        ctx = gmpy2.context(precision=self.precision, round=gmpy2.RoundToNearest)
        assert self.emin is not None and self.emax is not None
        ctx.emin, ctx.emax = self.emin, self.emax
        return ctx


def _normal_only(name: str) -> FloatFormat:
    p, lo, hi = RANGES[name]
    return _NormalOnly(f"{name}-normal", p, lo + 1, hi)  # MPFR: 0.5 * 2^(lo + 1) = 2^lo


def _reverse_hidden(spec: NetworkSpec) -> NetworkSpec:
    """The same function with the hidden units of every feed-forward block reversed: every
    dot product over hidden units is then summed in the opposite order."""
    def rows(m: ScaledMatrix) -> ScaledMatrix:
        return ScaledMatrix(m.num[::-1], m.den, m.cols)

    def cols(m: ScaledMatrix) -> ScaledMatrix:
        return ScaledMatrix(tuple(r[::-1] for r in m.num), m.den, m.cols)

    layers: list[Any] = []
    for la in spec.layers:
        if isinstance(la, FeedForward):
            maps = list(la.layers)
            for i in range(len(maps) - 1):
                a, b = maps[i], maps[i + 1]
                maps[i] = Affine(rows(a.weight), None if a.bias is None else rows(a.bias))
                maps[i + 1] = Affine(cols(b.weight), b.bias)
            la = dataclasses.replace(la, layers=tuple(maps))
        layers.append(la)
    return dataclasses.replace(spec, layers=tuple(layers))


def _values(spec: NetworkSpec, ds: Any) -> list[Fraction]:
    out: list[Fraction] = []
    for la in spec.layers:
        for m in _matrices(la):
            out += [Fraction(x, m.den) for r in m.num for x in r if x]
    if ds.inputs == "vectors":
        out += [x for seq in ds.sequences for tok in seq for x in tok if x]
    return out


def _matrices(la: Any) -> list[ScaledMatrix]:
    if isinstance(la, Embedding):
        return [la.table]
    if isinstance(la, Linear):
        return [m for m in (la.map.weight, la.map.bias) if m is not None]
    if isinstance(la, FeedForward):
        return [m for a in la.layers for m in (a.weight, a.bias) if m is not None]
    return [m for h in la.heads for m in (h.query, h.key, h.value, h.output)]


def normal_values(spec: NetworkSpec, ds: Any, name: str) -> tuple[bool, str]:
    """Condition 1 of the module docstring for one format."""
    lo = RANGES[name][1]
    for v in _values(spec, ds):
        if abs(v) < Fraction(2) ** lo or round_to_format(v, FLOATS[name]) != v:
            return False, f"{name}: the value {str(v)[:40]} is not a normal float"
    return True, ""


def float_runs_agree(spec: NetworkSpec, ds: Any, name: str) -> tuple[bool, str]:
    """Condition 2 of the module docstring for one format."""
    exact = [[list(vec) for vec in row] for row in exact_values_of(spec, ds)]
    runs = (("IEEE", spec, FLOATS[name]), ("normal range", spec, _normal_only(name)),
            ("normal range, reversed order", _reverse_hidden(spec), _normal_only(name)))
    for label, net, fmt in runs:
        got = [[list(vec) for vec in row] for row in exact_values(forward_float(net, ds, fmt))]
        if got != exact:
            return False, f"{name}: the {label} float run differs from the exact outputs"
    return True, ""


def float_claim_holds(spec: NetworkSpec, ds: Any, name: str) -> tuple[bool, str]:
    """Conditions 1 and 2 of the module docstring for one format."""
    ok, why = normal_values(spec, ds, name)
    return float_runs_agree(spec, ds, name) if ok else (ok, why)


def float_reference_accepts(cert: Cert) -> tuple[bool, str]:
    """Is ``cert`` true, its float claim included?  Without a float claim this is
    :func:`fuzzing.reference_accepts`."""
    claims = cert.get("claims") if isinstance(cert, dict) else None
    if not isinstance(claims, dict) or "float_exact" not in claims:
        return reference_accepts(cert)
    try:
        formats = claims["float_exact"]
        if type(formats) is not list or not formats or len(set(formats)) < len(formats) \
                or any(f not in RANGES for f in formats):
            return False, "float_exact is not a list of distinct known formats"
        if cert.get("digest") != digest_of(cert):
            return False, "digest"
        plain = copy.deepcopy(cert)
        del plain["claims"]["float_exact"]
        ok, why = reference_accepts(redigest(plain, rehash_dataset=False))
        if not ok:
            return False, why
        spec = spec_from_json(cert["network"])
        ds = dataset_from_json(cert["dataset"]["data"])
        for name in formats:
            ok, why = float_claim_holds(spec, ds, name)
            if not ok:
                return False, why
        return True, "true certificate, float claim included"
    except Exception as exc:  # noqa: BLE001 - the reference rejects what it cannot read
        return False, f"reference cannot read it: {type(exc).__name__}: {exc}"


# ---------------------------------------------------------------- mutations
def _weights(c: Cert) -> list[tuple[list[Any], int]]:
    """Every ``(row list, index)`` holding a weight of the network."""
    found: list[tuple[list[Any], int]] = []

    def rows(m: Any) -> None:
        if isinstance(m, list):
            for r in m:
                if isinstance(r, list):
                    found.extend((r, j) for j in range(len(r)))
                else:
                    found.extend((m, j) for j in range(len(m)))
                    return

    for la in c["network"]["layers"]:
        for key in ("table", "weight", "bias"):
            rows(la.get(key))
        for m in la.get("maps", []):
            rows(m.get("weight"))
            rows(m.get("bias"))
        for h in la.get("heads", []):
            for key in ("query", "key", "value", "output"):
                rows(h.get(key))
    return found


def _pairs(c: Cert) -> list[tuple[dict[str, Any], dict[str, Any], str]]:
    """``(A, B, where)``: affine maps with only a ReLU (or nothing) between them, so that
    ``A`` scaled by ``s > 0`` and ``B``'s weight by ``1/s`` compute the same function."""
    out = []
    layers = c["network"]["layers"]
    for i, la in enumerate(layers):
        if la.get("type") == "feedforward":
            maps = la["maps"]
            out += [(maps[k], maps[k + 1], f"layers[{i}].maps[{k}]")
                    for k in range(len(maps) - 1)]
        nxt = layers[i + 1] if i + 1 < len(layers) else None
        if nxt is not None and nxt.get("type") == "linear" and la.get("type") in (
                "linear", "embedding"):
            out.append((la, nxt, f"layers[{i}]"))
    return out


def _q(v: Fraction) -> str:
    return format_rational(v)


def _scale(m: Any, s: Fraction) -> Any:
    if m is None:
        return None
    if m and isinstance(m[0], list):
        return [[_q(Fraction(x) * s) for x in r] for r in m]
    return [_q(Fraction(x) * s) for x in m]


def _resettle(c: Cert) -> None:
    """Recompute the exact claims and sizes with the producer, so that only the float claim
    can be false (left as is when the network no longer memorizes or no longer reads)."""
    from exactmem.model.sizes import sizes

    try:
        spec = spec_from_json(c["network"])
        ds = dataset_from_json(c["dataset"]["data"])
        ev = evaluate(spec, ds)
    except Exception:  # noqa: BLE001 - a broken mutation stays broken
        return
    if ev.memorized:
        c["claims"]["outputs"] = [[None if v is None else _q(Fraction(v)) for v in row]
                                  for row in ev.predictions]
        c["sizes"] = sizes(spec).as_dict()


def _pick_format(c: Cert, rng: random.Random) -> str:
    claimed = c["claims"].get("float_exact") or list(RANGES)
    return rng.choice(claimed) if rng.random() < 0.8 else rng.choice(list(RANGES))


FLOAT_KINDS = ("subnormal", "edge", "not-a-float", "scale", "claim", "sum", "input")


def float_mutate(cert: Cert, rng: random.Random) -> tuple[str, str | Cert]:
    """One mutation aimed at the float claim; returns ``(description, certificate or text)``."""
    c = copy.deepcopy(cert)
    kind = rng.choice(FLOAT_KINDS)
    name = _pick_format(c, rng)
    p, lo, hi = RANGES[name]
    weights = [w for w in _weights(c) if Fraction(w[0][w[1]]) != 0] or _weights(c)
    row, j = rng.choice(weights)
    old = Fraction(row[j])
    sign = -1 if old < 0 else 1
    if kind == "subnormal":  # a subnormal of the format
        row[j] = _q(sign * Fraction(rng.randrange(1, 2 ** min(p - 1, 6)), 2 ** (p - 1 - lo)))
        desc = f"{name} subnormal weight {row[j][:24]}"
    elif kind == "edge":
        v = rng.choice([Fraction(2) ** lo, Fraction(2) ** (lo - 1),
                        Fraction(3, 2) * Fraction(2) ** lo,
                        (2 - Fraction(2) ** (1 - p)) * Fraction(2) ** (hi - 1),
                        Fraction(2) ** hi])
        row[j] = _q(sign * v)
        desc = f"{name} edge weight 2^{v.numerator.bit_length() - v.denominator.bit_length()}"
    elif kind == "not-a-float":
        v = rng.choice([old * (1 + Fraction(1, 2 ** p)), old + Fraction(1, 3),
                        old * (2 ** p + 1), old + Fraction(1, 2 ** (p - lo))])
        row[j] = _q(v)
        desc = f"{name} weight {old} -> not a float"
    elif kind == "scale":
        pairs = _pairs(c)
        if not pairs:
            return float_mutate(cert, rng)
        a, b, where = rng.choice(pairs)
        e = rng.choice([lo, lo + 1, lo - 1, lo // 2, -p, -3, 3, p, hi // 2, hi - 1, hi])
        s = Fraction(2) ** e
        for key in ("table", "weight", "bias"):
            if key in a:
                a[key] = _scale(a[key], s)
        b["weight"] = _scale(b["weight"], 1 / s)
        desc = f"{where} scaled by 2^{e}, the next map by 2^{-e}"
    elif kind == "claim":
        choices: list[Any] = [
            sorted(rng.sample(list(RANGES), rng.randint(1, 4))),
            rng.sample(list(RANGES), rng.randint(1, 4)),
            ["bfloat16"], ["float16"], ["float16", "bfloat16"],
            [name, name], ["tf32"], ["float8"], [], "float32", ["Float32"], [32]]
        c["claims"]["float_exact"] = copy.deepcopy(rng.choice(choices))
        desc = f"claims.float_exact = {c['claims']['float_exact']!r}"
    elif kind == "sum":  # a term past 2^P units of its grid, or a sum at the bound
        row[j] = _q(old * 2 ** rng.choice([p - 1, p, p + 1]))
        desc = f"{name} weight {old} scaled towards 2^P"
    else:
        data = c["dataset"]["data"]
        seqs = data["sequences"]
        i = rng.randrange(len(seqs))
        k = rng.randrange(len(seqs[i]))
        if isinstance(seqs[i][k], list):
            seqs[i][k][rng.randrange(len(seqs[i][k]))] = _q(
                rng.choice([Fraction(1, 2 ** (1 - lo)), Fraction(2) ** lo, Fraction(1, 3)]))
            desc = f"{name} vector input {i},{k}"
        else:
            row[j] = _q(sign * Fraction(1, 2 ** (1 - lo)))
            desc = f"{name} half the smallest normal as weight"
    if kind != "claim" and rng.random() < 0.85:
        _resettle(c)
    return desc, redigest(c, rehash_dataset=True)


# ---------------------------------------------------------------- crafted attacks
def _claiming(cert: Cert, formats: Any) -> Cert:
    c = copy.deepcopy(cert)
    c["claims"] = {**c["claims"], "float_exact": formats}
    c["digest"] = digest_of(c)
    return c


def crafted_float(tmp: Path) -> list[tuple[str, Path, int]]:
    """The float attacks as files with the exit code they must get."""
    cases: list[tuple[str, Cert, int]] = [
        ("bfloat16 claim, weights 2^-130", _claiming(tiny_network([Fraction(1, 2 ** 130)]),
                                                     ["bfloat16"]), 1),
        ("bfloat16 claim, products 2^-65 x 2^-65",
         _claiming(tiny_network([Fraction(1, 2 ** 65)] * 2), ["bfloat16"]), 1),
        ("float16 claim, weights 2^-20", _claiming(tiny_network([Fraction(1, 2 ** 20)]),
                                                   ["float16"]), 1),
        ("float16 claim, products 2^-8 x 2^-8",
         _claiming(tiny_network([Fraction(1, 2 ** 8)] * 2), ["float16"]), 1),
        ("float32 claim, weights 2^-127", _claiming(tiny_network([Fraction(1, 2 ** 127)]),
                                                    ["float32"]), 1),
        ("float64 claim, products 2^-512 x 2^-512",
         _claiming(tiny_network([Fraction(1, 2 ** 512)] * 2), ["float64"]), 1),
        ("bfloat16 claim, weights 2^128 (overflow)",
         _claiming(tiny_network([Fraction(2 ** 128)]), ["bfloat16"]), 1),
        ("tf32 claim", _claiming(tiny_network([Fraction(1)]), ["tf32"]), 2),
        ("bfloat16 claimed twice", _claiming(tiny_network([Fraction(1)]),
                                             ["bfloat16", "bfloat16"]), 2),
    ]
    return [(label, write(tmp, f"float_attack{k}.json", text_of(cert)), code)
            for k, (label, cert, code) in enumerate(cases)]
