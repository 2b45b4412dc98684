"""Rigorous forward pass of a decoder language model, pre-LN or post-LN (standard library
only).

A value is a *ball*: a vector of integer midpoints ``m`` and one integer radius ``r`` (fixed
point, ``2**-F`` each), standing for every real vector ``x`` with ``|x_i - m_i / 2**F| <= r /
2**F`` for all ``i``.  The network's real-valued function (docs/trained-models.md) maps every
point of the input ball into the output ball:

- ``x W + b`` (weights ``W / 2**E`` exact): midpoints by one exact integer dot product per
  output, floored (radius + 1); radius ``r * max_j sum_i |W_ij|`` (outward);
- LayerNorm (population variance, ``eps`` exact): centred values, variance bounds from the
  centred balls, ``1 / sqrt(var + eps)`` by :func:`lm_bounds.rsqrt`;
- RMSNorm (``model["norm"]`` "rmsnorm"): the same without centring, mean-square bounds from
  the balls themselves (:func:`rmsnorm`);
- causal softmax attention (grouped-query when ``kv_heads < heads``; rotary positions on
  ``q`` and ``k`` first, :mod:`lm_ops`), scores ``q.k`` times a per-block scale ball
  (:func:`lm_model.score_scale`): :func:`lm_attention.attention`;
- GELU, tanh form ``x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x**3)))`` or erf form
  ``x/2 (1 + erf(x / sqrt 2))``: the inner argument is monotone, so its interval comes from
  the end points; tanh / erf at its midpoint, widened by their Lipschitz constants (1 and
  ``2/sqrt(pi) < 2``); the product by interval multiplication;
- ReLU: 1-Lipschitz, so ``max(m, 0)`` with the same radius; SiLU and a gated MLP's product:
  :mod:`lm_ops`.

Midpoint-radius form keeps each matrix-vector product to one integer dot product per output;
:func:`apply_all` and :func:`lm_attention.attention` compute those of all positions together
by Kronecker substitution (the same integers, :mod:`lm_attention`), and tanh / erf / exp run
at the precision the radius calls for (:func:`lm_bounds.at_radius`).  ``F`` is the default
precision; every function takes ``f`` (the certificate's, chosen by
:func:`lm_model.prepared`).
"""

from collections.abc import Iterable, Sequence
from math import isqrt
from operator import mul
from typing import Any

from . import lm_bounds, lm_fastgelu, lm_fusedgelu, lm_limbs, lm_ops
from .lm_attention import Balls, Rows, attention, ones, pack, slots, unpack
from .lm_bounds import SLACK, Degenerate, at_radius, ball, cdiv

Tensor = tuple[Rows, int]  # rows of numerators and the scale E: each entry num / 2**E
Ball = tuple[list[int], int]  # midpoints and one radius, units 2**-F
Lin = tuple[Rows, list[int], int, int, int]  # columns, bias, E, largest column 1-norm, bias
LnParams = tuple[list[int], list[int], int, int]  # gain, bias, E, largest |gain|
Model = dict[str, Any]  # the prepared model of lm_model, or one of its blocks

F = 128  # fractional bits of every value
ONE = 1 << F
GELU_A = (44715, 10 ** 6)  # 0.044715, the decimal constant of the tanh form


def linear(w: Tensor, b: Tensor | None, f: int = F) -> Lin:
    """Prepare ``x W + b`` (``w = (rows [in][out] of numerators, E)``, ``b`` likewise or
    None): columns, bias times ``2**F`` on one scale ``2**-E``, the largest column 1-norm
    and the largest bias."""
    rows, e = w
    cols = [list(c) for c in zip(*rows)]
    if b is not None and b[1] > e:
        cols = [[x << (b[1] - e) for x in c] for c in cols]
        e = b[1]
    return at_bias(cols, e, max(sum(map(abs, c)) for c in cols), b, f)


