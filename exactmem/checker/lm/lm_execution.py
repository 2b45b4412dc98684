"""Execution balls: logit balls that hold for every float execution of a GPT-2 style decoder
under an execution model (:mod:`lm_exec_model`; docs/trained-models.md, "Execution claims").
Standard library only.

A value is a ball ``(m, r)`` at ``2**-F`` as in :mod:`lm_forward`, here standing for every
value *an execution* may compute at that step.  Induction: if the execution's input of a step
lies in the ball, the real-valued step maps it into the step's real ball (:mod:`lm_forward`'s
functions map every point of a ball into theirs), and the execution's result differs from
that real result by at most the step's rounding bound, computed below from upper bounds of
the magnitudes in the input ball; so the real ball widened by that bound holds the
execution's result.  The bounds (``|x| <= max|m| + r`` over a position's vector):

- ``x W + b`` (``k`` inputs): ``dot(k) (sum_i |x_i| |W_ij| + |b_j|) + dot_abs``, the sum
  bounded by ``min(max|x| ||W_j||_1, ||x||_2 ||W_j||_2)``;
- LayerNorm, two-pass, Welford, or any tree of Welford steps and Chan merges (torch's CPU
  and CUDA kernels; :mod:`lm_exec_moments`): the mean within the widest of the three
  bounds ``d_mu``, the variance within the widest (two-pass gives ``var + d_mu**2`` within
  ``gamma_{d+3}``), so ``1/sqrt(var + eps)`` within a relative ``nu +
  (ulps + 1) U (1 + nu)``, ``nu`` the variance error over the variance's lower bound plus
  ``eps``; then four rounded operations and the storage;
- GELU: the argument of ``tanh`` / ``erf`` within a relative ``theta`` (7 / 2 rounded
  operations); ``|f(z') - f(z)| <= theta`` for ``f`` = tanh or erf when ``|z' - z| <= theta
  |z|``, ``theta <= 1/2`` (``|xi| f'(xi) <= 0.49`` at every ``xi``); ``x/2 (1 + t)`` three
  more operations;
- attention: scores within ``srel c sum_i |q_i| |k_i|``; the softmax weights of the widened
  score ball (:func:`lm_attention.softmax_weights`), each then within a relative ``omega``
  (:func:`attention`); the weighted sum of the values ``gamma_{2n+1}`` and the storage;
- the residual sum and the embedding sum: one operation each.
"""

from collections.abc import Iterable, Sequence
from fractions import Fraction
from math import isqrt
from typing import Any

from . import lm_attention, lm_exec_moments, lm_forward
from .lm_attention import Rows
from .lm_bounds import cdiv, rsqrt
from .lm_exec_model import TINY, Model, NotProved, U, gamma, grow, up
from .lm_exec_norms import row_norms_up, spectral_up, sqrt_up
from .lm_forward import Lin, LnParams, apply_all
from .lm_model import Json

GELU_LIP = Fraction(114, 100)  # |GELU'| <= 1.13 on the whole line, either form
ExecBall = tuple[list[int], int, int]  # midpoints, real radius, execution radius (2**-F)
ExecBalls = tuple[Rows, list[int], list[int]]  # the same for every position
LinNorms = tuple[Fraction, Fraction, Fraction, Lin]  # 1-norm, 2-norm, largest bias; the map


def _units(err: Fraction, f: int) -> int:
    """The real ``err >= 0`` at ``2**-f``, rounded up."""
    return cdiv(err.numerator << f, err.denominator)


def _real(x: int, f: int) -> Fraction:
    return Fraction(x, 1 << f)


def _sup(m: Sequence[int], r: int, f: int) -> Fraction:
    """``max |x|`` over the ball ``(m, r)``, as a real."""
    return Fraction(max(map(abs, m)) + r, 1 << f)


def _two(e: Fraction, d: int) -> Fraction:
    """A 2-norm bound of a ``d``-vector whose entries are at most ``e``."""
    return e * sqrt_up(d)


