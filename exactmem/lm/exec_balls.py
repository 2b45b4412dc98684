"""Execution norm balls: the producer's domain for claims about every float execution of a
GPT-2 style decoder (docs/trained-models.md, "Execution claims").

:class:`ExecBalls` is the norm-ball domain of :mod:`exactmem.lm.normballs` (one 2-norm
radius per position, propagated by each step's Lipschitz bound) with every step's float
rounding added to the radius, computed from the magnitudes ``|m| + rho`` of its input ball:
the same bounds as the checker's ``exactmem/checker/lm/lm_execution.py`` (written again here:
the checker shares no code with the producer), in float64 with a safety factor.  The fused
norm-and-map steps run unfused, so that the norm's rounding enters before the map.  The
block's wiring stays :mod:`exactmem.lm.block`'s.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from exactmem.errors import SpecError
from exactmem.lm import balls as I
from exactmem.lm.block import forward
from exactmem.lm.decoder import LMSpec
from exactmem.lm.normballs import NBall, NormWeights, add, decide, norm_up

U = 2.0 ** -23
TINY = 2.0 ** -126
#: per format: (storage rounding, weight rounding, storage flush, largest finite value)
FORMATS = {"float32": (0.0, 2.0 ** -24, TINY, 2.0 ** 127),
           "bfloat16": (2.0 ** -8, 2.0 ** -8, TINY, 2.0 ** 127),
           "float16": (2.0 ** -11, 2.0 ** -11, 2.0 ** -14, 65504.0)}
DEFAULT_ULPS = 2
MAX_ULPS = 1 << 16
SAFE = 1.0 + 2.0 ** -20  # covers the float64 rounding of the bounds below


def tree_mean_error(d: int, xinf: np.ndarray) -> np.ndarray:
    """The mean's error for any tree of Welford steps and Chan merges (the checker's
    ``lm_exec_moments.mean_error``; its docstring has the proof)."""
    c = (d + 2) * gamma(9) / 2
    return np.where(2 * c < 1, c * xinf / (1 - c), np.inf)


def tree_variance_error(d: int, xinf: np.ndarray, e: np.ndarray,
                        vhi: np.ndarray) -> np.ndarray:
    """The variance's error for any such tree (``lm_exec_moments.variance_error``)."""
    eps = 2 * e + U * (2 * xinf + 2 * e)
    a = eps + 2 * e
    g5, g, g2 = gamma(5), gamma(2 * d), gamma(2)
    b = d.bit_length()
    k = (eps * eps + 2 * eps * e) * (1 + g5) + 2 * g5 * a * a
    psi = 2 * (eps + e) * (1 + g5) * np.sqrt(vhi * b / 4) + 2 * g5 * vhi + k * b / 4
    return (1 + g2) * (psi + g * vhi) / (1 - g) * SAFE + g2 * vhi


def gamma(k: int) -> float:
    return k * U / (1 - k * U) if 2 * k * U < 1 else np.inf


def grow(a: float, times: int) -> float:
    """An upper bound of ``(1 + a)**times - 1``."""
    ta = times * a
    return ta / (1 - ta) if 2 * ta < 1 else np.inf


def refuse_execution(spec: LMSpec) -> None:
    """A :class:`SpecError` naming what of ``spec`` the execution claim does not cover."""
    missing = [] if spec.norm_first else ["post-LN blocks"]
    if spec.norm != "layernorm":
        missing.append(f"norm {spec.norm!r}")
    missing += spec.uncertified()
    if missing:
        raise SpecError(f"--execution: not covered for {', '.join(missing)} (the execution "
                        "model covers pre-LN decoders with LayerNorm, GPT-2's function)")