def at_bias(cols: Rows, e: int, l1: int, b: Tensor | None, f: int) -> Lin:
    """A map of :func:`linear` from its columns (scale ``2**-e``, ``e`` at least the bias's,
    largest column 1-norm ``l1``) with the bias ``b`` at ``2**-f``: the columns do not depend
    on ``f``, so a model prepared again at another precision shares them."""
    bias = [0] * len(cols) if b is None else [x << (e - b[1] + f) for x in b[0][0]]
    return cols, bias, e, l1, max(map(abs, bias))


def apply(lin: Lin, m: list[int], r: int) -> Ball:
    """``x W + b`` on one ball: one exact integer dot product per output, floored."""
    cols, bias, e, l1, _ = lin
    return [(sum(map(mul, c, m)) + b) >> e for c, b in zip(cols, bias)], cdiv(r * l1, 1 << e) + 1


def apply_all(lin: Lin, ms: Rows, rs: list[int]) -> Balls:
    """``x W + b`` on the balls ``(ms[p], rs[p])`` of every position at once, by Kronecker
    substitution.

    First the midpoints drop the bits the radii make meaningless: with ``g = bits(min r) -
    SLACK > 0``, the ball ``(m, r)`` lies in ``(floor(m / 2**g) 2**g, r + 2**g)``, a radius
    larger by at most ``r / 2**(SLACK-1)``.  Then input coordinate ``i`` of all positions
    is packed into one integer ``X_i = sum_p m'[p][i] * 2**(s p)``, so that
    ``sum_i W_ij X_i`` is ``sum_p (m'[p] . W_j) 2**(s p)``: one product of a weight by a
    packed integer per (input, output) serves every position.  Each slot holds a dot product
    of absolute value at most ``l1 * max|m'| < 2**(s-1)`` (``l1`` the largest column
    1-norm), so after adding ``2**(s-1)`` to every slot the slots are the base-``2**s``
    digits of the sum, read back exactly from its bytes; output ``j`` is then
    ``floor((2**g dot + b_j) / 2**E)``, radius + 1.  With ``g <= 0`` these are the integers
    of :func:`apply`.  A map prepared with its weight limbs runs :func:`lm_limbs.apply_all`
    (the same integers)."""
    if isinstance(lin, lm_limbs.Linear):
        return lm_limbs.apply_all(lin, ms, rs, SLACK)
    cols, bias, e, l1, _ = lin
    n = len(ms)
    g = min(r.bit_length() for r in rs) - SLACK
    if g > 0:
        ms = [[x >> g for x in m] for m in ms]
        rs = [r + (1 << g) for r in rs]
    else:
        g = 0
    xmax = max(max(map(abs, x)) for x in ms)
    sb, half = slots(max(l1 * xmax, xmax))
    lift = half * ones(n, sb)
    packed = [pack(col, sb, half) for col in zip(*ms)]
    outs = [[((y << g) + b) >> e for y in unpack(sum(map(mul, c, packed), lift), n, sb, half)]
            for c, b in zip(cols, bias)]
    return [list(row) for row in zip(*outs)], [cdiv(r * l1, 1 << e) + 1 for r in rs]


def layernorm(params: LnParams, m: list[int], r: int, eps: tuple[int, int],
              f: int = F) -> Ball:
    """``(x - mean) / sqrt(var + eps) * g + b`` on the ball ``(m, r)``."""
    d = len(m)
    mu = sum(m) // d  # true mean within [mu, mu + 1) + r
    return _normalised(params, [x - mu for x in m], 2 * r + 1, eps, f, "LayerNorm: the "
                       "variance plus eps may be 0")


def rmsnorm(params: LnParams, m: list[int], r: int, eps: tuple[int, int],
            f: int = F) -> Ball:
    """``x / sqrt(mean(x**2) + eps) * g + b`` on the ball ``(m, r)`` (RMSNorm: no centring)."""
    return _normalised(params, m, r, eps, f, "RMSNorm: the mean square plus eps may be 0")


