"""Checking a language-model certificate ``exactmem.lm-certificate/1`` (standard library only).

Read strictly (docs/trained-models.md, "Certificate"): the model's shape, its norm kind
(``model.norm``: ``"layernorm"`` or ``"rmsnorm"``; absent in older certificates: LayerNorm),
every tensor as integers over one power of two, the dataset (embedded or bound by SHA-256, a
``seq2seq`` token-id dataset: a label at every position), the claimed positions and the
digest.  Each claimed position is re-proved with the rigorous forward pass of
:mod:`lm_forward`: the lower bound of the label's logit must exceed the upper bound of every
other logit.  Nothing the producer computed is trusted; the claim "K of M positions" is
stated by the checker, with the working precision it chose from the model
(:func:`precision`).

Optional ``claims.code_length_bits``: per sequence an upper bound ``"p/q"`` on its code length
``-sum_t log2 p(label_t)`` over every position (docs/memorized-bits.md).  The checker derives
its own upper bound from its logit balls (:mod:`lm_codelength`) and rejects a claim below it;
it then states the memorized bits against the uniform reference over the dataset's
vocabulary.
"""

import hashlib

from . import lm_codelength, lm_forward
from .dataset import canonical, dataset
from .parse import Unusable, choice, integer, obj, ratio, typed

FORMAT = "exactmem.lm-certificate/1"
TOP = ("format", "model", "dataset", "claims", "digest")
SHAPE = ("architecture", "vocab_size", "context", "d_model", "heads", "layers", "d_ff",
         "activation", "layer_norm_eps", "tied_head", "tensors")
MAX_DIM = 1 << 16
MAX_SCALE = 1100  # float64 subnormals need 1074 bits


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
    if value["shape"] != shape:
        raise Unusable(f"{where}.shape: expected {shape}, found {value['shape']!r}")
    e = integer(value["scale"], f"{where}.scale", 0, MAX_SCALE)
    vals = typed(value["values"], list, f"{where}.values")
    size = shape[0] * (shape[1] if len(shape) == 2 else 1)
    if len(vals) != size:
        raise Unusable(f"{where}.values: expected {size} numerators, found {len(vals)}")
    nums = []
    for k, s in enumerate(vals):
        p, q = ratio(s, f"{where}.values[{k}]")
        if q != 1:
            raise Unusable(f"{where}.values[{k}]: expected an integer numerator, found {s!r}")
        nums.append(p)
    if e and not any(p & 1 for p in nums):
        raise Unusable(f"{where}.scale: {e} is not the least exact scale (all numerators even)")
    cols = shape[1] if len(shape) == 2 else size
    return [nums[i:i + cols] for i in range(0, size, cols)], e


def model(m, f=lm_forward.F):
    """Read the model header and its tensors; returns the prepared model for
    :func:`lm_forward.logits` at ``f`` fractional bits (:func:`at_precision`)."""
    obj(m, "model", SHAPE, ("final_norm", "norm"))
    arch = choice(m["architecture"], ARCHITECTURES, "model.architecture")
    final = True
    if "final_norm" in m:  # written only as false (no final LayerNorm)
        if m["final_norm"] is not False:
            raise Unusable(f"model.final_norm: only false may be written (absent means a final "
                           f"LayerNorm), found {m['final_norm']!r}")
        final = False
    for key in ("vocab_size", "context", "d_model", "heads", "layers", "d_ff"):
        integer(m[key], f"model.{key}", 1, MAX_DIM)
    act = choice(m["activation"], ("gelu_tanh", "gelu_erf", "relu"), "model.activation")
    norm = choice(m["norm"], NORMS, "model.norm") if "norm" in m else "layernorm"
    if m["d_model"] % m["heads"]:
        raise Unusable(f"model.heads: {m['heads']} does not divide d_model = {m['d_model']}")
    ep, eq = ratio(m["layer_norm_eps"], "model.layer_norm_eps")
    if ep < 0:
        raise Unusable("model.layer_norm_eps: must be >= 0")
    tied = typed(m["tied_head"], bool, "model.tied_head")
    req, opt = tensor_names(m["layers"], tied, final)
    ts = obj(m["tensors"], "model.tensors", req, opt)
    shape = shapes(m)
    t = {k: tensor(v, f"model.tensors.{k}", shape[k]) for k, v in ts.items()}
    parsed = {"t": t, "tied": tied, "final": final, "post_ln": arch == "post-ln-decoder",
              "eps": (ep, eq), "heads": m["heads"], "activation": act, "norm": norm,
              "d": m["d_model"],
              "layers": m["layers"], "vocab": m["vocab_size"], "context": m["context"]}
    return at_precision(parsed, f)