class ExecBalls(NormWeights):
    """Norm balls that hold every float execution of the model ``fmt`` / ``ulps``."""

    def __init__(self, spec: LMSpec, fmt: str, ulps: int) -> None:
        super().__init__(spec)
        self.s, self.sw, self.tiny_s, self.max = FORMATS[fmt]
        self.rel1 = (1 + U) * (1 + self.s) - 1
        self.abs1 = TINY + self.tiny_s
        self.fn = ulps * U

    def _widen(self, x: NBall, err: np.ndarray) -> NBall:
        """``x`` with the 2-norm of the entry-wise rounding ``err`` added; an overflow of
        the format is an infinite radius."""
        rho = I.up(x[1] + SAFE * norm_up(err), 2)
        big = np.abs(x[0]).max(-1) + rho
        return x[0], np.where(big < self.max, rho, np.inf)

    def dot_err(self, x: NBall, w: np.ndarray, b: np.ndarray | float) -> np.ndarray:
        """The rounding of ``x W + b`` per output (``sum_i |x_i| |W_ij|`` for ``|x_i| <=
        |m_i| + rho``)."""
        k = w.shape[0]
        rel = (1 + self.sw) ** 2 * (1 + gamma(k + 1)) * (1 + self.s) - 1
        mag = (np.abs(x[0]) + x[1][..., None]) @ np.abs(w) + np.abs(b)
        return rel * mag + self.tiny_s * (np.abs(w).sum(0) + k * mag.max(-1, keepdims=True)
                                          + k) + (2 * k + 4) * TINY

    def embed(self, tokens: np.ndarray) -> NBall:
        x = super().embed(tokens)
        wt = np.abs(self.t["wte"][tokens]) + np.abs(self.t["wpe"][:tokens.shape[1]][None])
        return self._widen(x, ((1 + self.sw) * (1 + self.rel1) - 1) * wt + 2 * self.abs1)

    def linear(self, x: NBall, name: str) -> NBall:
        w, b = self.t[name + ".weight"], self.t[name + ".bias"]
        return self._widen(super().linear(x, name), self.dot_err(x, w, b))

    def norm(self, x: NBall, name: str) -> NBall:
        """LayerNorm: the norm ball's step plus a float LayerNorm's rounding (two-pass or
        Welford, the wider: the checker's bound, per coordinate)."""
        y = super().norm(x, name)
        m, rho = x
        d = m.shape[-1]
        g, b = np.abs(self.t[name + ".weight"]), np.abs(self.t[name + ".bias"])
        big = np.abs(m) + rho[..., None]
        xinf, mean_abs = big.max(-1), big.mean(-1)
        msq = (big * big).mean(-1)
        c = m - m.mean(-1, keepdims=True)
        t = np.maximum(np.sqrt((c * c).sum(-1)) * (1 - 1e-12) - rho, 0.0)
        vlo = t * t / d + self.spec.layer_norm_eps
        shi = 1.0 / np.sqrt(vlo)
        e_mu = np.maximum(gamma(d + 1) * mean_abs, gamma(d + 5 * d.bit_length()) * xinf)
        e_mu = np.maximum(e_mu, tree_mean_error(d, xinf))
        g2 = gamma(d + 3)
        w = 4 * xinf * e_mu + e_mu * e_mu + 3 * U * (2 * xinf + e_mu) ** 2
        ev = np.maximum(e_mu * e_mu * (1 + g2) + g2 * msq, w + gamma(d + 1) * (msq + w))
        vhi = (np.sqrt((c * c).sum(-1)) + np.sqrt(d) * rho) ** 2 / d * SAFE
        ev = np.maximum(ev, tree_variance_error(d, xinf, e_mu, vhi))
        nu = (ev + U * (msq + ev + self.spec.layer_norm_eps)) / vlo
        rel_s = nu + (self.fn + U) * (1 + nu)
        ca = np.abs(c) + rho[..., None] + e_mu[..., None]
        rel_out = (1 + U) ** 4 * (1 + self.s) * (1 + self.sw) ** 2 - 1
        core = g * shi[..., None] * (rel_s[..., None] * ca + e_mu[..., None])
        ca = ca + big + mean_abs[..., None] + e_mu[..., None]  # x (s g) + (b - mu s g) too
        mag = g * shi[..., None] * (1 + rel_s[..., None]) * ca + b
        err = core + rel_out * mag + 6 * self.abs1 + self.tiny_s * mag
        err = np.where((2 * nu < 1)[..., None], err, np.inf)
        return self._widen(y, err)

    def norm_attention(self, x: NBall, norm: str, name: str) -> NBall:
        return self.attention(self.norm(x, norm), name)

    def norm_linear(self, x: NBall, norm: str, name: str) -> NBall:
        return self.linear(self.norm(x, norm), name)

    def norm_head(self, x: NBall, norm: str) -> tuple[np.ndarray, np.ndarray]:
        return self.head(self.norm(x, norm))

    def attention(self, x: NBall, name: str) -> NBall:
        """The norm ball's attention, plus the ``q | k | v`` rounding carried through it
        (as an input perturbation ``E``: ``E + 4 Delta max|v|``) and the float softmax and
        weighted sum (the checker's ``srel``, ``omega``, ``gamma_{2n+1}``), per head."""
        spec = self.spec
        out = super().attention(x, name)
        w, b = self.t[name + ".weight"], self.t[name + ".bias"]
        qkv = x[0] @ w + b
        e = self.dot_err(x, w, b)
        bsz, n, _ = x[0].shape
        heads, dh = spec.heads, spec.d_head
        c = 1.0 / np.sqrt(dh)
        big = np.abs(qkv) + x[1][..., None] * np.abs(w).max() * np.sqrt(w.shape[0]) + e

        def split(a: np.ndarray, part: int) -> np.ndarray:
            return a[..., part * spec.d_model:(part + 1) * spec.d_model].reshape(
                bsz, n, heads, dh)

        qn, kn, vn = (np.sqrt((split(big, j) ** 2).sum(-1)) for j in range(3))  # [B, n, H]
        en = norm_up(e)[..., None]  # [B, n, 1]
        kmax = np.maximum.accumulate(kn, axis=1)
        vmax = np.maximum.accumulate(vn, axis=1)
        emax = np.maximum.accumulate(en, axis=1)
        delta = c * (qn * emax + en * kmax + en * emax)
        nk = np.arange(1, n + 1)[None, :, None]
        ds = ((1 + gamma(dh + 3)) * (1 + self.rel1) ** 3 - 1) * c * qn * kmax
        a = (1 + 5 * c * qn * kmax * U) * (1 + self.fn) * (1 + U) ** 2 - 1
        ee = nk * a / (1 - nk * a)
        g_n = nk * U / (1 - nk * U)
        omega = (1 + ee) * (1 + U) * (1 + self.rel1) / ((1 - ee) * (1 - g_n)) - 1
        eta = (1 + 4 * ds) * (1 + omega) - 1 + (nk + 2) * TINY + self.tiny_s
        vrel = (1 + (2 * nk + 1) * U / (1 - (2 * nk + 1) * U)) * (1 + self.s) * (1 + self.sw) - 1
        per = emax + 4 * delta * vmax + (eta + vrel * (1 + eta)) * vmax
        per = np.where((2 * delta <= 1) & (4 * ds <= 1) & (2 * ee < 1), per, np.inf)
        return out[0], I.up(out[1] + SAFE * per.sum(-1), 2)

    def activation(self, x: NBall) -> NBall:
        y = super().activation(x)
        if self.spec.activation == "relu":
            return y
        big = np.abs(x[0]) + x[1][..., None]
        theta = grow(self.rel1, 7 if self.spec.activation == "gelu_tanh" else 2)
        et = theta + self.fn + self.s + self.fn * self.s + 2 * self.abs1
        e3 = grow(self.rel1, 3)
        return self._widen(y, big * (et / 2 + e3 * (2 + et) / 2) + 4 * self.abs1)

    def residual(self, x: NBall, h: NBall, name: str) -> NBall:
        y = self.linear(h, name)
        s = add(x, y)
        mag = np.abs(x[0]) + x[1][..., None] + np.abs(y[0]) + y[1][..., None]
        return self._widen(s, self.rel1 * mag + self.abs1)

    def head(self, x: NBall) -> tuple[np.ndarray, np.ndarray]:
        zm, zr = super().head(x)
        head = self.t["head.T"]
        return zm, I.up(zr + SAFE * self.dot_err(x, head, 0.0), 2)


