"""``exactmem.certify_lm``: certify the positions where a trained language model (a GPT-2
checkpoint directory, a nanoGPT checkpoint, a torch ``nn.TransformerEncoderLayer`` stack,
or such a model as a live torch module) has the label as unique argmax: import,
cross-check, prove positions, self-check, write.

The stages (docs/trained-models.md): :func:`~exactmem.lm.checkpoints.gpt2.load_gpt2` or
:func:`~exactmem.lm.checkpoints.nanogpt.load_nanogpt` reads the checkpoint exactly; the
spec's float64 forward pass must agree with a torch forward pass on DATA (else the import is
wrong: exit 2) -- the user's own module when one is given (``module``), else the reference
module built from the saved config, and then the config's reading of the tensors is
compared on the labels with the other readings its config could mistype
(:mod:`~exactmem.lm.checkpoints.readings`; docs/certify-model.md, "Which function");
:func:`~exactmem.lm.positions.prove_positions` decides the positions with ball
arithmetic; the stdlib checker re-proves the certificate before it is written.  Without
``partial`` every position must be proved (the failing positions are returned with their
margins, nothing written).  ``self_check=False`` writes the producer's positions unchecked
(and without code-length claims, whose value is the checker's own bound).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from exactmem.errors import SpecError

FORMATS = ("auto", "gpt2", "gpt-neox", "llama", "nanogpt", "torch-encoder", "export")
KINDS = ("gpt2", "gpt-neox", "llama", "nanogpt", "torch-encoder")  # the LM importers
CROSS_CHECK_TOL = 1e-6  # relative to the largest logit, float64 against float64


def lm_kind_of(model: str | Path, fmt: str = "auto", partial: bool = False) -> str | None:
    """The language-model importer for the checkpoint ``model`` ("gpt2", "nanogpt",
    "torch-encoder"): ``fmt`` when it names one, detected when ``fmt`` is "auto"; ``None``
    for the export layout (``fmt`` "export", or nothing detected).  ``partial`` applies to
    language models only: with ``partial`` and no language model, a :class:`SpecError`."""
    if fmt not in FORMATS:
        raise SpecError(f"format: expected one of {', '.join(FORMATS)}, found {fmt!r}")
    if fmt in KINDS:
        return fmt
    if fmt == "auto":
        from exactmem.lm.checkpoints.live_module import lm_kind

        kind = lm_kind(Path(model))
        if kind is not None:
            return kind
    if partial:
        raise SpecError("--partial: only for language-model checkpoints (a GPT-2 directory, "
                        "a nanoGPT checkpoint or a torch encoder checkpoint)")
    return None


def load_lm(model: str | Path, kind: str) -> tuple[Any, Any, str]:
    """``(spec, float64 logits of the checkpoint's own forward pass, its name)``."""
    if kind == "gpt2":
        from exactmem.lm.checkpoints.gpt2 import load_gpt2, torch_logits

        return (load_gpt2(model), lambda toks: torch_logits(model, toks, "float64"),
                "transformers' GPT2LMHeadModel")
    if kind == "gpt-neox":
        from exactmem.lm.checkpoints.gpt_neox import gpt_neox_logits, load_gpt_neox

        spec = load_gpt_neox(model)
        return (spec, lambda toks: gpt_neox_logits(model, spec, toks),
                "transformers' GPTNeoXForCausalLM")
    if kind == "llama":
        from exactmem.lm.checkpoints.llama import llama_logits, load_llama

        spec = load_llama(model)
        return (spec, lambda toks: llama_logits(model, spec, toks),
                "transformers' LLaMA-style causal LM")
    if kind == "nanogpt":
        from exactmem.lm.checkpoints.nanogpt import load_nanogpt, nanogpt_logits

        return (load_nanogpt(model), lambda toks: nanogpt_logits(model, toks),
                "nanoGPT's forward pass (torch)")
    if kind == "torch-encoder":
        from exactmem.lm.checkpoints.torch_encoder import encoder_logits, load_torch_encoder

        return (load_torch_encoder(model), lambda toks: encoder_logits(model, toks),
                "the nn.TransformerEncoderLayer stack's forward pass (torch)")
    raise SpecError(f"--format: unknown language-model kind {kind!r}")


@dataclass
class LMResult:
    """What certify-model did: positions proved, the failures, timings (seconds).

    Per position, as arrays ``[N, n]``: ``certified`` (bool: proved, and in the certificate
    when one is written) and ``float_margins`` (the label's float64 logit minus the best
    other's; > 0 where the float argmax is right).  ``code_lengths``: per sequence, the
    rigorous upper bound of ``-sum log2 p(label)`` in bits (next-token data, self-checked)."""

    proved: int
    positions: int
    sequences_full: int
    failed: list[tuple[int, int, float]] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)
    written: bool = False
    checked: bool = True  # False: written without the in-process checker (--no-self-check)
    code_lengths: list[Any] = field(default_factory=list)  # rigorous upper bounds (Fraction)
    float_code_lengths: list[float] = field(default_factory=list)  # float64 estimates
    compared: str = ""  # what the float64 cross-check compared the imported function with
    readings: str = ""  # the config's reading against the others (no module given)
    mem_u: Any = None  # with a reference: (certified lower bound, float64 estimate) of mem_U
    certified: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), dtype=bool))
    float_margins: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))
    execution: str | None = None  # the execution model's format, when claimed
    ulps: int = 0
    exec_proved: int = 0  # positions claimed for every execution of that model
    exec_certified: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), dtype=bool))
    weights: Path | None = None  # the weights file the written certificate binds

    def __bool__(self) -> bool:
        return self.written or (self.proved == self.positions and not self.failed)

    def __str__(self) -> str:
        return (f"{self.proved} of {self.positions} positions proved ({self.sequences_full} "
                f"sequences in full); cross-checked against {self.compared}")