class Norms:
    """Per linear map (by identity): column 1-norm, column 2-norm and largest bias
    (:meth:`get`) and the operator 2-norm bound (:meth:`op`), computed on first use."""

    def __init__(self) -> None:
        self.cache: dict[int, LinNorms] = {}  # the map is kept so that its id stays its own
        self.ops: dict[int, tuple[Fraction, Lin]] = {}

    def get(self, lin: Lin, f: int) -> LinNorms:
        key = id(lin)
        if key not in self.cache:
            cols, _, e, l1, bmax = lin
            self.cache[key] = (Fraction(l1, 1 << e), Fraction(row_norms_up(cols), 1 << e),
                               Fraction(bmax, 1 << (e + f)), lin)
        return self.cache[key]

    def op(self, lin: Lin) -> Fraction:
        key = id(lin)
        if key not in self.ops:
            self.ops[key] = (Fraction(spectral_up(lin[0]), 1 << lin[2]), lin)
        return self.ops[key][0]


def lin_round(lin: Lin, norms: Norms, m: Sequence[int], big: int, mod: Model,
              f: int) -> Fraction:
    """Rounding bound of every output of ``x W + b`` for ``|x_i| <= |m_i| + big``."""
    k = len(lin[0][0])
    w1, w2, bmax, _ = norms.get(lin, f)
    xinf = _sup(m, big, f)
    x2 = Fraction(isqrt(sum((abs(x) + big) ** 2 for x in m)) + 1, 1 << f)
    return mod.dot(k) * (min(xinf * w1, x2 * w2) + bmax) + mod.dot_abs(k, w1, xinf)


def linear(lin: Lin, norms: Norms, ms: Rows, rs: list[int], ps: list[int], mod: Model, f: int,
           what: str) -> ExecBalls:
    """``x W + b`` on every position: the real balls (:func:`lm_forward.apply_all`) and
    execution radii ``||W||_2 rho`` plus the rounding."""
    ys, yrs = apply_all(lin, ms, rs)
    op = norms.op(lin)
    out = len(lin[0])
    qs = [_units(op * _real(rho, f) + _two(lin_round(lin, norms, m, r + rho, mod, f), out),
                 f) + 1 for m, r, rho in zip(ms, rs, ps)]
    _checked(mod, ys, yrs, qs, f, what)
    return ys, yrs, qs


def _checked(mod: Model, ms: Rows, rs: list[int], ps: list[int], f: int, what: str) -> None:
    for m, r, rho in zip(ms, rs, ps):
        mod.check(_sup(m, r + rho, f), what)


def layernorm(params: LnParams, m: list[int], r: int, rho: int, eps: tuple[int, int],
              mod: Model, f: int) -> ExecBall:
    """LayerNorm of one position: the real ball, and the execution radius ``max|g| / sigma``
    times ``rho`` (the 2-norm Lipschitz bound of LayerNorm, ``sigma`` its least value over
    the execution ball) plus the rounding of a float LayerNorm (module docstring)."""
    ym, yr = lm_forward.layernorm(params, m, r, eps, f)
    _, bias, e, gmax = params
    d = len(m)
    big = r + rho
    xinf = _sup(m, big, f)
    mean_abs = Fraction(sum(map(abs, m)) + d * big, d << f)
    msq = Fraction(cdiv(sum((abs(x) + big) ** 2 for x in m), d), 1 << 2 * f)
    mu = sum(m) // d
    c = [x - mu for x in m]
    # ||P x|| >= ||P m|| - sqrt(d) r - rho; ||P m||**2 >= sum c**2 - d (mean(c) in [0, 1))
    t = max(isqrt(max(sum(x * x for x in c) - d, 0)) - sqrt_up(d * r * r) - rho, 0)
    vlo = t * t // d + eps[0]
    if vlo <= 0:
        raise NotProved("LayerNorm: the variance plus eps may be 0")
    denom = Fraction(vlo, 1 << 2 * f)
    eps_hi = Fraction(eps[1], 1 << 2 * f)
    mod.check(d * msq, "LayerNorm: the sum of squares")
    shi = Fraction(rsqrt(vlo, vlo, f)[1], 1 << f)
    g = Fraction(gmax, 1 << e)
    b2 = Fraction(max(map(abs, bias)), 1 << (e + 2 * f)) * sqrt_up(d)
    # the mean: two-pass within gamma_{d+1} mean|x|; Welford's running mean M_k = M_{k-1} +
    # (x_k - M_{k-1}) / k within U (d (X + E) + 4.1 X H_d), H_d <= bits(d) (error ε_{k-1}
    # carried as (1 - 1/k) ε_{k-1}, three roundings per step)
    e_mu = max(gamma(d + 1) * mean_abs, gamma(d + 5 * d.bit_length()) * xinf) + 2 * TINY
    e_mu = max(e_mu, lm_exec_moments.mean_error(d, xinf))  # any Welford/Chan merge tree
    g2 = gamma(d + 3)  # two-pass: sum (x_i - mu')**2 / d = var + (mu - mu')**2, rounded
    ev = e_mu * e_mu * (1 + g2) + g2 * msq
    # Welford: each term (x - M_{k-1})(x - M_k) within 4 X e_mu + e_mu**2 + 3 U (2X + e_mu)**2
    w = 4 * xinf * e_mu + e_mu * e_mu + 3 * U * (2 * xinf + e_mu) ** 2
    ev = max(ev, w + gamma(d + 1) * (msq + w))
    c2 = Fraction(isqrt(sum(x * x for x in c)) + 1 + sqrt_up(d * r * r) + rho, 1 << f)
    ev = max(ev, lm_exec_moments.variance_error(d, xinf, e_mu, c2 * c2 / d))
    ev += (d + 2) * TINY + U * eps_hi
    nu = (ev + U * (msq + ev + eps_hi)) / denom
    if 2 * nu >= 1:
        raise NotProved("LayerNorm: the float variance may be off by half")
    rel_s = nu + (mod.fn + U) * (1 + nu)
    # c2: ||x - mu||_2 <= ||m - mu'||_2 + sqrt(d) r + rho (the centring is the nearest shift)
    root = sqrt_up(d)
    rel_out = (1 + U) ** 4 * (1 + mod.s) * (1 + mod.sw) ** 2 - 1
    # the four operations as (x - mu) s g + b, or as x (s g) + (b - mu s g) (torch's CPU
    # kernel): rounded relative to the larger terms |x| s g and |mu| s g as well
    x2 = Fraction(isqrt(sum((abs(x) + big) ** 2 for x in m)) + 1, 1 << f)
    mag = g * shi * (1 + rel_s) * (c2 + x2 + root * (mean_abs + 2 * e_mu)) + b2
    err = (g * shi * (rel_s * c2 + (1 + rel_s) * root * e_mu) + rel_out * mag
           + root * (6 * mod.abs1 + mod.tiny_s) + mod.tiny_s * mag)
    return ym, yr, _units(g * shi * _real(rho, f) + err, f) + 1