def _normalised(params: LnParams, c: list[int], rc: int, eps: tuple[int, int], f: int,
                degenerate: str) -> Ball:
    """``c / sqrt(mean(c**2) + eps) * g + b`` for the ball ``(c, rc)`` (``c`` centred for
    LayerNorm, the input itself for RMSNorm).

    ``|c_i|`` lies in ``[(|c_i| - rc)_+, |c_i| + rc]``, so the mean square (``2**-2F``) lies in
    ``[floor(sum (|c_i| - rc)_+**2 / d), ceil(sum (|c_i| + rc)**2 / d)]``, plus ``eps``'s
    bounds; ``s = 1 / sqrt(.)`` in ``[slo, shi]`` by :func:`lm_bounds.rsqrt`.  With ``sm`` the
    midpoint of ``s`` and ``sr = shi - sm``, ``|x_i s - c_i sm| <= rc (sm + sr) + |c_i| sr``;
    times ``|g_i| <= gmax``; the floored midpoint adds 1."""
    g, bias, e, gmax = params
    d = len(c)
    vlo = sum(max(abs(x) - rc, 0) ** 2 for x in c) // d + eps[0]
    vhi = cdiv(sum((abs(x) + rc) ** 2 for x in c), d) + eps[1]
    if vlo <= 0 or isqrt(vlo) == 0:
        raise Degenerate(degenerate)
    slo, shi = lm_bounds.rsqrt(vlo, vhi, f)
    sm = (slo + shi) >> 1
    sr = shi - sm
    shift = f + e
    out = [(x * sm * gi + bi) >> shift for x, gi, bi in zip(c, g, bias)]
    rad = (max(map(abs, c)) * sr + sm * rc + rc * sr) * gmax
    return out, cdiv(rad, 1 << shift) + 1


NORMS = {"layernorm": layernorm, "rmsnorm": rmsnorm}


def ln_params(g: Tensor, b: Tensor, f: int = F) -> LnParams:
    """LayerNorm gain and bias on one scale; the bias times ``2**2F``."""
    (gn, eg), (bn, eb) = g, b
    e = max(eg, eb)
    gv = [x << (e - eg) for x in gn[0]]
    return gv, [x << (e - eb + 2 * f) for x in bn[0]], e, max(map(abs, gv))