def cross_checked(theirs: np.ndarray, ours: np.ndarray, compared: str) -> str:
    """The line saying the imported function's float64 logits ``ours`` agree with
    ``theirs`` (those of ``compared``) to :data:`CROSS_CHECK_TOL` relative to the largest;
    a :class:`SpecError` when they do not."""
    gap = float(np.abs(theirs - ours).max()) if theirs.shape == ours.shape else float("inf")
    if not gap <= CROSS_CHECK_TOL * max(1.0, float(np.abs(theirs).max())):
        raise SpecError(f"cross-check: the imported function's float64 logits differ from "
                        f"{compared} by {gap:.3g}: not certifying")
    return f"cross-check: float64 logits agree with {compared} to {gap:.2g}"


def certify_lm(model: str | Path, data: Any, output: str | Path | None, *, partial: bool,
               kind: str = "gpt2", bind_dataset: bool = False, log: Any = None,
               progress: Any = None, producer: str = "auto",
               self_check: bool = True, module: Any = None,
               strict_config: bool = False, reference: str | Path | None = None,
               execution: str | None = None, ulps: int | None = None,
               bind_weights: bool | None = None) -> LMResult:
    """Certify the positions of ``data`` (a dataset file or ``Dataset``) where the
    checkpoint ``model`` (``kind`` "gpt2", "nanogpt" or "torch-encoder") has the label as
    unique argmax; writes ``output`` (when given) when all (or, ``partial``, at least one)
    are proved.  ``module``: the user's own torch module, whose float64 forward pass the
    imported function is cross-checked against (else the reference module built from the
    saved config, and the config's reading is compared with the others its tensors admit,
    :func:`~exactmem.lm.checkpoints.readings.judge`; ``strict_config``: the config's reading must
    fit the labels strictly best).  ``producer``: ``"auto"``, ``"fast"``, ``"hybrid"`` or
    ``"arb"`` (:func:`~exactmem.lm.positions.prove_positions`).  ``self_check`` False
    writes the producer's positions without running the checker (``result.checked``
    False) and without code-length claims.  ``reference``: a second checkpoint of the kinds
    above (same vocabulary) against which Morris et al.'s ``mem_U`` is certified
    (:mod:`~exactmem.lm.reference`; ``result.mem_u``).  ``execution`` ("float32", "bfloat16"
    or "float16") also claims the positions proved for every float execution of that model,
    ``ulps`` its accuracy of exp/tanh/erf/rsqrt (docs/trained-models.md, "Execution
    claims").  ``bind_weights``: the certificate binds a weights file written beside it
    instead of embedding the tensors (True), embeds them (False), or binds above
    :data:`~exactmem.lm.weightsfile.BIND_ABOVE` parameters (None; docs/trained-models.md,
    "Bound weights")."""
    from exactmem.lm.certfile import build_lm_certificate, write_lm_certificate
    from exactmem.lm.codelength import code_length_float, code_length_upper
    from exactmem.lm.float64 import label_margin, logits64
    from exactmem.lm.positions import prove_positions
    from exactmem.lm.weightsfile import binds, bound_weights, refuse_links, weights_path
    from exactmem.model.dataset import load_dataset

    say = log or (lambda _msg: None)
    t: dict[str, float] = {}
    ulps = execution_model(execution, ulps)
    clock = time.perf_counter()
    spec, own_forward, own_name = load_lm(model, kind)
    if execution is not None:
        from exactmem.lm.exec_balls import refuse_execution

        refuse_execution(spec)
    bind = output is not None and binds(spec, bind_weights)
    if output is not None:  # before any work: a part the certificate format lacks
        from exactmem.lm.certfile import refuse_uncertified

        refuse_uncertified(spec)
        if bind:
            refuse_links(Path(output))
    if spec.layer_norm_eps == 0:
        raise SpecError("layer_norm_eps is 0: a norm input of zero variance (RMSNorm: a zero "
                        "input) would divide by 0, so the function is not defined everywhere; "
                        "not certifying")
    from exactmem.model.dataset import Dataset

    ds = data if isinstance(data, Dataset) else load_dataset(data)
    if bind_dataset and isinstance(data, Dataset):
        raise SpecError("bind_dataset needs the dataset as a file path")
    if (ds.task, ds.inputs) != ("seq2seq", "token-ids"):
        raise SpecError(f"{data}: a language model is certified on a seq2seq token-id dataset "
                        f"(a label at every position), found {ds.task}, {ds.inputs}")
    if ds.vocab_size is not None and ds.vocab_size > spec.vocab_size:
        raise SpecError(f"{data}: vocab_size {ds.vocab_size} exceeds the model's vocabulary "
                        f"of {spec.vocab_size}")
    if ds.num_classes > spec.vocab_size:
        raise SpecError(f"{data}: label {ds.num_classes - 1} is not a token of the model's "
                        f"vocabulary of {spec.vocab_size}")
    if ds.n > spec.context:
        raise SpecError(f"{data}: sequences of {ds.n} tokens exceed the context of "
                        f"{spec.context}")
    toks = np.array(ds.sequences)
    t["import"] = time.perf_counter() - clock
    clock = time.perf_counter()
    if module is not None:
        from exactmem.lm.checkpoints.live_module import module_logits

        theirs = module_logits(module, toks)
        compared = f"your module ({type(module).__name__})"
    else:
        theirs = own_forward(toks)
        compared = f"the reference module built from the saved config ({own_name})"
    t["torch_float64"] = time.perf_counter() - clock
    ours = logits64(spec, toks)
    say(cross_checked(theirs, ours, compared))
    readings = ""
    if module is None:
        from exactmem.lm.checkpoints.readings import judge

        clock = time.perf_counter()
        readings = judge(spec, kind, toks, ds.labels, ours, strict_config,
                         source=str(model)).line()
        t["readings"] = time.perf_counter() - clock
        say(f"cross-check: {readings}")
        say("cross-check: not against your own module; pass it to cross-check against it: "
            "exactmem.certify_model(module, data, ...)")
    clock = time.perf_counter()
    coded = self_check and next_token_labelled(ds)  # unchecked: no code-length claims
    ref = _reference(reference, spec, toks, say) if reference is not None else None
    if ref is not None and not coded:
        raise SpecError("--reference: mem_U needs a dataset labelled with its next tokens "
                        "and the self-check (code lengths of both models)")
    code_lengths: list[Any] = []

    def on_logits(i: int, lo: np.ndarray, hi: np.ndarray) -> None:
        code_lengths.append(code_length_upper(lo, hi, ds.labels[i]))

    bounds = prove_positions(spec, ds.sequences, ds.labels, progress,
                             on_logits=on_logits if coded else None, producer=producer,
                             float_logits=ours)
    if ref is not None:
        ref.bound(ds.sequences, ds.labels, progress, producer)
    t["bounds"] = time.perf_counter() - clock
    if bounds.switch is not None:
        say(f"producer: arb for blocks 0..{bounds.switch - 1}, float64 norm balls from block "
            f"{bounds.switch}" if bounds.switch else "producer: float64 norm balls throughout")
    if bounds.rerun:
        say(f"producer: {bounds.rerun} further arb block steps for sequences left short"
            if bounds.switch is not None else
            f"producer: {bounds.rerun} sequences proved again in arb")
    exec_pos: list[list[int]] | None = None
    if execution is not None:
        from exactmem.lm.exec_balls import prove_execution

        clock = time.perf_counter()
        exec_pos = prove_execution(spec, ds.sequences, ds.labels, bounds.proved, execution,
                                   ulps, progress)
        t["execution"] = time.perf_counter() - clock
    failed = [(i, p, m) for i, row in enumerate(bounds.failed) for p, m in row]
    result = LMResult(bounds.count, ds.N * ds.n, sum(len(r) == ds.n for r in bounds.proved),
                      failed, t, compared=compared, readings=readings,
                      certified=_mask(bounds.proved, ds.N, ds.n),
                      float_margins=label_margin(ours, np.asarray(ds.labels)))
    if exec_pos is not None:
        result.execution, result.ulps = execution, ulps
        _set_exec(result, exec_pos, ds.N, ds.n)
    if coded:
        result.code_lengths = code_lengths
        result.float_code_lengths = [code_length_float(x, y)
                                     for x, y in zip(ours, ds.labels, strict=True)]
    if (failed and not partial) or not bounds.count:
        return result
    if spec.uncertified():  # no output (refused above): the producer's positions, unchecked
        say(f"not checked: {', '.join(spec.uncertified())} not in the certificate format yet")
        result.checked, result.code_lengths = False, []
        return result
    out = Path(output) if output is not None else None
    where = out.resolve().parent if out is not None else Path.cwd()
    rel = os.path.relpath(Path(data).resolve(), where) if bind_dataset else None
    positions = [list(r) for r in bounds.proved]
    cls = code_lengths if coded else None
    ex = None if exec_pos is None else {"format": execution, "ulps": ulps,
                                        "positions": exec_pos}
    claim = None  # the checker's claim when the written bytes are the ones it checked
    with bound_weights(spec, out if bind else None) as (binding, tmp):
        if not self_check:
            cert = build_lm_certificate(spec, ds, positions, partial, rel, execution=ex,
                                        weights=binding)
            result.checked, result.code_lengths = False, []
        else:
            cert, claim = _self_checked(spec, ds, positions, partial, rel, cls, binding, tmp,
                                        where, progress, t, say, result, ref, code_lengths,
                                        coded, ex)
    if out is not None:  # the weights file is in place (renamed as the block ended)
        write_lm_certificate(cert, out)
        result.written = True
        result.weights = weights_path(out) if binding is not None else None
        if claim is not None:
            from exactmem.api import verified

            verified.record(out, claim)
    return result