def gelu(kind: str, m: list[int], r: int, rho: int, consts: dict[str, Any], mod: Model,
         f: int) -> ExecBall:
    """GELU of one position: the real ball, and the execution radius ``1.14 rho`` (ReLU:
    ``rho``) plus a float GELU's rounding (module docstring)."""
    ym, yr = lm_forward.gelu(kind, m, r, consts, f)
    if kind == "relu":
        return ym, yr, rho
    xinf = _sup(m, r + rho, f)
    if kind == "gelu_tanh":
        mod.check(xinf ** 3, "GELU: x**3")
        theta = grow(mod.rel1, 7)
    else:
        theta = grow(mod.rel1, 2)
    if 2 * theta >= 1:
        raise NotProved("GELU: the argument's relative error reaches 1/2")
    et = theta + mod.fn + mod.s + mod.fn * mod.s + 2 * mod.abs1
    e3 = grow(mod.rel1, 3)
    err = xinf * (et / 2 + e3 * (2 + et) / 2) + 4 * mod.abs1
    return ym, yr, _units(GELU_LIP * _real(rho, f) + _two(err, len(m)), f) + 1


def _norm2(x: Sequence[int], r: int) -> int:
    """``||x||_2`` over the ball ``(x, r)``, rounded up (same units)."""
    return isqrt(sum((abs(v) + r) ** 2 for v in x)) + 1


