"""Norm balls: the language-model function with one 2-norm radius per position vector, the
numpy pass of the fast producer (``prove_positions(..., producer="fast")``).

Entry-wise balls multiply a radius by ``|W|`` at every linear map, about ``sqrt(d)`` times
more than the map can stretch a vector (the wrapping effect), and over several layers that
factor compounds beyond what float64 can carry.  Here every position carries its float
midpoint vector ``m`` and one radius ``rho``: the exact vector lies in
``{x : ||x - m||_2 <= rho}``.  A step ``f`` maps it to ``f(m)``, enclosed entry-wise by the
rigorous point evaluation of :mod:`exactmem.lm.balls` (only rounding widens it), plus
a bound of ``f``'s Lipschitz constant in the 2-norm times ``rho`` (mean value theorem on the
segment from ``m`` to ``x``):

- ``x W + b``: ``||W||_2`` (:func:`~exactmem.lm.normball_steps.spectral_up`, a rigorous
  upper bound);
- LayerNorm: ``max|g| / sigma_min``, since the Jacobian of ``z -> P z / sqrt(|P z|^2/d +
  eps)`` (``P`` the centring projection) is ``(I - z z^T / (d sigma^2)) P / sigma``, of norm at
  most ``1/sigma``, and ``sigma >= sqrt((|P m| - rho)_+^2 / d + eps)`` on the ball;
- GELU: ``max |GELU'| <= 1.14`` (:data:`~exactmem.lm.ball_steps.GELU_LIP`, either form);
  ReLU: 1, and exact at the float midpoint;
- attention: scores ``q.k`` move by at most ``|q| rho_k + rho_q |k| + rho_q rho_k`` (per head,
  ``rho`` of that head's block of ``W``); the weights are then enclosed entry-wise
  (:func:`~exactmem.lm.ball_steps.softmax`), ``sum_j w_j v_j`` entry-wise from the midpoints
  ``v_j``, plus ``sum_j w_j rho_{v_j}``;
- rotary positions: an exact rotation of each head's ``q`` and ``k`` (orthogonal: the radius
  stays), its midpoint enclosed with cos/sin balls from arb
  (:func:`~exactmem.lm.normball_steps.rotate`, :meth:`NormWeights.rotary_balls`);
  grouped-query heads share their key/value radius;
- a gated MLP's product ``a * b``: ``max|b| rho_a + max|a| rho_b + rho_a rho_b``
  (:func:`~exactmem.lm.normball_steps.product`);
- logits ``h . H_c``: entry-wise at ``m``, plus ``rho |H_c|``.
An entry-wise rounding radius ``e`` becomes ``|e|_2``, computed upward.  Post-LN layers,
parallel blocks and a missing final norm only reorder or drop these steps.  The steps that
read no weights (2-norm bounds, sums, the product, the rotation, the attention output's
spread) are in :mod:`exactmem.lm.normball_steps`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import cast

import numpy as np

from exactmem.lm import balls as I
from exactmem.lm import block
from exactmem.lm.ball_steps import LIPSCHITZ, activation, layernorm_var, rmsnorm_var, softmax
from exactmem.lm.block import Ops
from exactmem.lm.decoder import INV_FREQ, LMSpec, layer_of
from exactmem.lm.float64 import label_margin
from exactmem.lm.normball_steps import (
    NBall,
    add,
    centred_spread,
    gain_times,
    norm_up,
    product,
    rotate,
    spectral_up,
)

OnLogits = Callable[[int, np.ndarray, np.ndarray], None]


class NormWeights(Ops[NBall]):
    """The spec's tensors, their absolute values and the norms the steps need, read once;
    the operations of :mod:`exactmem.lm.block` on norm balls ``[B, n, d]``.

    ``gained[name]``: for a norm whose output feeds only the linear map ``name`` (pre-LN
    ``ln1`` -> ``attn``, ``ln2`` -> ``mlp.fc``; ``lnf`` -> the head rows), a bound of
    ``||diag(g) W||_2`` (per head block for ``attn``; per row ``||g o H_c||`` for the head):
    the norm's radius before its gain ``g`` goes through the gained map, which stretches less
    than ``max|g| ||W||_2`` (:meth:`ln_parts`)."""

    def __init__(self, spec: LMSpec) -> None:
        self.spec = spec
        self.t = {name: spec.get(name) for name in spec.shapes()}
        head = self.t["wte" if spec.tied_head else "head"]
        self.t["head.T"] = np.ascontiguousarray(head.T)
        self.abs = {name: np.abs(w) for name, w in self.t.items() if w.ndim == 2}
        self.head_rows = norm_up(head)
        self.spectral: dict[str, float] = {}
        self.blocks: dict[str, np.ndarray] = {}
        dh = spec.d_head
        for i in range(spec.layers):
            p = f"h{i}."
            for name in ("attn.proj", "mlp.fc", "mlp.proj") + (
                    ("mlp.gate",) if spec.gated_mlp else ()):
                self.spectral[p + name] = spectral_up(self.t[p + name + ".weight"])
            wa = self.t[p + "attn.weight"]
            self.blocks[p + "attn"] = np.array(
                [spectral_up(wa[:, j * dh:(j + 1) * dh]) for j in range(wa.shape[1] // dh)])
        self.gained: dict[str, np.ndarray] = {}
        for i in range(spec.layers if spec.norm_first else 0):
            p = f"h{i}."
            for ln, name in (("ln1", "attn"), ("ln2", "mlp.fc")):
                g = self.t[p + ln + ".weight"]
                gw = gain_times(g, self.t[p + name + ".weight"])
                plain = self.blocks[p + name] if name == "attn" \
                    else np.array(self.spectral[p + name])
                if gw is None:
                    self.gained[p + name] = I.up(float(np.abs(g).max()) * plain, 1)
                elif name == "attn":
                    self.gained[p + name] = np.array(
                        [spectral_up(gw[:, j * dh:(j + 1) * dh])
                         for j in range(gw.shape[1] // dh)])
                else:
                    self.gained[p + name] = np.array(spectral_up(gw))
        if spec.final_norm:
            g = self.t["lnf.weight"]
            gh = gain_times(g, head.T)
            self.gained["head"] = I.up(float(np.abs(g).max()) * self.head_rows, 1) \
                if gh is None else norm_up(gh.T)

        self.tables: dict[int, tuple[I.Ball, I.Ball]] = {}

    def rotary(self, q: np.ndarray, rho: np.ndarray) -> NBall:
        """Rotary positions on midpoints ``q [B, H, n, dh]`` with radii ``rho [B, H, n]``: the
        exact rotation is orthogonal, so ``rho`` stays; the rotated midpoint is enclosed
        entry-wise with the cos/sin balls of :meth:`rotary_balls`, its radius added."""
        return rotate(q, rho, *self.rotary_balls(q.shape[-2]))

    def rotary_balls(self, n: int) -> tuple[I.Ball, I.Ball]:
        """Float64 balls ``[n, r/2]`` of ``cos(p omega_j)`` and ``sin(p omega_j)``
        (:func:`~exactmem.lm.arb.rotary_balls`), computed once per length ``n``."""
        if n not in self.tables:
            from exactmem.lm.arb import rotary_balls

            self.tables[n] = rotary_balls(self.t[INV_FREQ].tolist(), n)
        return self.tables[n]

    def affine(self, x: NBall, name: str) -> tuple[np.ndarray, np.ndarray]:
        """Midpoints of ``x W + b`` and their entry-wise rounding radius."""
        return I.add_exact(I.matmul_exact(I.exact(x[0]), self.t[name + ".weight"],
                                          self.abs[name + ".weight"]), self.t[name + ".bias"])

    def linear(self, x: NBall, name: str) -> NBall:
        m, r = self.affine(x, name)
        return m, I.up(self.spectral[name] * x[1] + norm_up(r), 3)

    def norm(self, x: NBall, name: str) -> NBall:
        """The norm ``name`` on a norm ball: its value at the midpoint ``m`` (entry-wise
        rounding radius), plus ``max|g| / sigma_min`` times ``rho``.

        LayerNorm: ``z -> P z / sigma``, ``sigma = sqrt(|P z|^2/d + eps)`` (``P`` the
        centring projection); RMSNorm: ``P = I``.  The Jacobian is ``(I - y y^T / (d
        sigma^2)) P / sigma`` with ``y = P z``; ``|y|^2 / (d sigma^2) <= 1``, so its eigenvalues
        lie in ``[0, 1/sigma]`` and its norm is at most ``1/sigma`` (times ``max|g|`` for the
        gain).  On the ball ``|P z| >= |P m| - rho``, so ``sigma >= sqrt((|P m| - rho)_+^2 / d
        + eps)``; ``|P m|`` from below by the variance (LayerNorm) or mean-square (RMSNorm)
        lower bound of :func:`~exactmem.lm.ball_steps.layernorm_var` /
        :func:`~exactmem.lm.ball_steps.rmsnorm_var` at the midpoint.  Mean value theorem on
        the segment from ``m`` to ``x``."""
        (m, r), rho_z = self.ln_parts(x, name)
        g = self.t[name + ".weight"]
        return m, I.up(float(np.abs(g).max()) * rho_z + r, 2)

    ln = norm

    def ln_parts(self, x: NBall, name: str) -> tuple[NBall, np.ndarray]:
        """:meth:`ln` in two parts: ``((m, |e|_2), rho / sigma_min)``, the midpoint with its
        rounding radius, and the radius of the normalised vector before the gain ``g``: the
        exact output lies within ``|e|_2`` of ``m`` plus ``g`` times a vector of norm at most
        ``rho / sigma_min``."""
        g, eps = self.t[name + ".weight"], self.spec.layer_norm_eps
        var = rmsnorm_var if self.spec.norm == "rmsnorm" else layernorm_var
        (m, r), vlo = var(I.exact(x[0]), g, self.t[name + ".bias"], eps)
        d = x[0].shape[-1]
        centred = I.down(np.sqrt(I.down(vlo[..., 0] * d, 1)), 2)  # <= |P m| (|m|: RMSNorm)
        t = I.down(centred - x[1], 1)
        sigma = I.down(np.sqrt(I.down(t * t / d + eps, 3)), 1)
        return (m, norm_up(r)), I.up(x[1] / sigma, 1)

    # the other operations of the block --------------------------------------------------
    def attention(self, x: NBall, name: str) -> NBall:
        return attention(self, x, name)

    def norm_attention(self, x: NBall, norm: str, name: str) -> NBall:
        """The norm's gain carried into ``q | k | v`` (:meth:`ln_parts`)."""
        a_in, z1 = self.ln_parts(x, norm)
        return attention(self, a_in, name, z1)

    def norm_linear(self, x: NBall, norm: str, name: str) -> NBall:
        """``norm`` then ``name`` with the gain carried into the map (:attr:`gained`)."""
        h2, z2 = self.ln_parts(x, norm)
        hm, hr = self.affine(h2, name)
        return hm, I.up(self.spectral[name] * h2[1] + self.gained[name] * z2 + norm_up(hr), 4)

    def activation(self, x: NBall) -> NBall:
        """ReLU: exact at the float midpoint, 1-Lipschitz; GELU and SiLU: the bound of
        their derivative (:data:`~exactmem.lm.ball_steps.LIPSCHITZ`)."""
        hm, rho = x
        if self.spec.activation == "relu":
            return np.maximum(hm, 0.0), rho
        gm, gr = activation(I.exact(hm), self.spec.activation)
        return gm, I.up(LIPSCHITZ[self.spec.activation] * rho + norm_up(gr), 3)

    def product(self, a: NBall, b: NBall) -> NBall:
        """A gated MLP's ``a * b`` (:func:`~exactmem.lm.normball_steps.product`)."""
        return product(a, b)

    def residual(self, x: NBall, h: NBall, name: str) -> NBall:
        return add(x, self.linear(h, name))

    def head(self, x: NBall) -> tuple[np.ndarray, np.ndarray]:
        """Midpoints and radii ``[B, n, vocab]`` of the logits ``x head^T``."""
        return self._head(x, 0.0)

    def norm_head(self, x: NBall, norm: str) -> tuple[np.ndarray, np.ndarray]:
        """The final norm and the head, the gain carried into the head's rows."""
        h, z = self.ln_parts(x, norm)
        return self._head(h, z[..., None] * self.gained["head"])

    def _head(self, h: NBall, extra: np.ndarray | float) -> tuple[np.ndarray, np.ndarray]:
        zm, zr = I.matmul_exact(I.exact(h[0]), self.t["head.T"], self.abs["head.T"])
        return zm, I.up(zr + h[1][..., None] * self.head_rows + extra, 4)

    def embed(self, tokens: np.ndarray) -> NBall:
        """``wte[t_p] + wpe[p]`` of ``tokens [B, n]`` as norm balls."""
        if self.spec.rotary_dims:  # rotary positions: the embedding rows exactly
            m = self.t["wte"][tokens]
            return m, np.zeros(m.shape[:-1])
        m = self.t["wte"][tokens] + self.t["wpe"][:tokens.shape[1]][None]
        return m, norm_up(2 * I.U * np.abs(m))