def _self_checked(spec: Any, ds: Any, positions: list[list[int]], partial: bool,
                  rel: str | None, cls: Any, binding: dict[str, Any] | None, tmp: Path | None,
                  where: Path, progress: Any, t: dict[str, float], say: Any,
                  result: LMResult, ref: Any, code_lengths: list[Any],
                  coded: bool, ex: dict[str, Any] | None) -> tuple[dict[str, Any], str | None]:
    """The certificate after the in-process checker (its weights file, if bound, at
    ``tmp``): code-length claims set to the checker's own bounds, positions it does not
    re-prove left out (``result`` updated); a rejection raises :class:`SpecError`.  Also
    the checker's claim when the certificate returned is the one it checked (else None)."""
    from exactmem.checker.lm.lm_verify import check as check_lm
    from exactmem.lm.certfile import build_lm_certificate

    def build() -> dict[str, Any]:
        c = build_lm_certificate(spec, ds, positions, partial, rel, cls, ex, binding)
        return ref.attach(c) if ref is not None else c

    cert = build()
    clock = time.perf_counter()
    unproved: list[tuple[int, int]] = []
    exec_unproved: list[tuple[int, int]] = []
    derived: dict[int, int] = {}
    ref_derived: dict[int, tuple[int, int]] = {}
    checked = cert
    bad, unusable, claim = check_lm(cert, where, progress, unproved=unproved,
                                    derived=derived, ref_derived=ref_derived,
                                    exec_unproved=exec_unproved, weights=tmp)
    t["check"] = time.perf_counter() - clock
    longer = [b for b in bad if "claimed code length" in b]
    bad = [b for b in bad if not b.startswith("execution ")]
    if ex is not None and exec_unproved:  # the checker's bounds decide: drop the rest
        say(f"self-check: {len(exec_unproved)} positions proved for every {ex['format']} "
            "execution by the producer are not re-proved by the checker; they are left out")
        for i, p in exec_unproved:
            ex["positions"][i].remove(p)
        _set_exec(result, ex["positions"], ds.N, ds.n)
        cert = build()
    if unusable or len(bad) - len(longer) != len(unproved) or (unproved and not partial):
        raise SpecError("self-check: the checker rejects the certificate: " + "; ".join(bad[:5]))
    tight = [checker_bound(derived[i]) for i in range(len(code_lengths))] \
        if coded and len(derived) == len(code_lengths) else code_lengths
    if tight != code_lengths:
        # the claim is the checker's own bound (it re-derives exactly that, so it verifies):
        # raised where the producer's balls were narrower, lowered where they were wider
        say(f"self-check: code-length bounds set to the checker's own ({len(longer)} raised)")
        code_lengths[:] = tight
        result.code_lengths = code_lengths
        cert = build()
    if ref is not None:
        from exactmem.checker.lm.lm_codelength import P

        if ref.adopt(ref_derived, P):
            say("self-check: the reference's code-length bounds set to the checker's own")
            cert = build()
        result.mem_u = _mem_u(ref, ds, code_lengths, result.float_code_lengths)
    if unproved:  # re-proved separately, each position on its own: drop what it could not
        say(f"self-check: {len(unproved)} positions proved by the producer are not re-proved "
            "by the checker's bounds; they are left out")
        for i, p in unproved:
            positions[i].remove(p)
        cert = build()
        result.proved -= len(unproved)
        result.sequences_full = sum(len(r) == ds.n for r in positions)
        result.certified = _mask(positions, ds.N, ds.n)
    return cert, (claim if cert is checked and not bad and not unusable else None)