def gelu(kind: str, m: list[int], r: int, consts: dict[str, Any],
         f: int = F) -> Ball:
    """GELU (``kind`` "gelu_tanh", "gelu_erf" or "relu") of every coordinate of the ball.

    Per coordinate: the inner argument's interval from the end points (it is increasing in
    ``x``; the constant's bounds ``0 < clo <= chi`` multiply by the sign), ``tanh`` / ``erf``
    at its midpoint widened by the Lipschitz constant times its radius, and ``x (1 + t) / 2``
    over ``x`` in ``[xlo, xhi]``, ``1 + t`` in ``[p, q]``, ``0 <= p <= q``: the least product
    is ``xlo p`` or ``xlo q`` by the sign of ``xlo``, the largest ``xhi q`` or ``xhi p``.
    The tanh form cubes ends clamped to ``[-2**16, 2**16]``: the argument is increasing, so
    a clamped end above ``2**16`` still gives a lower bound of ``tanh`` (and one below
    ``-2**16`` an upper bound); an end beyond the clamp takes ``tanh <= 1`` (``tanh >= -1``)
    on its own side, so a huge value costs no cube of its size."""
    if kind == "relu":
        return [max(x, 0) for x in m], r
    if kind == "gelu_tanh" and consts.get("fast_gelu"):  # float64 outward bounds (lm_fastgelu)
        fast = lm_fastgelu.gelu_tanh(m, r, consts["fast_gelu"], f)
        if fast is not None:
            return fast
    if kind == "gelu_tanh" and consts.get("fused_gelu") and lm_fusedgelu.available(f):
        return lm_fusedgelu.gelu_tanh(m, r, consts, f)  # these integers, in one loop
    tanh_form = kind == "gelu_tanh"
    clo, chi = consts["c"] if tanh_form else consts["s"]  # sqrt(2/pi), or 1/sqrt(2)
    fn, lip = (lm_bounds.tanh, 1) if tanh_form else (lm_bounds.erf, 2)  # |erf'| < 2
    an, den = GELU_A[0], GELU_A[1] << 2 * f
    half, one = f + 1, 1 << f
    cap = 1 << (f + 16)  # tanh(sqrt(2/pi) (x + 0.044715 x**3)) is 1 within 2**-F for x >= 2**16
    out, rad = [], 0
    for x in m:
        xlo, xhi = x - r, x + r
        if tanh_form:  # the cube of an end clamped to [-cap, cap]; see below
            alo, ahi = max(min(xlo, cap), -cap), max(min(xhi, cap), -cap)
            wlo, whi = alo + (an * alo ** 3) // den, ahi - (-an * ahi ** 3) // den
        else:
            wlo, whi = xlo, xhi
        zlo = (clo * wlo if wlo >= 0 else chi * wlo) >> f
        zhi = -((-(chi * whi if whi >= 0 else clo * whi)) >> f)
        zm = (zlo + zhi) >> 1
        zr = (zhi - zm) * lip
        tlo, thi = at_radius(fn, zm, zr, lip, f)
        p, q = one + max(tlo - zr, -one), one + min(thi + zr, one)
        if tanh_form and xlo < -cap:  # the clamped lower end proves nothing: tanh >= -1
            p = 0
        if tanh_form and xhi > cap:  # nor the clamped upper end: tanh <= 1
            q = 2 * one
        lo = (xlo * p if xlo >= 0 else xlo * q) >> half
        hi = -((-(xhi * q if xhi >= 0 else xhi * p)) >> half)
        mid = (lo + hi) >> 1
        out.append(mid)
        if hi - mid > rad:
            rad = hi - mid
    return out, rad


def constants(d_head: int, f: int = F) -> dict[str, Any]:
    """The irrational constants as balls / bounds at ``2**-F``."""
    lo, hi = lm_bounds.sqrt_const(1, d_head, f)
    return {"scale": ball(lo, hi), "c": lm_bounds.sqrt_two_over_pi(f),
            "s": lm_bounds.sqrt_const(1, 2, f)}


def embed(wte: Tensor, wpe: Tensor | None, toks: Sequence[int], f: int = F) -> Balls:
    """``wte[t] + wpe[p]`` as balls (radius 0 when exact at ``2**-F``, else 1); ``wpe`` None
    (rotary positions): ``wte[t]``."""
    (tr, et) = wte
    pr, ep = wpe if wpe is not None else (None, et)
    e = max(et, ep)
    out, rads = [], []
    for p, t in enumerate(toks):
        num = [a << (e - et) for a in tr[t]]
        if pr is not None:
            num = [a + (b << (e - ep)) for a, b in zip(num, pr[p])]
        if e <= f:
            out.append([a << (f - e) for a in num])
            rads.append(0)
        else:
            out.append([a >> (e - f) for a in num])
            rads.append(1)
    return out, rads


def _unzip(balls: Iterable[Ball]) -> Balls:
    ms, rs = [], []
    for m, r in balls:
        ms.append(m)
        rs.append(r)
    return ms, rs


def _add(xs: Rows, rs: list[int], ys: Rows, yrs: list[int]) -> Balls:
    return [[u + w for u, w in zip(x, y)] for x, y in zip(xs, ys)], list(map(sum, zip(rs, yrs)))


