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

import functools
import os
import time
from pathlib import Path
from typing import Any

import numpy as np

from exactmem.api.language_model_result import LMResult
from exactmem.api.self_check import mask, self_checked, set_exec
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
    from exactmem.lm.batching import batch_for
    from exactmem.lm.checkpoints import hf_files as hf

    if kind in ("gpt2", "gpt-neox", "llama"):  # a batch at a time (lm.float_pass)
        from exactmem.lm.decoder import INV_FREQ

        if kind == "gpt2":
            from exactmem.lm.checkpoints.gpt2 import load_gpt2

            spec, cls, how = load_gpt2(model), "GPT2LMHeadModel", "eager"
        elif kind == "gpt-neox":
            from exactmem.lm.checkpoints.gpt_neox import load_gpt_neox

            spec, cls, how = load_gpt_neox(model), "GPTNeoXForCausalLM", "sdpa"
        else:
            from exactmem.lm.checkpoints.llama import llama_class, load_llama

            spec, cls, how = load_llama(model), llama_class(model), "sdpa"
        freq = None if kind == "gpt2" else spec.get(INV_FREQ)
        return (spec, lambda toks: hf.hf_chunks(model, cls, toks, freq, "float64", how,
                                                batch_for(spec, toks.shape[1])),
                f"transformers' {cls}")
    if kind == "nanogpt":
        from exactmem.lm.checkpoints.nanogpt import load_nanogpt, nanogpt_logits

        return (load_nanogpt(model), lambda toks: nanogpt_logits(model, toks),
                "nanoGPT's forward pass (torch)")
    if kind == "torch-encoder":
        from exactmem.lm.checkpoints.torch_encoder import encoder_logits, load_torch_encoder

        return (load_torch_encoder(model), lambda toks: encoder_logits(model, toks),
                "the nn.TransformerEncoderLayer stack's forward pass (torch)")
    raise SpecError(f"--format: unknown language-model kind {kind!r}")


def cross_checked(theirs: np.ndarray, ours: np.ndarray, compared: str) -> str:
    """The line saying the imported function's float64 logits ``ours`` agree with
    ``theirs`` (those of ``compared``) to :data:`CROSS_CHECK_TOL` relative to the largest;
    a :class:`SpecError` when they do not."""
    gap = float(np.abs(theirs - ours).max()) if theirs.shape == ours.shape else float("inf")
    return cross_checked_gap(gap, float(np.abs(theirs).max()), compared)


def cross_checked_gap(gap: float, scale: float, compared: str) -> str:
    """:func:`cross_checked` from the largest difference ``gap`` and the largest logit
    ``scale`` of theirs (a batched pass, :mod:`~exactmem.lm.float_pass`)."""
    if not gap <= CROSS_CHECK_TOL * max(1.0, scale):
        raise SpecError(f"cross-check: the imported function's float64 logits differ from "
                        f"{compared} by {gap:.3g}: not certifying")
    return f"cross-check: float64 logits agree with {compared} to {gap:.2g}"