def prove_execution(spec: LMSpec, sequences: Sequence[Sequence[int]],
                    labels: Sequence[Sequence[int]], proved: Sequence[Sequence[int]],
                    fmt: str, ulps: int,
                    progress: Callable[[str, int, int], None] | None = None,
                    batch: int | None = None,
                    on_logits: Callable[[int, np.ndarray, np.ndarray], None] | None = None
                    ) -> list[list[int]]:
    """Per sequence, the positions of ``proved`` (the real-valued claim) whose label is the
    unique argmax for every execution of the model ``fmt`` / ``ulps`` by the balls of
    :class:`ExecBalls`.  ``on_logits(i, lo, hi)``, called once per sequence ``i`` as in
    :func:`~exactmem.lm.positions.prove_positions`, receives float64 arrays ``[n, vocab]``
    with ``lo <= logit <= hi`` at every position for every such execution (infinite where
    the balls overflow), e.g. for its code length (:mod:`exactmem.lm.codelength`)."""
    if batch is None:
        from exactmem.lm.batching import batch_for

        batch = batch_for(spec, len(sequences[0])) if len(sequences) else 1
    ops = ExecBalls(spec, fmt, ulps)
    out: list[list[int]] = []
    with np.errstate(all="ignore"):  # an overflow is an infinite radius: never proved
        for b0 in range(0, len(sequences), batch):
            toks = np.asarray(sequences[b0:b0 + batch], dtype=np.int64)
            ys = np.asarray(labels[b0:b0 + batch], dtype=np.int64)
            mid, rad = forward(ops, ops.embed(toks))
            ok, _, lo, hi = decide(mid, rad, ys)
            for j in range(len(toks)):
                if on_logits is not None:
                    on_logits(b0 + j, lo[j], hi[j])
                keep = set(int(p) for p in np.flatnonzero(ok[j]))
                out.append([p for p in proved[b0 + j] if p in keep])
            if progress is not None:
                progress("execution", min(b0 + batch, len(sequences)), len(sequences))
    return out
