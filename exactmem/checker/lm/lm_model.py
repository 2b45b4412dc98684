"""The model of a language-model certificate (standard library only): its header and
tensors read strictly (docs/trained-models.md, "Certificate"), prepared for
:func:`lm_forward.logits` at a working precision, and that precision chosen from the model
(:func:`precision`).  Used by :mod:`lm_verify`.
"""

from ..parse import choice, exact_shape, integer, kind_of, obj, ratio, typed
from ..verdict import Unusable
from . import lm_fastgelu, lm_forward, lm_limbs

SHAPE = ("architecture", "vocab_size", "context", "d_model", "heads", "layers", "d_ff",
         "activation", "layer_norm_eps", "tied_head")
SOURCES = ("tensors", "weights")  # exactly one: embedded, or a bound file (lm_weights.py)
MAX_DIM = 1 << 16
MAX_SCALE = 1100  # float64 subnormals need 1074 bits
MAX_VALUE_BITS = 1024  # bits of a numerator: a float64 below 2**1024 with its least scale


ARCHITECTURES = ("pre-ln-decoder", "post-ln-decoder")
NORMS = ("layernorm", "rmsnorm")  # model.norm; absent (older certificates): layernorm


def tensor_names(layers, tied, final_norm=True):
    """``(required, optional)`` tensor names; an absent optional tensor (a bias) is 0."""
    req, opt = ["wte", "wpe"], []
    if final_norm:
        req, opt = req + ["lnf.weight"], ["lnf.bias"]
    for i in range(layers):
        req += [f"h{i}.{t}.weight" for t in ("ln1", "attn", "attn.proj", "ln2", "mlp.fc",
                                               "mlp.proj")]
        opt += [f"h{i}.{t}.bias" for t in ("ln1", "attn", "attn.proj", "ln2", "mlp.fc",
                                             "mlp.proj")]
    if not tied:
        req.append("head")
    return req, opt


def shapes(m):
    """The shape of every tensor for the model header ``m`` (rows x columns; ``x W`` with
    ``W`` of shape ``[in, out]``; the token table and the head ``[vocab, d]``)."""
    v, t, d, f = m["vocab_size"], m["context"], m["d_model"], m["d_ff"]
    out = {"wte": [v, d], "wpe": [t, d], "lnf.weight": [d], "lnf.bias": [d], "head": [v, d]}
    for i in range(m["layers"]):
        p = f"h{i}."
        out.update({p + "ln1.weight": [d], p + "ln1.bias": [d], p + "ln2.weight": [d],
                    p + "ln2.bias": [d], p + "attn.weight": [d, 3 * d], p + "attn.bias": [3 * d],
                    p + "attn.proj.weight": [d, d], p + "attn.proj.bias": [d],
                    p + "mlp.fc.weight": [d, f], p + "mlp.fc.bias": [f],
                    p + "mlp.proj.weight": [f, d], p + "mlp.proj.bias": [d]})
    return out


def tensor(value, where, shape):
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


def header(m):
    """Read the model header (every field but the tensors); returns ``m``."""
    obj(m, "model", SHAPE, ("final_norm", "norm") + SOURCES)
    if ("tensors" in m) == ("weights" in m):
        raise Unusable("model: exactly one of 'tensors' (embedded) and 'weights' (a bound "
                       "safetensors file)")
    choice(m["architecture"], ARCHITECTURES, "model.architecture")
    if "final_norm" in m and m["final_norm"] is not False:  # absent: a final norm
        raise Unusable(f"model.final_norm: only false may be written (absent means a final "
                       f"LayerNorm), found {kind_of(m['final_norm'])}")
    for key in ("vocab_size", "context", "d_model", "heads", "layers", "d_ff"):
        integer(m[key], f"model.{key}", 1, MAX_DIM)
    choice(m["activation"], ("gelu_tanh", "gelu_erf", "relu"), "model.activation")
    if "norm" in m:
        choice(m["norm"], NORMS, "model.norm")
    if m["d_model"] % m["heads"]:
        raise Unusable(f"model.heads: {m['heads']} does not divide d_model = {m['d_model']}")
    if ratio(m["layer_norm_eps"], "model.layer_norm_eps")[0] < 0:
        raise Unusable("model.layer_norm_eps: must be >= 0")
    typed(m["tied_head"], bool, "model.tied_head")
    return m


def work(m, lengths, n):
    """An upper estimate, from the header ``m`` alone, of the multiply-adds of the forward
    passes of sequences of ``n`` tokens with the logits of ``lengths[i]`` positions wanted
    in sequence ``i`` (0: the sequence is not evaluated): per evaluated sequence and layer
    ``n (4 d^2 + 2 d d_ff) + n^2 d`` (linear maps, scores and values), plus ``V d`` per
    wanted logit vector."""
    d, ff, v = m["d_model"], m["d_ff"], m["vocab_size"]
    block = n * (4 * d * d + 2 * d * ff) + n * n * d
    seqs = sum(1 for k in lengths if k)
    return seqs * m["layers"] * block + sum(lengths) * v * d