def attention(qkv: Rows, rads: list[int], ps: list[int], heads: int, scale: tuple[int, int],
              mod: Model, f: int) -> ExecBalls:
    """Causal attention: the real balls (:func:`lm_attention.attention`) and the execution
    radii (2-norm) of the output, per head and query:

    - moving the input by ``rho`` moves each score by at most ``Delta = c (|q| rho_j +
      rho |k_j| + rho rho_j)`` (``c`` the scale; ``|.|`` 2-norms over the execution ball),
      each weight by a factor in ``e**(+-2 Delta)``, so the output by at most ``max_j
      rho_j + (e**(2 Delta) - 1) max_j |v_j|`` (``e**x - 1 <= 2x`` for ``x <= 1``);
    - the float scores are within ``srel c |q| |k_j|`` (Cauchy-Schwarz; a ``d_head``-term
      dot product, the scale constant, the scaling and the storage: ``srel = (1 +
      gamma_{dh+3})(1 + rel1)**3 - 1``), each float weight within a factor ``e**(2 ds) (1 +
      omega)`` of the exact one: a softmax kernel with a final or running maximum (online
      rescaling included) computes ``e_j`` as ``e**(s_j - M)`` times at most ``n`` factors
      ``1 + a``, ``a`` the error of one ``exp`` (its ulps and its argument's rounding
      ``e**(D U) - 1 <= 2 D U``, ``D`` the score spread) and two products, and the sum
      within ``gamma_n``: ``omega = (1 + e)(1 + U)(1 + rel1) / ((1 - e)(1 - gamma_n)) - 1``
      (a division, or a reciprocal and a product, and the storage), ``e = (1 + a)**n -
      1``; the weighted sum of the values adds ``gamma_{2n+1}`` (rescaled partial sums) and
      the storage.

    The heads' execution radii add up (a sum of 2-norms bounds the 2-norm of the
    concatenation), the value radius once per head."""
    outs, orads = lm_attention.attention(qkv, rads, heads, scale, f)
    d = len(qkv[0]) // 3
    dh = d // heads
    n = len(qkv)
    cm, cr = scale
    c = Fraction(cm + cr, 1 << f)
    srel = up((1 + gamma(dh + 3)) * (1 + mod.rel1) ** 3 - 1)
    qs = [Fraction(0)] * n
    for h in range(heads):
        sl = [slice(w * d + h * dh, w * d + (h + 1) * dh) for w in range(3)]
        big = [r + rho for r, rho in zip(rads, ps)]
        qn = [_real(_norm2(row[sl[0]], b), f) for row, b in zip(qkv, big)]
        kn = [_real(_norm2(row[sl[1]], b), f) for row, b in zip(qkv, big)]
        vn = [_real(_norm2(row[sl[2]], b), f) for row, b in zip(qkv, big)]
        rmax = kmax = vmax = Fraction(0)
        for p in range(n):
            rho = _real(ps[p], f)
            rmax, kmax = max(rmax, rho), max(kmax, kn[p])
            vmax = max(vmax, vn[p])
            delta = c * (qn[p] * rmax + rho * kmax + rho * rmax)
            if 2 * delta > 1:
                raise NotProved("attention: an execution score radius exceeds 1/2")
            lip = rmax + 4 * delta * vmax
            ds = srel * c * qn[p] * kmax + (dh + 4) * mod.abs1
            if 4 * ds > 1:
                raise NotProved("attention: the float scores may be off by 1/4")
            spread = 2 * (1 + srel) * c * qn[p] * kmax + 2 * ds
            if spread * U > 1:
                raise NotProved("attention: the score spread is beyond float32")
            a = up((1 + 2 * spread * U) * (1 + mod.fn) * (1 + U) ** 2 - 1)
            nk = p + 1
            e = grow(a, nk)
            omega = up((1 + e) * (1 + U) * (1 + mod.rel1) / ((1 - e) * (1 - gamma(nk))) - 1)
            eta = (1 + 4 * ds) * (1 + omega) - 1 + (nk + 2) * TINY + mod.tiny_s
            vrel = up((1 + gamma(2 * nk + 1)) * (1 + mod.s) * (1 + mod.sw) - 1)
            err = (eta + vrel * (1 + eta)) * vmax + _two((2 * nk + 3) * mod.abs1, dh)
            qs[p] += lip + err
    return outs, orads, [_units(x, f) + 1 for x in qs]


def _add(mod: Model, xs: Rows, rs: list[int], ps: list[int], ys: Rows, yrs: list[int],
         qs: list[int], f: int) -> ExecBalls:
    """The residual sum: real balls add, execution radii add, one rounded operation per
    entry."""
    out: Rows = []
    rad: list[int] = []
    exe: list[int] = []
    for x, r, rho, y, yr, q in zip(xs, rs, ps, ys, yrs, qs):
        out.append([u + w for u, w in zip(x, y)])
        rad.append(r + yr)
        err = mod.rel1 * (_sup(x, r + rho, f) + _sup(y, yr + q, f)) + mod.abs1
        exe.append(rho + q + _units(_two(err, len(x)), f) + 1)
    _checked(mod, out, rad, exe, f, "the residual stream")
    return out, rad, exe