def at_precision(parsed, f):
    """The model read by :func:`model`, prepared for :func:`lm_forward.logits` at ``f``
    fractional bits (every precision is sound; it decides only how tight the balls are)."""
    t, (ep, eq) = parsed["t"], parsed["eps"]
    zero = ([[0] * parsed["d"]], 0)

    def ln(name):
        return lm_forward.ln_params(t[name + ".weight"], t.get(name + ".bias", zero), f)

    def lin(name):
        return lm_forward.linear(t[name + ".weight"], t.get(name + ".bias"), f)

    blocks = [{"ln1": ln(f"h{i}.ln1"), "attn": lin(f"h{i}.attn"), "proj": lin(f"h{i}.attn.proj"),
               "ln2": ln(f"h{i}.ln2"), "fc": lin(f"h{i}.mlp.fc"),
               "mlp_proj": lin(f"h{i}.mlp.proj")} for i in range(parsed["layers"])]
    rows, e = t["wte" if parsed["tied"] else "head"]
    return {"wte": t["wte"], "wpe": t["wpe"], "blocks": blocks,
            "lnf": ln("lnf") if parsed["final"] else None, "post_ln": parsed["post_ln"],
            "head": lm_forward.linear(([list(c) for c in zip(*rows)], e), None, f),
            "eps": ((ep << 2 * f) // eq, -((-ep << 2 * f) // eq)), "heads": parsed["heads"],
            "activation": parsed["activation"], "norm": parsed["norm"], "f": f,
            "parsed": parsed,
            "consts": lm_forward.constants(parsed["d"] // parsed["heads"], f),
            "vocab": parsed["vocab"], "context": parsed["context"]}


PROBE_LIMIT = 116  # radius bits at 2**-128 (a radius of 2**-12) above which F is raised


def precision(net, toks, pos, coded):
    """The working precision for this certificate, chosen from the model: the logit radius of
    the first sequence with anything to prove, evaluated at ``lm_forward.F`` bits, shows how
    much the balls grow through the network (it depends on the weights, hardly on the
    tokens); when it exceeds ``2**-12``, ``F`` becomes the next multiple of 16 at least 28
    bits above that radius (so about ``2**-28``), and ``2 F`` when the balls grew past an
    attention score radius of 1 on the way.  The same sequence in every shard, so every
    shard picks the same precision; any precision is sound."""
    i = next((k for k, row in enumerate(pos) if row or coded), None)
    if i is None:
        return lm_forward.F
    try:
        outs = lm_forward.logits(net, toks[i], pos[i] or [0])
    except lm_forward.Degenerate:  # a score radius past 1: the growth exceeds F bits
        return 2 * lm_forward.F
    bits = max(r for _, r in outs.values()).bit_length()
    if bits <= PROBE_LIMIT:
        return lm_forward.F
    return -(-(bits + 28) // 16) * 16


def code_lengths(value, toks, labels, size):
    """``claims.code_length_bits``: one non-negative ``"p/q"`` per sequence; the dataset must
    label each position with the next token (the last label is the token after the input),
    so the labels of a sequence are its tokens 1..n, coded given token 0."""
    rows = typed(value, list, "claims.code_length_bits")
    if len(rows) != len(toks):
        raise Unusable(f"claims.code_length_bits: expected {len(toks)} bounds, found {len(rows)}")
    out = []
    for i, text in enumerate(rows):
        p, q = ratio(text, f"claims.code_length_bits[{i}]")
        if p < 0:
            raise Unusable(f"claims.code_length_bits[{i}]: a code length is >= 0")
        if any(labels[i][k] != toks[i][k + 1] for k in range(len(toks[i]) - 1)):
            raise Unusable(f"claims.code_length_bits: sequence {i} is not labelled with its "
                           "next tokens, so its code length is not that of the sequence")
        if labels[i][-1] >= size:
            raise Unusable(f"claims.code_length_bits: sequence {i}'s last label is not a token "
                           f"of the dataset's vocabulary of {size}")
        out.append((p, q))
    return out


def claims(value, toks):
    """``claims``: ``partial`` and, per sequence, its claimed positions (strictly
    increasing); without ``partial`` every position must be claimed."""
    obj(value, "claims", ("partial", "positions"), ("code_length_bits",))
    partial = typed(value["partial"], bool, "claims.partial")
    pos = typed(value["positions"], list, "claims.positions")
    if len(pos) != len(toks):
        raise Unusable(f"claims.positions: expected {len(toks)} lists, found {len(pos)}")
    n = len(toks[0])
    for i, row in enumerate(pos):
        typed(row, list, f"claims.positions[{i}]")
        for j, p in enumerate(row):
            integer(p, f"claims.positions[{i}][{j}]", 0, n - 1)
            if j and p <= row[j - 1]:
                raise Unusable(f"claims.positions[{i}]: positions must be strictly increasing")
        if not partial and len(row) != n:
            raise Unusable(f"claims.positions[{i}]: without partial every position is claimed")
    return partial, pos


def margin_failure(i, p, y, mids, rad, f=lm_forward.F):
    """None when the label's logit provably exceeds every other; else the failure text
    with the proved margin bound (``2**-F`` units shown as a decimal-free ratio)."""
    if len(mids) == 1:
        return None  # one class: its logit is the unique maximum
    best = max(m for k, m in enumerate(mids) if k != y)
    margin = mids[y] - best - 2 * rad
    if margin > 0:
        return None
    rival = next(k for k, m in enumerate(mids) if k != y and m == best)
    return (f"sequence {i}, position {p}: label {y} is not proved the unique argmax "
            f"(class {rival}; margin lower bound {margin}/2^{f})")


def check(cert, base, progress=None, shard=(0, 1), unproved=None, derived=None, totals=None):
    """Check a decoded LM certificate; returns ``(failures, unusable, claim)``.  The
    positions ``(i, p)`` whose margin is not proved are appended to ``unproved`` if given;
    with code lengths, ``derived[i]`` is set to the checker's own upper bound of sequence
    ``i``'s code length (units ``2**-lm_codelength.P``) if ``derived`` is a dict.  A dict
    ``totals`` receives the slice's exact counts and memorized bits (:func:`merge`,
    :func:`claim_text`), so that shards combine into the claim of one pass."""
    failures = []
    try:
        obj(cert, "certificate", TOP)
        if type(cert["digest"]) is not str:
            raise Unusable("digest: expected a 'sha256:...' string")
        task, inputs, toks, labels, size, ds_hash = dataset(cert["dataset"], base)
        if ds_hash != cert["dataset"]["sha256"]:
            failures.append("dataset: its SHA-256 does not match the one bound in the certificate")
        if (task, inputs) != ("seq2seq", "token-ids"):
            raise Unusable(f"dataset: a language-model certificate needs a seq2seq token-id "
                           f"dataset (a label at every position), found {task}, {inputs}")
        net = model(cert["model"])
        if size > net["vocab"]:
            raise Unusable(f"dataset.vocab_size: {size} tokens, more than the model's "
                           f"vocabulary of {net['vocab']}")
        if len(toks[0]) > net["context"]:
            raise Unusable(f"dataset: sequences of {len(toks[0])} tokens exceed the model's "
                           f"context of {net['context']}")
        partial, pos = claims(cert["claims"], toks)
        coded = None
        if "code_length_bits" in cert["claims"]:
            coded = code_lengths(cert["claims"]["code_length_bits"], toks, labels, size)
        body = {k: v for k, v in cert.items() if k != "digest"}
        actual = "sha256:" + hashlib.sha256(canonical(body).encode()).hexdigest()
        if cert["digest"] != actual:
            failures.insert(0, f"digest: the certificate's content does not match its digest "
                               f"(claimed {cert['digest'][:80]}, content hashes to {actual})")
    except Unusable as exc:
        return [*failures, str(exc)], True, None
    f = precision(net, toks, pos, coded is not None)
    if f != net["f"]:
        net = at_precision(net["parsed"], f)
    k, count = shard
    lo, hi = k * len(toks) // count, (k + 1) * len(toks) // count
    proved = full = 0
    n = len(toks[0])
    for i in range(lo, hi):
        if progress is not None:
            progress("forward", i - lo, hi - lo)
        if not pos[i] and coded is None:
            continue
        if max(labels[i]) >= net["vocab"]:
            failures.append(f"sequence {i}: a label is not a token of the model's vocabulary")
            continue
        try:
            outs = lm_forward.logits(net, toks[i], range(n) if coded else pos[i])
        except lm_forward.Degenerate as exc:
            failures.append(f"sequence {i}: {exc}")
            continue
        if coded is not None:
            bad = code_length_failure(i, coded[i], labels[i], outs, derived, f)
            if bad:
                failures.append(bad)
        for p in pos[i]:
            mids, rad = outs[p]
            bad = margin_failure(i, p, labels[i][p], mids, rad, f)
            if bad:
                failures.append(bad)
                if unproved is not None:
                    unproved.append((i, p))
        proved += len(pos[i])
        full += len(pos[i]) == len(toks[i])
    if progress is not None:
        progress("forward", hi - lo, hi - lo)
    mem = None if coded is None else lm_codelength.memorized(
        coded[lo:hi], lm_codelength.reference_lower(n, size))
    part = {"proved": proved, "positions": (hi - lo) * n, "full": full, "sequences": hi - lo,
            "partial": partial, "n": n, "vocab": size, "memorized": mem, "f": f}
    if totals is not None:
        totals.update(part)
    return failures, False, None if failures else claim_text(part)


def merge(parts):
    """The totals of disjoint slices, in order, as those of their union: counts and the
    exact rational memorized bits are sums (no rounding before the claim is written)."""
    out = dict(parts[0])
    for t in parts[1:]:
        for key in ("proved", "positions", "full", "sequences"):
            out[key] += t[key]
        if out["memorized"] is not None and t["memorized"] is not None:
            out["memorized"] = tuple(a + b for a, b in zip(out["memorized"], t["memorized"]))
    return out


def claim_text(t):
    """The claim lines for the totals ``t`` of :func:`check` (or of :func:`merge`)."""
    claim = (f"{t['proved']} of {t['positions']} positions have the label as unique argmax "
             f"({t['full']} of {t['sequences']} sequences in full; "
             + ("partial" if t["partial"] else "all positions claimed")
             + f"; rigorous bounds at 2^-{t.get('f', lm_forward.F)} on the real-valued "
               "function of the stored weights)")
    if t["memorized"] is not None:
        clipped, unclipped = t["memorized"]
        claim += "\nc claim: " + memorized_text(clipped, unclipped, t["sequences"], t["n"],
                                                 t["vocab"])
    return claim


def code_length_failure(i, claimed, labels, outs, derived=None, f=lm_forward.F):
    """None when the checker's own upper bound of sequence ``i``'s code length is at most the
    claimed ``p/q``; else the failure text."""
    p, q = claimed
    upper = 0
    for k, y in enumerate(labels):
        mids, rad = outs[k]
        upper += lm_codelength.position_upper(mids, rad, y, f)
    if derived is not None:
        derived[i] = upper
    if upper * q <= p << lm_codelength.P:
        return None
    return (f"sequence {i}: claimed code length {p}/{q} bits is below what the checker "
            f"proves ({upper}/2^{lm_codelength.P} bits)")


def memorized_text(clipped, unclipped, sequences, n, vocab):
    """The memorized-bits claim from the exact lower bounds ``clipped`` and ``unclipped``
    (sums over ``sequences`` of proved code-length bounds; docs/memorized-bits.md)."""
    cl = clipped.numerator // clipped.denominator
    un = unclipped.numerator // unclipped.denominator
    return (f"at least {cl} bits of the dataset are memorized by this model (reference: "
            f"uniform over {vocab} tokens; {n} predicted positions per sequence, token 0 not "
            f"predicted; per sequence max(0, {n} log2 {vocab} - code length), summed over "
            f"{sequences} sequences as Morris et al. 2025; unclipped sum at least {un} bits; "
            "rigorous lower bounds, rounded down)")