def attention(w: NormWeights, h: NBall, name: str, rho_z: np.ndarray | None = None) -> NBall:
    """Causal multi-head softmax attention on the normalised input ``h [B, n, d]``; with
    ``rho_z``, ``h`` is a norm's output in :meth:`NormWeights.ln_parts`' two parts.  Rotary
    positions (:meth:`NormWeights.rotary`) and grouped-query heads (query head ``h`` reads
    key/value head ``h // (heads / kv_heads)``, its radius with it)."""
    spec = w.spec
    bsz, n, d = h[0].shape
    heads, dh, kv = spec.heads, spec.d_head, spec.n_kv
    blocks = heads + 2 * kv
    m, r = w.affine(h, name)
    rho = I.up(w.blocks[name][None, None, :] * h[1][..., None]
               + norm_up(r.reshape(bsz, n, blocks, dh)), 3)  # [B, n, H + 2 KV]
    if rho_z is not None:
        rho = I.up(rho + w.gained[name][None, None, :] * rho_z[..., None], 2)
    rep = np.arange(heads) // (heads // kv)

    def part(lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
        mm = m[..., lo * dh:hi * dh].reshape(bsz, n, hi - lo, dh).transpose(0, 2, 1, 3)
        return mm, rho[..., lo:hi].transpose(0, 2, 1)  # [B, h, n, dh], [B, h, n]

    (qm, rq), (km, rk), (vm, rv) = part(0, heads), part(heads, heads + kv), \
        part(heads + kv, blocks)
    if spec.rotary_dims:
        (qm, rq), (km, rk) = w.rotary(qm, rq), w.rotary(km, rk)
    km, rk, vm, rv = km[:, rep], rk[:, rep], vm[:, rep], rv[:, rep]
    s = I.matmul(I.exact(qm), I.exact(km.transpose(0, 1, 3, 2)))
    a_, b_ = spec.score_divisor(layer_of(name))
    kappa = I.const(float(1.0 / (np.sqrt(np.float64(a_)) * b_)), 4)
    nq, nk = norm_up(qm), norm_up(km)
    move = I.up(nq[..., :, None] * rk[..., None, :] + rq[..., :, None] * nk[..., None, :]
                + rq[..., :, None] * rk[..., None, :], 6)
    s = I.mul((s[0], I.up(s[1] + move, 2)), kappa)
    future = np.triu(np.ones((n, n), dtype=bool), 1)
    wm, wr = softmax(s, future)
    om, orad = I.matmul(I.exact(wm), I.exact(vm))  # orad: the rounding of om only
    rho_h = I.up(norm_up(orad) + centred_spread(wm, wr, vm, om)
                 + I.up((wm + wr) @ rv[..., None], n + 4)[..., 0], 4)  # [B, H, n]
    rho_o = I.up(np.sqrt(I.up((rho_h * rho_h).sum(1), 2 * heads + 2)), 1)
    return om.transpose(0, 2, 1, 3).reshape(bsz, n, d), rho_o


def layer(w: NormWeights, x: NBall, i: int) -> NBall:
    """Block ``i`` on norm balls ``x [B, n, d]`` (:func:`~exactmem.lm.block.layer`)."""
    return block.layer(w, x, i)


def embed(w: NormWeights, tokens: np.ndarray) -> NBall:
    """``wte[t_p] + wpe[p]`` of ``tokens [B, n]`` as norm balls."""
    return w.embed(tokens)


def head_bounds(w: NormWeights, x: NBall) -> tuple[np.ndarray, np.ndarray]:
    """Midpoints and radii ``[B, n, vocab]`` of the logits: the final norm (when there is
    one) and the head."""
    return cast(tuple[np.ndarray, np.ndarray], block.logits(w, x))


def logit_bounds(w: NormWeights, tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Midpoints and radii ``[B, n, vocab]`` of the exact logits of ``tokens [B, n]``."""
    return cast(tuple[np.ndarray, np.ndarray], block.forward(w, w.embed(tokens)))


def decide(mid: np.ndarray, rad: np.ndarray, ys: np.ndarray
           ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """From logit balls ``[B, n, vocab]`` and labels ``[B, n]``: ``(proved, margin, lo,
    hi)``, proved where the label's lower end is above every other logit's upper end;
    ``margin``: the label's midpoint minus the best other midpoint."""
    lo, hi = I.lohi((mid, rad))
    ix = np.indices(ys.shape)
    lab_lo = lo[ix[0], ix[1], ys]
    others = hi.copy()
    others[ix[0], ix[1], ys] = -np.inf
    return lab_lo > others.max(-1), label_margin(mid, ys), lo, hi


def record(ok: np.ndarray, margin: np.ndarray, proved: list[tuple[int, ...]],
           failed: list[tuple[tuple[int, float], ...]]) -> None:
    """Append each sequence's proved positions and (position, margin) failures."""
    for j in range(len(ok)):
        proved.append(tuple(int(p) for p in np.flatnonzero(ok[j])))
        failed.append(tuple((int(p), float(margin[j, p])) for p in np.flatnonzero(~ok[j])))


def prove_fast(spec: LMSpec, sequences: Sequence[Sequence[int]],
               labels: Sequence[Sequence[int]],
               progress: Callable[[str, int, int], None] | None = None, batch: int = 64,
               on_logits: OnLogits | None = None
               ) -> tuple[list[tuple[int, ...]], list[tuple[tuple[int, float], ...]]]:
    """``(proved, failed)`` per sequence, as :class:`~exactmem.lm.positions.PositionBounds`
    holds them; ``on_logits(i, lo, hi)`` receives float bounds ``lo <= logit <= hi``
    ``[n, vocab]`` of every sequence ``i``."""
    w = NormWeights(spec)
    proved: list[tuple[int, ...]] = []
    failed: list[tuple[tuple[int, float], ...]] = []
    with np.errstate(all="ignore"):  # an overflow is an infinite radius: never proved
        for b0 in range(0, len(sequences), batch):
            toks = np.asarray(sequences[b0:b0 + batch], dtype=np.int64)
            ys = np.asarray(labels[b0:b0 + batch], dtype=np.int64)
            mid, rad = logit_bounds(w, toks)
            ok, margin, lo, hi = decide(mid, rad, ys)
            record(ok, margin, proved, failed)
            if on_logits is not None:
                for j in range(len(toks)):
                    on_logits(b0 + j, lo[j], hi[j])
            if progress is not None:
                progress("bounds", min(b0 + batch, len(sequences)), len(sequences))
    return proved, failed
