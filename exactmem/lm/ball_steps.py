"""The non-linear steps of the language-model function on entry-wise float64 balls
(:mod:`exactmem.lm.balls`), whole arrays at a time: LayerNorm with the population
variance, RMSNorm, causal softmax, GELU in its tanh or erf form.  Same semantics as
:mod:`exactmem.lm.positions` (the python-flint ``arb`` reference) and the checker;
:mod:`exactmem.lm.normballs` evaluates them at the midpoints of its norm balls.
"""

from __future__ import annotations

import numpy as np

from exactmem.lm import balls as I
from exactmem.lm.balls import Ball, exact


def layernorm(x: Ball, g: np.ndarray, b: np.ndarray, eps: float) -> Ball:
    """LayerNorm of a ball (:func:`layernorm_var`)."""
    return layernorm_var(x, g, b, eps)[0]


def layernorm_var(x: Ball, g: np.ndarray, b: np.ndarray,
                  eps: float) -> tuple[Ball, np.ndarray]:
    """``(x - mean) / sqrt(var + eps) * g + b`` over the last axis (``d`` entries).

    The centred value ``c_i = x_i - mean(x)`` is within ``r_i + mean(r) + |mean(m) - mu| +
    |fl(m_i - mu) - (m_i - mu)|`` of ``cm_i = fl(m_i - mu)``, ``mu`` the float mean of the
    midpoints (``|mean(m) - mu| <= (2d + 4) u mean|m|``); the variance lies between the
    means of the least and the largest ``c_i^2`` over the balls; ``1/sqrt`` is decreasing,
    and ``sqrt`` and ``/`` are correctly rounded.  Also returns the lower bound of the
    variance ``[..., 1]``."""
    d = x[0].shape[-1]
    m, r = x
    mu = m.mean(-1, keepdims=True)
    cm = m - mu
    acm = np.abs(cm)
    cr = I.up(r + r.mean(-1, keepdims=True) + (2 * d + 4) * I.U * np.abs(m).mean(-1, keepdims=True)
              + 2 * I.U * acm, d + 10)
    return _normalised((cm, cr), g, b, eps)


def rmsnorm_var(x: Ball, g: np.ndarray, b: np.ndarray,
                eps: float) -> tuple[Ball, np.ndarray]:
    """RMSNorm ``x / sqrt(mean(x^2) + eps) * g + b`` over the last axis (``d`` entries), and a
    lower bound ``[..., 1]`` of ``mean(x^2)`` over the ball.

    No centring, so ``|x_i|`` lies in ``[(|m_i| - r_i)_+, |m_i| + r_i]`` directly.  Upper end:
    ``|m_i| + r_i``, its square, the ``d``-term sum and the division by ``d`` are ``d + 3``
    rounded operations on non-negative floats, so :func:`~exactmem.lm.balls.up`
    ``(., d + 6)`` is above the exact mean of the squares.  Lower end: ``fl(|m_i| - r_i)`` is at
    most ``(|m_i| - r_i)(1 + u) + eta`` when positive and not positive otherwise, so
    :func:`~exactmem.lm.balls.down` ``(., 1)`` is at most ``(|m_i| - r_i)_+``; its
    square, sum and mean are the mirror image (``down(., d + 6)``).  Then ``eps`` is added
    (one rounding each way), ``1/sqrt`` is decreasing and ``sqrt`` and ``/`` are correctly
    rounded (4 roundings), exactly as in :func:`layernorm_var`; ``x s g + b`` by ball
    products."""
    return _normalised(x, g, b, eps)


def _normalised(c: Ball, g: np.ndarray, b: np.ndarray, eps: float) -> tuple[Ball, np.ndarray]:
    """``c / sqrt(mean(c^2) + eps) * g + b`` for the ball ``c`` over the last axis, and the
    lower bound of ``mean(c^2)``: ``|c_i|`` lies in ``[(|m_i| - r_i)_+, |m_i| + r_i]``; the
    rounding of both ends is counted in :func:`rmsnorm_var`."""
    d = c[0].shape[-1]
    am = np.abs(c[0])
    big = am + c[1]
    small = I.down(am - c[1], 1)
    vhi = I.up((big * big).mean(-1, keepdims=True), d + 6)
    vlo = I.down((small * small).mean(-1, keepdims=True), d + 6)
    s_hi = I.up(1.0 / np.sqrt(I.down(vlo + eps, 1)), 4)
    s_lo = I.down(1.0 / np.sqrt(I.up(vhi + eps, 1)), 4)
    y = I.mul(c, I.from_interval(s_lo, s_hi))
    return I.add_exact(I.scale(y, g), b), vlo


