"""The model of a language-model certificate (standard library only): its header and
tensors read strictly (docs/trained-models.md, "Certificate"), prepared for
:func:`lm_forward.logits` at a working precision, and that precision chosen from the model
(:func:`precision`).  Used by :mod:`lm_verify`.
"""

from typing import Any

from ..parse import choice, exact_shape, integer, kind_of, obj, ratio, typed
from ..verdict import Unusable
from . import lm_bounds, lm_fastgelu, lm_forward, lm_limbs

SHAPE = ("architecture", "vocab_size", "context", "d_model", "heads", "layers", "d_ff",
         "activation", "layer_norm_eps", "tied_head")
SOURCES = ("tensors", "weights")  # exactly one: embedded, or a bound file (lm_weights.py)
MAX_DIM = 1 << 16
MAX_SCALE = 1100  # float64 subnormals need 1074 bits
MAX_VALUE_BITS = 1024  # bits of a numerator: a float64 below 2**1024 with its least scale
Json = dict[str, Any]  # a JSON object, or the prepared model
Tensor = tuple[list[list[int]], int]  # rows of numerators, scale E: each entry num / 2**E


ARCHITECTURES = ("pre-ln-decoder", "post-ln-decoder")
NORMS = ("layernorm", "rmsnorm")  # model.norm; absent (older certificates): layernorm
ACTIVATIONS = ("gelu_tanh", "gelu_erf", "relu", "silu")
#: optional header fields and the one value each may take when written (absent: GPT-2's
#: function), so that one function has one certificate; ``kv_heads`` and ``rotary_dims`` are
#: integers checked in :func:`header`
FLAGS = {"final_norm": False, "parallel_residual": True, "gated_mlp": True,
         "score_scale": False, "inverse_layer_scale": True}
OPTIONAL = ("norm", "kv_heads", "rotary_dims", *FLAGS)
INV_FREQ = "rope.inv_freq"


def block(m: Json) -> dict[str, tuple[str, ...]]:
    """The tensors of a block: name -> weight shape in ``d``, ``qkv`` (``d + 2 kv_heads
    d_head``) and ``f`` (``d_ff``); the bias has the weight's last dimension."""
    out = {"ln1": ("d",), "attn": ("d", "qkv"), "attn.proj": ("d", "d"), "ln2": ("d",),
           "mlp.fc": ("d", "f"), "mlp.proj": ("f", "d")}
    if m.get("gated_mlp"):
        out["mlp.gate"] = ("d", "f")
    return out


def tensor_names(m: Json) -> tuple[list[str], list[str]]:
    """``(required, optional)`` tensor names for the header ``m``; an absent optional tensor
    (a bias) is 0."""
    req, opt = ["wte", INV_FREQ if "rotary_dims" in m else "wpe"], []
    if "final_norm" not in m:
        req, opt = req + ["lnf.weight"], ["lnf.bias"]
    for i in range(m["layers"]):
        req += [f"h{i}.{t}.weight" for t in block(m)]
        opt += [f"h{i}.{t}.bias" for t in block(m)]
    if not m["tied_head"]:
        req.append("head")
    return req, opt