def embed(net: Json, toks: Sequence[int], mod: Model, f: int) -> ExecBalls:
    """``wte[t] + wpe[p]`` (:func:`lm_forward.embed`): each weight possibly rounded to the
    format, one rounded sum."""
    xs, rs = lm_forward.embed(net["wte"], net["wpe"], toks, f)
    (tr, et), (pr, ep) = net["wte"], net["wpe"]
    rel = (1 + mod.sw) * (1 + mod.rel1) - 1
    ps: list[int] = []
    for p, t in enumerate(toks):
        mag = Fraction(max(map(abs, tr[t])), 1 << et) + Fraction(max(map(abs, pr[p])), 1 << ep)
        ps.append(_units(_two(rel * mag + 2 * mod.tiny_s + mod.abs1, len(xs[p])), f) + 1)
    _checked(mod, xs, rs, ps, f, "the embedding")
    return xs, rs, ps


def _unzip(balls: Iterable[ExecBall]) -> ExecBalls:
    ms: Rows = []
    rs: list[int] = []
    ps: list[int] = []
    for m, r, rho in balls:
        ms.append(m)
        rs.append(r)
        ps.append(rho)
    return ms, rs, ps


def refused(net: Json) -> list[str]:
    """What of the model the execution claim does not cover yet (empty: GPT-2's function)."""
    out: list[str] = []
    if net["post_ln"]:
        out.append("post-LN blocks")
    if net["norm"] != "layernorm":
        out.append(f"norm {net['norm']!r}")
    return out


def logits(net: Json, toks: list[int], wanted: Iterable[int], mod: Model,
           norms: Norms | None = None) -> dict[int, tuple[list[int], int]]:
    """Execution logit balls ``(mids, radius)`` at the positions ``wanted`` of one sequence
    (the prepared model of :mod:`lm_model`, pre-LN with LayerNorm; :func:`refused`): the
    real ball's radius plus ``max_c |H_c|_2 rho`` plus the rounding of the logits.
    ``norms``: a :class:`Norms` shared by the sequences of one certificate."""
    f = net["f"]
    norms = norms if norms is not None else Norms()
    eps, heads, act, consts = net["eps"], net["heads"], net["activation"], net["consts"]
    xs, rs, ps = embed(net, toks, mod, f)

    def norm(ln: LnParams, xs: Rows, rs: list[int], ps: list[int]) -> ExecBalls:
        return _unzip(layernorm(ln, x, r, rho, eps, mod, f) for x, r, rho in zip(xs, rs, ps))

    for i, blk in enumerate(net["blocks"]):
        hs, hrs, hps = norm(blk["ln1"], xs, rs, ps)
        qkv, qr, qp = linear(blk["attn"], norms, hs, hrs, hps, mod, f,
                             f"block {i} attention input")
        att, ar, ap = attention(qkv, qr, qp, heads, consts["scale"], mod, f)
        ys, yrs, yps = linear(blk["proj"], norms, att, ar, ap, mod, f,
                              f"block {i} attention output")
        xs, rs, ps = _add(mod, xs, rs, ps, ys, yrs, yps, f)
        hs, hrs, hps = norm(blk["ln2"], xs, rs, ps)
        hs, hrs, hps = linear(blk["fc"], norms, hs, hrs, hps, mod, f, f"block {i} MLP input")
        hs, hrs, hps = _unzip(gelu(act, h, hr, hp, consts, mod, f)
                              for h, hr, hp in zip(hs, hrs, hps))
        ys, yrs, yps = linear(blk["mlp_proj"], norms, hs, hrs, hps, mod, f,
                              f"block {i} MLP output")
        xs, rs, ps = _add(mod, xs, rs, ps, ys, yrs, yps, f)
    wanted = list(wanted)
    if not wanted:
        return {}
    hs, hrs, hps = [xs[p] for p in wanted], [rs[p] for p in wanted], [ps[p] for p in wanted]
    if net["lnf"] is not None:
        hs, hrs, hps = norm(net["lnf"], hs, hrs, hps)
    head = net["head"]
    mids, rads = apply_all(head, hs, hrs)
    _, rows, _, _ = norms.get(head, f)
    out: dict[int, tuple[list[int], int]] = {}
    for p, m, r, rho, h, hr in zip(wanted, mids, rads, hps, hs, hrs):
        err = rows * _real(rho, f) + lin_round(head, norms, h, hr + rho, mod, f)
        rad = r + _units(err, f) + 1
        mod.check(_sup(m, rad, f), "the logits")
        out[p] = (m, rad)
    return out