def softmax(scores: Ball, future: np.ndarray) -> Ball:
    """Causal softmax weights of score balls ``[..., n, n]`` (``future``: the masked keys,
    weight exactly 0); ``e^{s_j - M}`` with ``M`` a float (it cancels exactly) enclosed at the
    end points; weight ``j`` in ``[lo_j / sum_k hi_k, hi_j / sum_k lo_k]``."""
    n = future.shape[-1]
    lo, hi = I.lohi(scores)
    top = np.where(future, -np.inf, scores[0]).max(-1, keepdims=True)
    a = lo - top  # fl(v) is within u|v| <= 2u|fl(v)| (+ eta) of v
    a_lo = I.lohi((a, 2 * I.U * np.abs(a)))[0]
    a = hi - top
    a_hi = I.lohi((a, 2 * I.U * np.abs(a)))[1]
    e_lo, e_hi = I.exp_interval(a_lo, a_hi)
    e_lo = np.where(future, 0.0, e_lo)
    e_hi = np.where(future, 0.0, e_hi)
    s_lo = I.down(e_lo.sum(-1, keepdims=True), n + 2)
    s_hi = I.up(e_hi.sum(-1, keepdims=True), n + 2)
    w_lo = I.down(e_lo / s_hi, 1)
    w_hi = np.minimum(I.up(e_hi / s_lo, 1), 1.0)
    w = I.from_interval(w_lo, w_hi)
    return w[0], np.where(future, 0.0, w[1])  # w[0] is exactly 0 there


GELU_LIP = 1.14
"""A bound of ``|GELU'|`` on the whole real line, both forms (the sup is about 1.1289).

Erf form: ``GELU' = Phi(x) + x phi(x)`` and ``GELU'' = phi(x)(2 - x^2)``, so ``GELU'`` is
largest at ``sqrt 2`` and least at ``-sqrt 2``: ``Phi(sqrt 2) + sqrt 2 phi(sqrt 2) <
1.129`` and ``Phi(-sqrt 2) - sqrt 2 phi(sqrt 2) > -0.13``.  Tanh form, as ``x sigma(y)``,
``y = 2c(x + a x^3)``: ``GELU' = sigma(y) + x sigma(y)(1 - sigma(y)) y'``; on ``[-10, 10]``
arb's interval evaluation of this formula over 1,280 sub-intervals of width 1/64 stays in
``[-0.14, 1.135]`` (``tests/lm/test_lm_fast.py::test_gelu_derivative_bound`` re-runs it, for both
forms); for ``x >= 10``, ``y >= 16``, so ``GELU'`` lies in ``[1 - e^-16, 1 + x e^-y y']`` and
``x e^-y y' <= 3 10^-5`` there (decreasing); for ``x <= -10``, ``0 <= sigma(y) <= e^-16`` and
``|x sigma(y) y'| <= 3 10^-5`` likewise."""


SILU_LIP = 1.11
"""A bound of ``|SiLU'|`` on the whole real line (the sup is about 1.0998).  ``SiLU' =
s (1 + x (1 - s))`` with ``s = 1 / (1 + e^-x)``; on ``[-10, 10]`` arb's interval evaluation
over sub-intervals of width 1/64 stays in ``[-0.11, 1.101]``
(``tests/lm/test_lm_silu.py::test_silu_derivative_bound``); for ``x >= 10``, ``0 <= SiLU' <= 1 +
x e^-x < 1.001``; for ``x <= -10``, ``|SiLU'| <= e^x (1 + |x|) < 10^-3``."""

LIPSCHITZ = {"gelu_tanh": GELU_LIP, "gelu_erf": GELU_LIP, "silu": SILU_LIP}


def silu(x: Ball) -> Ball:
    """``x / (1 + e^-x)``: enclosed at the midpoint ``p`` as ``p`` times the sigmoid's
    interval ``[1 / (1 + e_hi), 1 / (1 + e_lo)]`` (``e^-p`` in ``[e_lo, e_hi]`` by
    :func:`~exactmem.lm.balls.exp_point`; each end one rounded sum and one rounded quotient,
    widened outward), then widened by :data:`SILU_LIP` times the radius."""
    p = x[0]
    with np.errstate(over="ignore"):  # e^-p beyond float64 for p < -700: [1e304, inf]
        elo, ehi = I.exp_point(-p)
    s_lo = I.down(1.0 / I.up(1.0 + ehi, 1), 1)
    s_hi = np.minimum(I.up(1.0 / I.down(1.0 + elo, 1), 1), 1.0)
    g = I.mul(exact(p), I.from_interval(s_lo, s_hi))
    return g[0], I.up(g[1] + SILU_LIP * x[1], 3)


def activation(x: Ball, kind: str) -> Ball:
    """The activation ``kind`` (GELU in either form, or SiLU) of a ball."""
    return silu(x) if kind == "silu" else gelu(x, kind)


def gelu(x: Ball, kind: str) -> Ball:
    """``x/2 (1 + tanh(sqrt(2/pi)(x + 0.044715 x^3)))`` or ``x/2 (1 + erf(x/sqrt 2))``:
    enclosed at the midpoint (a point, so only rounding widens it), then widened by
    :data:`GELU_LIP` (a bound of ``|GELU'|``) times the radius."""
    p = exact(x[0])
    if kind == "gelu_tanh":
        c = I.const(float(np.sqrt(2.0 / np.pi)), 4)
        a = I.const(0.044715, 1)  # the nearest float to the decimal
        inner = I.add(p, I.mul(a, I.mul(p, I.mul(p, p))))
        t = I.tanh_ball(I.mul(c, inner))
    else:
        t = I.erf_ball(I.mul(p, I.const(float(np.sqrt(0.5)), 2)))
    g = I.scale(I.mul(p, I.add_exact(t, 1.0)), 0.5)
    return g[0], I.up(g[1] + GELU_LIP * x[1], 3)