def shapes(m: Json) -> dict[str, list[int]]:
    """The shape of every tensor for the model header ``m`` (rows x columns; ``x W`` with
    ``W`` of shape ``[in, out]``; the token table and the head ``[vocab, d]``)."""
    v, t, d, f = m["vocab_size"], m["context"], m["d_model"], m["d_ff"]
    dh = d // m["heads"]
    kv: int = m["kv_heads"] if "kv_heads" in m else m["heads"]
    size = {"d": d, "qkv": d + 2 * kv * dh, "f": f}
    out = {"wte": [v, d], "wpe": [t, d], "lnf.weight": [d], "lnf.bias": [d], "head": [v, d],
           INV_FREQ: [m.get("rotary_dims", 0) // 2]}
    for i in range(m["layers"]):
        for name, dims in block(m).items():
            out[f"h{i}.{name}.weight"] = [size[k] for k in dims]
            out[f"h{i}.{name}.bias"] = [size[dims[-1]]]
    return out


def tensor(value: Any, where: str, shape: list[int]) -> Tensor:
    """``{"shape", "scale", "values"}`` -> ``(rows of int numerators, scale)``; the value
    of an entry is ``numerator / 2**scale`` and the scale is the least that is exact."""
    obj(value, where, ("shape", "scale", "values"))
    exact_shape(value["shape"], f"{where}.shape", shape)
    e = integer(value["scale"], f"{where}.scale", 0, MAX_SCALE)
    vals = typed(value["values"], list, f"{where}.values")
    size = shape[0] * (shape[1] if len(shape) == 2 else 1)
    if len(vals) != size:
        raise Unusable(f"{where}.values: expected {size} numerators, found {len(vals)}")
    nums = []
    for k, s in enumerate(vals):
        p, q = ratio(s, f"{where}.values[{k}]")
        if q != 1:
            raise Unusable(f"{where}.values[{k}]: expected an integer numerator, found {s[:40]!r}")
        if p.bit_length() > MAX_VALUE_BITS:
            raise Unusable(f"{where}.values[{k}]: a numerator of {p.bit_length()} bits exceeds "
                           f"the limit of {MAX_VALUE_BITS} bits (MAX_VALUE_BITS; every float64 "
                           "is within it)")
        nums.append(p)
    if e and not any(p & 1 for p in nums):
        raise Unusable(f"{where}.scale: {e} is not the least exact scale (all numerators even)")
    cols = shape[1] if len(shape) == 2 else size
    return [nums[i:i + cols] for i in range(0, size, cols)], e


def header(m: Any) -> Json:
    """Read the model header (every field but the tensors); returns ``m``.  The optional
    fields (:data:`OPTIONAL`) are read strictly: each of :data:`FLAGS` only with its one
    non-default value; ``kv_heads`` a divisor of ``heads`` below it; ``rotary_dims`` an even
    number from 2 to ``d_head`` (then no ``wpe``: tensor ``rope.inv_freq``
    ``[rotary_dims / 2]``); ``parallel_residual`` only in a pre-LN decoder.  Exactly one of
    :data:`SOURCES`: the tensors embedded, or a bound weights file."""
    obj(m, "model", SHAPE, OPTIONAL + SOURCES)
    if ("tensors" in m) == ("weights" in m):
        raise Unusable("model: exactly one of 'tensors' (embedded) and 'weights' (a bound "
                       "safetensors file)")
    choice(m["architecture"], ARCHITECTURES, "model.architecture")
    for key, value in FLAGS.items():
        if key in m and m[key] is not value:
            raise Unusable(f"model.{key}: only {str(value).lower()} may be written (absent "
                           f"means {str(not value).lower()}), found {kind_of(m[key])}")
    for key in ("vocab_size", "context", "d_model", "heads", "layers", "d_ff"):
        integer(m[key], f"model.{key}", 1, MAX_DIM)
    choice(m["activation"], ACTIVATIONS, "model.activation")
    if "norm" in m:
        choice(m["norm"], NORMS, "model.norm")
    heads = m["heads"]
    if m["d_model"] % heads:
        raise Unusable(f"model.heads: {heads} does not divide d_model = {m['d_model']}")
    if "kv_heads" in m:
        kv = integer(m["kv_heads"], "model.kv_heads", 1, heads - 1)
        if heads % kv:
            raise Unusable(f"model.kv_heads: {kv} does not divide heads = {heads}")
    if "rotary_dims" in m:
        dh = m["d_model"] // heads
        r = integer(m["rotary_dims"], "model.rotary_dims", 2, dh)
        if r % 2:
            raise Unusable(f"model.rotary_dims: expected an even number, found {r}")
    if "parallel_residual" in m and m["architecture"] != "pre-ln-decoder":
        raise Unusable("model.parallel_residual: only in a pre-ln-decoder")
    if ratio(m["layer_norm_eps"], "model.layer_norm_eps")[0] < 0:
        raise Unusable("model.layer_norm_eps: must be >= 0")
    typed(m["tied_head"], bool, "model.tied_head")
    out: Json = m
    return out


def work(m: Json, lengths: list[int], n: int) -> int:
    """An upper estimate, from the header ``m`` alone, of the multiply-adds of the forward
    passes of sequences of ``n`` tokens with the logits of ``lengths[i]`` positions wanted
    in sequence ``i`` (0: the sequence is not evaluated): per evaluated sequence and layer
    ``n (d (w + d) + 2 d d_ff) + n^2 d`` (``w`` the width of ``q | k | v``: ``3 d`` without
    ``kv_heads``; linear maps, scores and values; ``3 d d_ff`` with a gate, ``+ n d`` for the
    rotations), plus ``V d`` per
    wanted logit vector."""
    d, ff, v = m["d_model"], m["d_ff"], m["vocab_size"]
    kv: int = m["kv_heads"] if "kv_heads" in m else m["heads"]
    qkv = d + 2 * kv * (d // m["heads"])
    mlp = (3 if "gated_mlp" in m else 2) * d * ff
    block = n * (d * (qkv + d) + mlp + (d if "rotary_dims" in m else 0)) + n * n * d
    seqs = sum(1 for k in lengths if k)
    return int(seqs * m["layers"] * block + sum(lengths) * v * d)


def model(m: Any, f: int = lm_forward.F, bound: Any = None, fast: bool = True) -> Json:
    """Read the model header and its tensors (embedded, or from ``bound``, the weights file
    :func:`lm_weights.load` read); returns the prepared model for
    :func:`lm_forward.logits` at ``f`` fractional bits (:func:`at_precision`); ``fast``: its
    linear maps carry their weight limbs (:mod:`lm_limbs`) and GELU its float bounds
    (:mod:`lm_fastgelu`) when that path is available."""
    header(m)
    ep, eq = ratio(m["layer_norm_eps"], "model.layer_norm_eps")
    req, opt = tensor_names(m)
    shape = shapes(m)
    if "weights" in m:
        if bound is None:
            raise Unusable("model.weights: the bound weights file was not read")
        t = bound.tensors(req, opt, shape, fast=fast)
    else:
        ts = obj(m["tensors"], "model.tensors", req, opt)
        t = {k: tensor(v, f"model.tensors.{k}", shape[k]) for k, v in ts.items()}
    parsed = {"t": t, "tied": m["tied_head"], "final": "final_norm" not in m,
              "post_ln": m["architecture"] == "post-ln-decoder", "eps": (ep, eq),
              "heads": m["heads"], "kv_heads": m.get("kv_heads", m["heads"]),
              "activation": m["activation"], "norm": m.get("norm", "layernorm"),
              "d": m["d_model"], "layers": m["layers"], "vocab": m["vocab_size"],
              "context": m["context"], "rotary": "rotary_dims" in m,
              "parallel": "parallel_residual" in m, "gated": "gated_mlp" in m,
              "score_scale": "score_scale" not in m,
              "inverse_layer_scale": "inverse_layer_scale" in m,
              "fast": fast and lm_limbs.available()}
    return at_precision(parsed, f)


def score_scale(parsed: Json, i: int, f: int) -> tuple[int, int]:
    """The ball of block ``i``'s score factor ``1 / (sqrt(a) b)`` at ``2**-f``: ``a =
    d_head`` (1 without ``score_scale``), ``b = i + 1`` with ``inverse_layer_scale``
    (else 1); ``1 / (sqrt(a) b) = sqrt(1 / (a b**2))`` by :func:`lm_bounds.sqrt_const` (as
    before these options, so a GPT-2 certificate's balls are unchanged)."""
    a = parsed["d"] // parsed["heads"] if parsed["score_scale"] else 1
    b = i + 1 if parsed["inverse_layer_scale"] else 1
    if a * b * b == 1 and not parsed["score_scale"]:  # exactly 1 (no scale written)
        return 1 << f, 0
    lo, hi = lm_bounds.sqrt_const(1, a * b * b, f)
    return (lo + hi) >> 1, hi - ((lo + hi) >> 1)


def at_precision(parsed: Json, f: int, like: Json | None = None) -> Json:
    """The model read by :func:`model`, prepared for :func:`lm_forward.logits` at ``f``
    fractional bits (every precision is sound; it decides only how tight the balls are).
    ``like``: the same model prepared at another precision, whose weight columns and limbs
    (the same integers at every precision) are shared rather than made again."""
    t, (ep, eq) = parsed["t"], parsed["eps"]
    zero = ([[0] * parsed["d"]], 0)

    def ln(name: str) -> Any:
        return lm_forward.ln_params(t[name + ".weight"], t.get(name + ".bias", zero), f)

    def prep(lin: Any) -> Any:  # the same integers either way (lm_limbs)
        return lm_limbs.prepare(lin) if parsed.get("fast") else lin

    def lin(name: str, old: Any = None) -> Any:
        if old is None:
            return prep(lm_forward.linear(t[name + ".weight"], t.get(name + ".bias"), f))
        cols, _, e, l1, _ = old
        return lm_limbs.shared(lm_forward.at_bias(cols, e, l1, t.get(name + ".bias"), f), old)

    def was(i: int, key: str) -> Any:
        return None if like is None else like["blocks"][i][key]

    blocks = [{"ln1": ln(f"h{i}.ln1"), "attn": lin(f"h{i}.attn", was(i, "attn")),
               "proj": lin(f"h{i}.attn.proj", was(i, "proj")),
               "ln2": ln(f"h{i}.ln2"), "fc": lin(f"h{i}.mlp.fc", was(i, "fc")),
               "gate": lin(f"h{i}.mlp.gate", was(i, "gate")) if parsed["gated"] else None,
               "mlp_proj": lin(f"h{i}.mlp.proj", was(i, "mlp_proj")),
               "scale": score_scale(parsed, i, f)}
              for i in range(parsed["layers"])]
    rows, e = t["wte" if parsed["tied"] else "head"]
    head = like["head"] if like is not None else \
        prep(lm_forward.linear(([list(c) for c in zip(*rows)], e), None, f))
    consts = lm_forward.constants(parsed["d"] // parsed["heads"], f)
    if parsed.get("fast"):  # GELU's float64 outward bounds (lm_fastgelu), else one loop
        consts["fast_gelu"] = lm_fastgelu.constants(consts["c"], f)
        consts["fused_gelu"] = True  # (lm_fusedgelu: the integers of lm_forward.gelu)
    return {"wte": t["wte"], "wpe": None if parsed["rotary"] else t["wpe"], "blocks": blocks,
            "lnf": ln("lnf") if parsed["final"] else None, "post_ln": parsed["post_ln"],
            "head": head,
            "eps": ((ep << 2 * f) // eq, -((-ep << 2 * f) // eq)), "heads": parsed["heads"],
            "kv_heads": parsed["kv_heads"], "parallel": parsed["parallel"],
            "rope": t[INV_FREQ] if parsed["rotary"] else None, "rope_cache": [],
            "activation": parsed["activation"], "norm": parsed["norm"], "f": f,
            "parsed": parsed, "fast": bool(parsed.get("fast")),
            "consts": consts,
            "vocab": parsed["vocab"], "context": parsed["context"]}


MAX_F = 1024  # the largest working precision (bits); any precision is sound
LOOSE = 12  # a logit radius above 2**-LOOSE raises the precision


def prepared(net: Json, toks: list[list[int]], pos: list[list[int]], coded: bool) -> Json:
    """``net`` at the working precision for this certificate, chosen from the model: the logit
    radius of the first sequence with anything to prove shows how much the balls grow through
    the network (it depends on the weights, hardly on the tokens).  It is evaluated at
    ``net``'s precision and, while the balls grow past an attention score radius of 1 on the
    way (the growth exceeds the precision), at twice that.  When the radius exceeds
    ``2**-LOOSE``, or a probe at a doubled precision leaves it below, the precision becomes
    the next multiple of 16 at least 28 bits above the growth (the radius about
    ``2**-28``), never below ``net``'s.  Never above :data:`MAX_F` (a model whose balls
    grow by more is checked at ``MAX_F``, where its positions may stay unproved: the cost of
    a check grows with the precision and a crafted norm gain could otherwise ask for any).  The same
    sequence in every shard, so every shard picks the same precision; any precision is
    sound."""
    i = next((k for k, row in enumerate(pos) if row or coded), None)
    if i is None:
        return net
    start: int = net["f"]
    while True:
        f: int = net["f"]
        consts = {k: v for k, v in net["consts"].items() if k != "fast_gelu"}
        try:  # the standard GELU, so that every path picks the same precision
            outs = lm_forward.logits(dict(net, consts=consts), toks[i], pos[i] or [0])
        except lm_bounds.Degenerate:  # a score radius past 1: the growth exceeds f bits
            if f >= MAX_F:
                return net
            net = at_precision(net["parsed"], min(2 * f, MAX_F), net)
            continue
        bits: int = max(r for _, r in outs.values()).bit_length()  # units of 2**-f
        want = max(min(-(-(bits + 28) // 16) * 16, MAX_F), start)
        if want == f or (f == start and bits <= f - LOOSE):
            return net
        return at_precision(net["parsed"], want, net)