def _reference(path: str | Path, spec: Any, toks: np.ndarray, say: Any) -> Any:
    """The reference model of a mem_U claim, imported and cross-checked as the model is."""
    from exactmem.lm.reference import Reference

    kind = lm_kind_of(Path(path), "auto")
    if kind is None:
        raise SpecError(f"--reference {path}: not a language-model checkpoint (a GPT-2, "
                        "GPT-NeoX or LLaMA-style directory, a nanoGPT or torch encoder "
                        "checkpoint)")
    ref_spec, own_forward, own_name = load_lm(path, kind)
    ref = Reference.cross_checked(ref_spec, own_forward(toks), str(path), spec, toks,
                                  own_name)
    say(f"reference: {path} ({kind}) cross-checked against {own_name}")
    return ref


def _mem_u(ref: Any, ds: Any, code_lengths: list[Any], floats: list[float]) -> tuple[Any, float]:
    """The certified lower bound and the float64 estimate of Morris et al.'s clipped sum."""
    from exactmem.lm.reference import distinct, mem_u

    once = distinct(ds.sequences, ds.labels)
    est = sum(max(0.0, ref.floats[i] - min(ref.floats[i], floats[i])) for i in once)
    return mem_u(ref.lower, ref.upper, code_lengths, once), est


def execution_model(execution: str | None, ulps: int | None) -> int:
    """The ulps of the execution model ``execution`` (the documented default when None);
    a :class:`SpecError` for an unknown format, ulps out of range, or ulps alone."""
    from exactmem.lm.exec_balls import DEFAULT_ULPS, FORMATS, MAX_ULPS

    if execution is None:
        if ulps is not None:
            raise SpecError("--ulps: only with --execution")
        return 0
    if execution not in FORMATS:
        raise SpecError(f"--execution: expected one of {', '.join(FORMATS)}, found "
                        f"{execution!r}")
    if ulps is None:
        return DEFAULT_ULPS
    if type(ulps) is not int or not 1 <= ulps <= MAX_ULPS:
        raise SpecError(f"--ulps: expected an integer from 1 to {MAX_ULPS}, found {ulps!r}")
    return ulps