def model(m, f=lm_forward.F, bound=None, fast=True):
    """Read the model header and its tensors (embedded, or from ``bound``, the weights file
    :func:`lm_weights.load` read); returns the prepared model for
    :func:`lm_forward.logits` at ``f`` fractional bits (:func:`at_precision`); ``fast``: its
    linear maps carry their weight limbs (:mod:`lm_limbs`) and GELU its float bounds
    (:mod:`lm_fastgelu`) when that path is available."""
    header(m)
    arch, final = m["architecture"], "final_norm" not in m
    act = m["activation"]
    norm = m.get("norm", "layernorm")
    ep, eq = ratio(m["layer_norm_eps"], "model.layer_norm_eps")
    tied = m["tied_head"]
    req, opt = tensor_names(m["layers"], tied, final)
    shape = shapes(m)
    if "weights" in m:
        if bound is None:
            raise Unusable("model.weights: the bound weights file was not read")
        t = bound.tensors(req, opt, shape)
    else:
        ts = obj(m["tensors"], "model.tensors", req, opt)
        t = {k: tensor(v, f"model.tensors.{k}", shape[k]) for k, v in ts.items()}
    parsed = {"t": t, "tied": tied, "final": final, "post_ln": arch == "post-ln-decoder",
              "eps": (ep, eq), "heads": m["heads"], "activation": act, "norm": norm,
              "d": m["d_model"],
              "layers": m["layers"], "vocab": m["vocab_size"], "context": m["context"],
              "fast": fast and lm_limbs.available()}
    return at_precision(parsed, f)


def at_precision(parsed, f):
    """The model read by :func:`model`, prepared for :func:`lm_forward.logits` at ``f``
    fractional bits (every precision is sound; it decides only how tight the balls are)."""
    t, (ep, eq) = parsed["t"], parsed["eps"]
    zero = ([[0] * parsed["d"]], 0)

    def ln(name):
        return lm_forward.ln_params(t[name + ".weight"], t.get(name + ".bias", zero), f)

    def prep(lin):  # the same integers either way (lm_limbs)
        return lm_limbs.prepare(lin) if parsed.get("fast") else lin

    def lin(name):
        return prep(lm_forward.linear(t[name + ".weight"], t.get(name + ".bias"), f))

    blocks = [{"ln1": ln(f"h{i}.ln1"), "attn": lin(f"h{i}.attn"), "proj": lin(f"h{i}.attn.proj"),
               "ln2": ln(f"h{i}.ln2"), "fc": lin(f"h{i}.mlp.fc"),
               "mlp_proj": lin(f"h{i}.mlp.proj")} for i in range(parsed["layers"])]
    rows, e = t["wte" if parsed["tied"] else "head"]
    consts = lm_forward.constants(parsed["d"] // parsed["heads"], f)
    if parsed.get("fast"):  # GELU's float64 outward bounds (lm_fastgelu)
        consts["fast_gelu"] = lm_fastgelu.constants(consts["c"], f)
    return {"wte": t["wte"], "wpe": t["wpe"], "blocks": blocks,
            "lnf": ln("lnf") if parsed["final"] else None, "post_ln": parsed["post_ln"],
            "head": prep(lm_forward.linear(([list(c) for c in zip(*rows)], e), None, f)),
            "eps": ((ep << 2 * f) // eq, -((-ep << 2 * f) // eq)), "heads": parsed["heads"],
            "activation": parsed["activation"], "norm": parsed["norm"], "f": f,
            "parsed": parsed, "fast": bool(parsed.get("fast")),
            "consts": consts,
            "vocab": parsed["vocab"], "context": parsed["context"]}


MAX_F = 1024  # the largest working precision (bits); any precision is sound
PROBE_LIMIT = 116  # radius bits at 2**-128 (a radius of 2**-12) above which F is raised


def precision(net, toks, pos, coded):
    """The working precision for this certificate, chosen from the model: the logit radius of
    the first sequence with anything to prove, evaluated at ``lm_forward.F`` bits, shows how
    much the balls grow through the network (it depends on the weights, hardly on the
    tokens); when it exceeds ``2**-12``, ``F`` becomes the next multiple of 16 at least 28
    bits above that radius (so about ``2**-28``), and ``2 F`` when the balls grew past an
    attention score radius of 1 on the way; never above :data:`MAX_F` (a model whose balls
    grow by more is checked at ``MAX_F``, where its positions may stay unproved: the cost of
    a check grows with ``F`` and a crafted norm gain could otherwise ask for any ``F``).  The
    same sequence in every shard, so every shard picks the same precision; any precision is
    sound."""
    i = next((k for k, row in enumerate(pos) if row or coded), None)
    if i is None:
        return lm_forward.F
    consts = {k: v for k, v in net["consts"].items() if k != "fast_gelu"}
    try:  # the standard GELU, so that every path picks the same precision
        outs = lm_forward.logits(dict(net, consts=consts), toks[i], pos[i] or [0])
    except lm_forward.Degenerate:  # a score radius past 1: the growth exceeds F bits
        return 2 * lm_forward.F
    bits = max(r for _, r in outs.values()).bit_length()
    if bits <= PROBE_LIMIT:
        return lm_forward.F
    return min(-(-(bits + 28) // 16) * 16, MAX_F)