def certify_lm(model: str | Path, data: Any, output: str | Path | None, *, partial: bool,
               kind: str = "gpt2", bind_dataset: bool = False, log: Any = None,
               progress: Any = None, producer: str = "auto",
               self_check: bool = True, module: Any = None,
               strict_config: bool = False, reference: str | Path | None = None,
               execution: str | None = None, ulps: int | None = None,
               bind_weights: bool | None = None, shards: int = 1,
               scheduler: str | None = None) -> LMResult:
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
    "Bound weights").  ``shards`` / ``scheduler``: the producer's proof and the self-check
    run on that many slices of the sequences in local processes, or on the Dask cluster at
    ``scheduler`` (:mod:`~exactmem.api.model_shards`; the same verdict and counts)."""
    if type(shards) is not int or shards < 1:
        raise SpecError(f"shards: expected a positive number, found {shards!r}")
    kw = dict(partial=partial, kind=kind, bind_dataset=bind_dataset, log=log,
              progress=progress, producer=producer, self_check=self_check, module=module,
              strict_config=strict_config, reference=reference, execution=execution,
              ulps=ulps, bind_weights=bind_weights)
    if shards == 1 and not scheduler:
        return _certify(model, data, output, None, 1, **kw)
    from exactmem.api.model_shards import executor

    with executor(shards, scheduler) as submit:
        return _certify(model, data, output, submit, shards, **kw)


def _certify(model: str | Path, data: Any, output: str | Path | None, submit: Any,
             shards: int, *, partial: bool, kind: str, bind_dataset: bool, log: Any,
             progress: Any, producer: str, self_check: bool, module: Any,
             strict_config: bool, reference: str | Path | None, execution: str | None,
             ulps: int | None, bind_weights: bool | None) -> LMResult:
    """:func:`certify_lm`'s stages; ``submit``: the executor of a sharded run (else None)."""
    from exactmem.lm.certfile import build_lm_certificate, write_lm_certificate
    from exactmem.lm.codelength import code_length_upper
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
    from exactmem.lm.checkpoints.readings import MAX_SEQUENCES
    from exactmem.lm.float_pass import float_pass

    if module is not None:
        from exactmem.lm.checkpoints.live_module import module_logits

        theirs = functools.partial(module_logits, module)
        compared = f"your module ({type(module).__name__})"
    else:
        theirs = own_forward
        compared = f"the reference module built from the saved config ({own_name})"
    fp = float_pass(spec, toks, ds.labels, theirs, MAX_SEQUENCES, progress)
    t["float64"] = time.perf_counter() - clock
    say(cross_checked_gap(fp.gap, fp.scale, compared))
    readings = ""
    if module is None:
        from exactmem.lm.checkpoints.readings import judge

        clock = time.perf_counter()
        readings = judge(spec, kind, toks, ds.labels, fp.head, strict_config,
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

    if submit is not None:
        from exactmem.api.model_shards import prove_sharded

        bounds, code_lengths = prove_sharded(spec, ds.sequences, ds.labels, producer,
                                             fp.margins, coded, shards, submit, progress)
    else:
        bounds = prove_positions(spec, ds.sequences, ds.labels, progress,
                                 on_logits=on_logits if coded else None, producer=producer,
                                 float_margins=fp.margins)
    if ref is not None:
        ref.bound(ds.sequences, ds.labels, progress, producer)
    t["bounds"] = time.perf_counter() - clock
    if bounds.switch is not None:
        say(f"producer: arb for blocks 0..{bounds.switch - 1} ({bounds.arb_bits} bits), float64 "
            f"norm balls from block {bounds.switch}" if bounds.switch
            else "producer: float64 norm balls throughout")
    if bounds.rerun:
        say(f"producer: {bounds.rerun} further arb block steps for sequences left short"
            if bounds.switch is not None else
            f"producer: {bounds.rerun} sequences proved again in arb")
    exec_pos: list[list[int]] | None = None
    exec_lengths: list[Any] = []  # per sequence: its code length in every execution, or None

    def on_exec_logits(i: int, lo: np.ndarray, hi: np.ndarray) -> None:
        finite = bool(np.isfinite(lo).all() and np.isfinite(hi).all())
        exec_lengths.append(code_length_upper(lo, hi, ds.labels[i]) if finite else None)

    if execution is not None:
        from exactmem.lm.exec_balls import prove_execution

        clock = time.perf_counter()
        exec_pos = prove_execution(spec, ds.sequences, ds.labels, bounds.proved, execution,
                                   ulps, progress, on_logits=on_exec_logits if coded else None)
        t["execution"] = time.perf_counter() - clock
        if coded and None in exec_lengths:
            say(f"execution: the {execution} balls of {exec_lengths.count(None)} sequences "
                "are unbounded (a rounding bound of the execution model fails or the format "
                "overflows); no code lengths are claimed for every execution")
    failed = [(i, p, m) for i, row in enumerate(bounds.failed) for p, m in row]
    result = LMResult(bounds.count, ds.N * ds.n, sum(len(r) == ds.n for r in bounds.proved),
                      failed, t, compared=compared, readings=readings,
                      certified=mask(bounds.proved, ds.N, ds.n),
                      float_margins=fp.margins)
    if exec_pos is not None:
        result.execution, result.ulps = execution, ulps
        set_exec(result, exec_pos, ds.N, ds.n)
    if coded:
        result.code_lengths = code_lengths
        result.float_code_lengths = fp.code_lengths
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
    if ex is not None and coded and None not in exec_lengths:
        ex["code_length_bits"] = exec_lengths
    claim = None  # the checker's claim when the written bytes are the ones it checked
    with bound_weights(spec, out if bind else None) as (binding, tmp):
        if not self_check:
            cert = build_lm_certificate(spec, ds, positions, partial, rel, execution=ex,
                                        weights=binding)
            result.checked, result.code_lengths = False, []
        else:
            cert, claim = self_checked(spec, ds, positions, partial, rel, cls, binding, tmp,
                                        where, progress, t, say, result, ref, code_lengths,
                                        coded, ex, (submit, shards))
    if out is not None:  # the weights file is in place (renamed as the block ended)
        write_lm_certificate(cert, out)
        result.written = True
        result.weights = weights_path(out) if binding is not None else None
        if claim is not None:
            from exactmem.api import verified

            verified.record(out, claim)
    return result


def _reference(path: str | Path, spec: Any, toks: np.ndarray, say: Any) -> Any:
    """The reference model of a mem_U claim, imported and cross-checked as the model is."""
    from exactmem.lm.reference import Reference

    kind = lm_kind_of(Path(path), "auto")
    if kind is None:
        raise SpecError(f"--reference {path}: not a language-model checkpoint (a GPT-2, "
                        "GPT-NeoX or LLaMA-style directory, a nanoGPT or torch encoder "
                        "checkpoint)")
    ref_spec, own_forward, own_name = load_lm(path, kind)
    from exactmem.lm.float_pass import all_logits

    ref = Reference.cross_checked(ref_spec, all_logits(own_forward, toks), str(path), spec,
                                  toks,
                                  own_name)
    say(f"reference: {path} ({kind}) cross-checked against {own_name}")
    return ref


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


def next_token_labelled(ds: Any) -> bool:
    """Whether every sequence is labelled with its next tokens (label ``t`` = token
    ``t + 1``), so that its code length is that of the sequence (docs/memorized-bits.md)."""
    return all(list(y[:-1]) == list(x[1:]) and y[-1] < (ds.vocab_size or y[-1] + 1)
               for x, y in zip(ds.sequences, ds.labels, strict=True))