def _set_exec(result: LMResult, rows: list[list[int]], count: int, n: int) -> None:
    result.exec_proved = sum(map(len, rows))
    result.exec_certified = _mask(rows, count, n)


def _mask(positions: Any, count: int, n: int) -> np.ndarray:
    """``[count, n]`` booleans, True at the listed positions of each sequence."""
    out = np.zeros((count, n), dtype=bool)
    for i, row in enumerate(positions):
        out[i, list(row)] = True
    return out


def checker_bound(upper: int) -> Any:
    """The checker's code-length bound (units ``2**-P``) as a claim: rounded up to the
    producer's grid of ``2**-DENOM_BITS`` bits, plus one unit."""
    from fractions import Fraction

    from exactmem.checker.lm.lm_codelength import P
    from exactmem.lm.codelength import DENOM_BITS

    return Fraction(-(-upper >> (P - DENOM_BITS)) + 1, 1 << DENOM_BITS)


def next_token_labelled(ds: Any) -> bool:
    """Whether every sequence is labelled with its next tokens (label ``t`` = token
    ``t + 1``), so that its code length is that of the sequence (docs/memorized-bits.md)."""
    return all(list(y[:-1]) == list(x[1:]) and y[-1] < (ds.vocab_size or y[-1] + 1)
               for x, y in zip(ds.sequences, ds.labels, strict=True))