def _attention(model: Model, blk: Model, hs: Rows, hrs: list[int]) -> Balls:
    """The attention branch up to its output projection: ``q | k | v``, rotary positions
    (:func:`lm_ops.rotary`), attention with the block's score scale, the projection."""
    f = model["f"]
    qkv, qr = apply_all(blk["attn"], hs, hrs)
    if model["rope"] is not None:
        cache = model["rope_cache"]
        for p in range(len(cache), len(qkv)):
            cache.append(lm_ops.rope_table(model["rope"], p, f))
        qr = lm_ops.rotary(qkv, qr, model["heads"], model["kv_heads"], cache, f)
    att, ar = attention(qkv, qr, model["heads"], blk["scale"], f, model["kv_heads"])
    return apply_all(blk["proj"], att, ar)


def _mlp(model: Model, blk: Model, hs: Rows, hrs: list[int]) -> Balls:
    """The MLP branch up to its output projection; gated: ``act(gate) * fc``."""
    f, act, consts = model["f"], model["activation"], model["consts"]

    def activation(ms: Rows, rs: list[int]) -> Balls:
        if act == "silu":
            return _unzip(lm_ops.silu(m, r, f) for m, r in zip(ms, rs))
        return _unzip(gelu(act, m, r, consts, f) for m, r in zip(ms, rs))

    us, urs = apply_all(blk["fc"], hs, hrs)
    if blk["gate"] is None:
        us, urs = activation(us, urs)
    else:
        gs, grs = activation(*apply_all(blk["gate"], hs, hrs))
        us, urs = _unzip(lm_ops.product(a, b, f) for a, b in zip(zip(gs, grs), zip(us, urs)))
    return apply_all(blk["mlp_proj"], us, urs)


def logits(model: Model, toks: Sequence[int], wanted: Iterable[int]) -> dict[int, Ball]:
    """Logit balls ``(mids, radius)`` at the positions ``wanted`` of one sequence, for the
    prepared model of :mod:`lm_model` (``model["norm"]`` a key of :data:`NORMS`).  Pre-LN:
    ``x += Attn(LN1(x))``, ``x += MLP(LN2(x))``; ``parallel``: ``x += Attn(LN1(x)) +
    MLP(LN2(x))``; ``post_ln``: ``x = LN1(x + Attn(x)); x = LN2(x + MLP(x))``; ``lnf`` None:
    no final norm."""
    f = model["f"]
    xs, rs = embed(model["wte"], model["wpe"], toks, f)
    eps, post, kind = model["eps"], model["post_ln"], NORMS[model["norm"]]

    def norm(ln: LnParams, xs: Rows, rs: list[int]) -> Balls:
        return _unzip(kind(ln, x, r, eps, f) for x, r in zip(xs, rs))

    for blk in model["blocks"]:
        if post:
            xs, rs = norm(blk["ln1"], *_add(xs, rs, *_attention(model, blk, xs, rs)))
            xs, rs = norm(blk["ln2"], *_add(xs, rs, *_mlp(model, blk, xs, rs)))
        elif model["parallel"]:
            ys, yrs = _attention(model, blk, *norm(blk["ln1"], xs, rs))
            ms, mrs = _mlp(model, blk, *norm(blk["ln2"], xs, rs))
            xs, rs = _add(*_add(xs, rs, ys, yrs), ms, mrs)
        else:
            xs, rs = _add(xs, rs, *_attention(model, blk, *norm(blk["ln1"], xs, rs)))
            xs, rs = _add(xs, rs, *_mlp(model, blk, *norm(blk["ln2"], xs, rs)))
    wanted = list(wanted)
    if not wanted:
        return {}
    if model["lnf"] is None:
        hs, hrs = [xs[p] for p in wanted], [rs[p] for p in wanted]
    else:
        hs, hrs = norm(model["lnf"], [xs[p] for p in wanted], [rs[p] for p in wanted])
    mids, rads = apply_all(model["head"], hs, hrs)
    return dict(zip(wanted, zip(mids, rads)))
