"""The decoder's wiring, written once: which operation feeds which, for every arithmetic
domain (docs/trained-models.md, "Semantics").

A domain is an :class:`Ops` subclass: it holds the model's weights in its own form and
implements the operations on its own values (float64 arrays, entry-wise balls, norm balls,
python-flint arb rows, torch tensors, ONNX node names):

- ``norm(x, name)``: the norm ``name`` (LayerNorm or RMSNorm, as ``spec.norm`` says);
- ``linear(x, name)``: ``x W + b`` with the tensors ``name.weight`` / ``name.bias``;
- ``attention(x, name)``: ``q | k | v = x W + b`` (``name``), rotary positions on ``q`` and
  ``k`` when ``spec.rotary_dims`` (each domain's ``rotary``), causal multi-head softmax
  attention with scores ``q.k`` over ``spec.score_divisor(i)``, grouped-query when
  ``spec.kv_heads``, the heads concatenated;
- ``activation(x)``: ``spec.activation`` entry-wise;
- ``product(a, b)``: the entry-wise product (a gated MLP's ``act(gate) * up``);
- ``residual(x, h, name)``: ``x + (h W + b)``, the residual stream plus the branch's output
  projection ``name`` (in a decoder every branch ends in one);
- ``head(x)``: the logits ``x head^T`` (``head = wte`` when tied).

Fused operations default to their composition; a domain whose bounds are tighter when it
sees two steps at once overrides them (the norm balls of :mod:`exactmem.lm.normballs` carry
a norm's gain into the following linear map): ``norm_attention``, ``norm_linear``,
``norm_head``.  The embedding (``wte[t_p] + wpe[p]``) is each domain's own entry point,
since its input is not a domain value.

The function, with ``norm_first`` (pre-LN, GPT-2) a layer is ``x += Attn(LN1(x))`` then
``x += MLP(LN2(x))``, ``MLP(h) = act(h W_fc + b_fc) W_proj + b_proj``; post-LN (torch's
encoder layer default) ``x = LN1(x + Attn(x))`` then ``x = LN2(x + MLP(x))``; the logits
are ``LNf(x) head^T``, or ``x head^T`` without a final norm.  A parallel block (GPT-NeoX's
``use_parallel_residual``) is ``x + Attn(LN1(x)) + MLP(LN2(x))``; a gated MLP (SwiGLU) is
``(act(h W_gate + b_gate) * (h W_fc + b_fc)) W_proj + b_proj``.
"""

from __future__ import annotations

from typing import Any, Generic, TypeVar

from exactmem.lm.decoder import LMSpec

X = TypeVar("X")


class Ops(Generic[X]):
    """The operations of one arithmetic domain on its values ``X`` (module docstring)."""

    spec: LMSpec

    def norm(self, x: X, name: str) -> X:
        raise NotImplementedError

    def linear(self, x: X, name: str) -> X:
        raise NotImplementedError

    def attention(self, x: X, name: str) -> X:
        raise NotImplementedError

    def activation(self, x: X) -> X:
        raise NotImplementedError

    def product(self, a: X, b: X) -> X:
        raise NotImplementedError

    def residual(self, x: X, h: X, name: str) -> X:
        raise NotImplementedError

    def head(self, x: X) -> Any:
        raise NotImplementedError

    # fused operations: the composition unless a domain bounds the pair more tightly
    def norm_attention(self, x: X, norm: str, name: str) -> X:
        return self.attention(self.norm(x, norm), name)

    def norm_linear(self, x: X, norm: str, name: str) -> X:
        return self.linear(self.norm(x, norm), name)

    def norm_head(self, x: X, norm: str) -> Any:
        return self.head(self.norm(x, norm))


def mlp(ops: Ops[X], x: X, p: str, norm: str | None) -> X:
    """The MLP of block ``p`` up to its output projection, on ``norm(x)`` (or ``x``)."""
    if not ops.spec.gated_mlp:
        if norm is None:
            return ops.activation(ops.linear(x, p + "mlp.fc"))
        return ops.activation(ops.norm_linear(x, norm, p + "mlp.fc"))
    h = x if norm is None else ops.norm(x, norm)
    return ops.product(ops.activation(ops.linear(h, p + "mlp.gate")), ops.linear(h, p + "mlp.fc"))


def layer(ops: Ops[X], x: X, i: int) -> X:
    """Block ``i`` on the residual stream ``x``."""
    p = f"h{i}."
    if ops.spec.parallel_residual:
        a = ops.norm_attention(x, p + "ln1", p + "attn")
        m = mlp(ops, x, p, p + "ln2")
        return ops.residual(ops.residual(x, a, p + "attn.proj"), m, p + "mlp.proj")
    if ops.spec.norm_first:
        x = ops.residual(x, ops.norm_attention(x, p + "ln1", p + "attn"), p + "attn.proj")
        return ops.residual(x, mlp(ops, x, p, p + "ln2"), p + "mlp.proj")
    x = ops.norm(ops.residual(x, ops.attention(x, p + "attn"), p + "attn.proj"), p + "ln1")
    return ops.norm(ops.residual(x, mlp(ops, x, p, None), p + "mlp.proj"), p + "ln2")


def logits(ops: Ops[X], x: X) -> Any:
    """The final norm (when the model has one) and the head."""
    return ops.norm_head(x, "lnf") if ops.spec.final_norm else ops.head(x)


def forward(ops: Ops[X], x: X, start: int = 0) -> Any:
    """Blocks ``start .. layers - 1`` on the embedded stream ``x``, then :func:`logits`."""
    for i in range(start, ops.spec.layers):
        x = layer(ops, x, i)
    return logits(ops, x)
