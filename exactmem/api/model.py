"""Certify your own model: a state dict or safetensors file in the export layout
(docs/model-layout.md), read exactly, evaluated exactly, checked, and only then written.

The path is the one :func:`exactmem.pipeline.certify` takes for a construction, with the
network read from a file instead of built: exact evaluation (rigorous interval bounds for
softmax scores), :func:`~exactmem.certificate.build_certificate`, the trusted checker, an
atomic write.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from fractions import Fraction
from pathlib import Path
from typing import Any

from exactmem.api.language_model_result import LMResult
from exactmem.api.result_types import CertifyResult, CheckResult
from exactmem.api.verbs import PathLike, check_result, dataset_of, failing_sequences, sizes_of
from exactmem.errors import SpecError
from exactmem.model.dataset import Dataset
from exactmem.model.spec import NetworkSpec

CONSTRUCTION = "imported-model"
#: what ``certify-model`` reads, by ``kind`` (``--format``): the language-model importers of
#: :data:`exactmem.api.lm.KINDS`, and the export layout
MODEL_KINDS = {
    "gpt2": "a GPT-2 save_pretrained directory (config.json and weights; transformers' "
            "GPT2LMHeadModel)",
    "gpt-neox": "a GPT-NeoX save_pretrained directory (Pythia: rotary positions, parallel "
                "residuals)",
    "llama": "a LLaMA-style save_pretrained directory (LLaMA, Qwen2, Mistral: RMSNorm, "
             "SwiGLU, rotary positions, grouped-query attention)",
    "nanogpt": "a nanoGPT checkpoint (ckpt.pt with model_args and model)",
    "torch-encoder": "a torch checkpoint of a stack of nn.TransformerEncoderLayer with an "
                     "embedding and a head (docs/trained-models.md)",
    "export": "a torch state_dict (.pt, saved with torch.save) or a safetensors file in the "
              "layout 'exactmem export' writes (docs/model-layout.md)",
}


def _fits(spec: NetworkSpec, ds: Dataset) -> None:
    """The network reads the dataset's inputs and its readout fits the task."""
    size = ds.vocab_size if ds.inputs == "token-ids" else ds.dim
    if (spec.input_kind, spec.input_dim, spec.seq_len) != (ds.inputs, size, ds.n):
        raise SpecError(f"the model reads {spec.input_kind} of size {spec.input_dim} in "
                        f"sequences of length {spec.seq_len}; the dataset has {ds.inputs} of "
                        f"size {size} and length {ds.n}")
    if (ds.task == "seq2seq") != (spec.readout.positions == "every"):
        raise SpecError(f"the readout positions {spec.readout.positions!r} do not fit the "
                        f"{ds.task} task (next-token: last or first; seq2seq: every)")
    if spec.readout.kind == "argmax" and spec.out_dim < ds.num_classes:
        raise SpecError(f"an argmax readout over {spec.out_dim} classes cannot give the "
                        f"dataset's {ds.num_classes} labels")


def default_epsilon(ds: Dataset) -> Fraction:
    """A quarter of the smallest gap between distinct labels (1 with a single label): a
    scalar output within it of a label identifies that label, with room for the bounds."""
    labels = ds.labels if ds.task == "next-token" else [y for ys in ds.labels for y in ys]
    values = sorted(set(labels))
    return Fraction(min((b - a for a, b in zip(values, values[1:], strict=False)),
                        default=1), 4)


def _epsilon(epsilon: object | None, ds: Dataset) -> Fraction:
    """``epsilon`` as a rational below half the smallest label gap (default: a quarter)."""
    from exactmem.arith import to_rational

    quarter = default_epsilon(ds)
    if epsilon is None:
        return quarter
    eps = to_rational(epsilon, "epsilon")
    if not 0 <= eps < 2 * quarter:
        raise SpecError(f"epsilon: expected a rational in [0, {2 * quarter}) (below half the "
                        f"smallest gap between distinct labels), found {eps}")
    return eps


def _near_miss(spec: NetworkSpec, failures: tuple[Any, ...]) -> tuple[str, ...]:
    """A note when every failing scalar output is within 1/2 of its label."""
    if spec.readout.kind != "scalar" or not failures:
        return ()
    try:
        gaps = [abs(Fraction(f.found) - f.expected) for f in failures]
    except (ValueError, ZeroDivisionError):
        return ()
    worst = max(gaps)
    if worst >= Fraction(1, 2):
        return ()
    return (f"every failing output is within {float(worst):.3g} of its label: rounding would "
            "recover the labels, but a scalar readout is certified only when the exact output "
            "equals the label (weights that are not dyadic rationals cannot be stored exactly "
            "in a float file)",)


def certify_model(model: PathLike | Mapping[str, Any] | Any, dataset: Dataset | PathLike, *,
                  output: PathLike | None = None, skeleton: object | None = None,
                  epsilon: object | None = None, bind_dataset: bool = False,
                  log: Callable[[str], None] | None = None,
                  progress: Callable[[str, int, int], None] | None = None,
                  partial: bool = False, module: Any = None, strict_config: bool = False,
                  producer: str = "auto", kind: str = "auto",
                  self_check: bool = True, reference: PathLike | None = None,
                  execution: str | None = None, ulps: int | None = None,
                  bind_weights: bool | None = None, shards: int = 1,
                  scheduler: str | None = None) -> CertifyResult | LMResult:
    """Certify that ``model`` memorizes ``dataset`` (``exactmem certify-model``).

    A trained language model -- a GPT-2 checkpoint directory, a nanoGPT checkpoint, a
    torch encoder checkpoint, or such a model as a live torch module (a nanoGPT ``GPT``, a
    stack in the layout of :func:`~exactmem.lm.checkpoints.torch_encoder.reference_module`) --
    goes to :func:`~exactmem.api.lm.certify_lm` and gives an
    :class:`~exactmem.api.lm.LMResult` (``partial``: certify the positions proved).  Its
    float64 cross-check runs against the user's module when there is one (the live module
    given as ``model``, or ``module=`` next to a checkpoint path); otherwise against the
    reference module built from the saved config, after the config's reading is compared
    with the other readings of its tensors (``strict_config``; docs/certify-model.md,
    "Which function").  ``kind``: "auto" (detected), "export", or a language-model
    importer ("gpt2", "gpt-neox", "llama", "nanogpt", "torch-encoder";
    docs/trained-models.md).
    ``self_check`` False writes a language model's proof without running the checker.
    ``reference``: a language model's reference checkpoint for Morris et al.'s ``mem_U``
    (docs/memorized-bits.md).  ``bind_weights``: a language model's certificate binds a
    weights file beside it (True), embeds its tensors (False), or binds above 1M parameters
    (None; docs/trained-models.md, "Bound weights").
    ``execution`` / ``ulps``: a language model's positions also claimed for every float
    execution of that model (:func:`~exactmem.api.lm.certify_lm`).  ``shards`` /
    ``scheduler``: a language model's proof and self-check on that many slices of the
    sequences, in local processes or on a Dask cluster (the same verdict and counts).

    ``model``: a ``.pt`` state dict file, a safetensors file, a state dict, or a module with
    ``state_dict()``, in the layout of docs/model-layout.md; ``skeleton`` (dict or JSON text)
    gives the structure when the file does not carry it.  Every float is read as the exact
    rational it is.  ``epsilon``: for softmax networks with a scalar readout, the certified
    tolerance ``|f - y| <= epsilon`` (below half the smallest label gap; by default a quarter
    of it).  ``output`` is
    written only when every sequence is memorized and the checker verifies; otherwise the
    result lists the failing sequences.  Unusable input raises an ``ExactmemError``.
    """
    if kind not in ("auto", "export", "gpt2", "gpt-neox", "llama", "nanogpt", "torch-encoder"):
        raise SpecError(f"kind: expected auto, export, gpt2, gpt-neox, llama, nanogpt or "
                        f"torch-encoder, found {kind!r}")
    if isinstance(model, (str, os.PathLike)) and module is None:
        from exactmem.api.lm import lm_kind_of

        lm = lm_kind_of(Path(model), kind, partial)  # a path: detected, or --partial refused
    else:
        lm = None if kind == "export" else _lm_kind(model, module) if kind == "auto" else kind
    if lm is not None:
        return _certify_lm(model, lm, dataset, output, partial=partial, module=module,
                           strict_config=strict_config, bind_dataset=bind_dataset, log=log,
                           progress=progress, producer=producer, self_check=self_check,
                           reference=reference, execution=execution, ulps=ulps,
                           bind_weights=bind_weights, shards=shards, scheduler=scheduler)
    if (partial or module is not None or strict_config or reference is not None or execution
            or ulps is not None or bind_weights is not None or shards != 1 or scheduler):
        raise SpecError("partial, module, strict_config, reference, execution, ulps, "
                        "bind_weights, shards and scheduler apply to language models only")
    from exactmem.certificate import build_certificate, write_certificate
    from exactmem.checker import check_certificate
    from exactmem.constructions.base import BuildResult
    from exactmem.importers.import_model import read_model
    from exactmem.importers.model_files import needs_torch
    from exactmem.model.evaluate import evaluate
    from exactmem.model.interval import has_softmax_scores
    from exactmem.model.interval_verdict import certify_interval, softmax_hint
    from exactmem.model.sizes import sizes

    say = log or (lambda _msg: None)
    ds, file = dataset_of(dataset)
    if bind_dataset and file is None:
        raise SpecError("bind_dataset needs the dataset as a file path")
    out = Path(output) if output is not None else None
    base = (out or Path("x")).resolve().parent
    rel = os.path.relpath(file.resolve(), base) if bind_dataset and file is not None else None
    if rel is not None and (os.path.isabs(rel) or rel.split(os.sep)[0] == os.pardir):
        raise SpecError(f"a bound dataset must lie inside the certificate's folder {base} "
                        f"(docs/certificate-format.md); {file} does not: copy it there or "
                        "embed it")
    t: dict[str, float] = {}
    clock = time.perf_counter()
    if needs_torch(model):
        say(f"reading {model}: loading torch (a few seconds) ...")
    imported = read_model(model, skeleton)
    spec = imported.spec
    t["read"] = time.perf_counter() - clock
    say(str(imported))
    _fits(spec, ds)
    clock = time.perf_counter()
    hints: dict[str, Any] = {}
    softmax = has_softmax_scores(spec)
    if epsilon is not None and not (softmax and spec.readout.kind == "scalar"):
        raise SpecError("epsilon applies only to networks with softmax scores and a scalar "
                        "readout (any other exact output must equal the label, an argmax "
                        "must be unique)")
    if softmax:
        if spec.readout.kind == "scalar":
            epsilon = _epsilon(epsilon, ds)
        say("softmax scores: rigorous interval evaluation"
            + (f", tolerance epsilon = {epsilon}" if epsilon is not None else ""))
        outcome = certify_interval(spec, ds, epsilon, progress=progress)
        evaluation = outcome.evaluation
        hints["softmax"] = softmax_hint(outcome)
    else:
        evaluation = evaluate(spec, ds, progress)
    t["evaluate"] = time.perf_counter() - clock
    source = Path(model).name if isinstance(model, (str, Path)) else imported.source
    params = {"source": source, "dtypes": list(imported.dtypes)}
    if evaluation.failures:
        fails = tuple(str(f) for f in evaluation.failures)
        seqs = tuple(sorted({f.sequence for f in evaluation.failures if f.sequence >= 0}))
        say(f"evaluation: {len(seqs)} sequences not memorized")
        none = CheckResult(False, False, 1, (), None, None)
        return CertifyResult(False, CONSTRUCTION, ds.N, sizes(spec), none, None, seqs, fails,
                             _near_miss(spec, evaluation.failures), t)
    cert = build_certificate(ds, BuildResult(spec=spec, params=params, hints=hints),
                             CONSTRUCTION, evaluation, dataset_path=rel)
    clock = time.perf_counter()
    report = check_result(check_certificate(cert, base, progress))
    t["check"] = time.perf_counter() - clock
    say(f"checker: {report.verdict} in {t['check']:.2f}s")
    if report.verified and out is not None:
        write_certificate(cert, out)
    return CertifyResult(report.verified, CONSTRUCTION, ds.N, sizes_of(cert), report,
                         out if report.verified else None, failing_sequences(report.failures),
                         report.failures, (), t, cert)


def _lm_kind(model: Any, module: Any) -> str | None:
    """The language-model kind of ``model`` ("module": a live torch module of a language
    model layout), or ``None`` for the export layout."""
    from exactmem.lm.checkpoints.live_module import is_module, lm_kind, lm_layout

    if is_module(model):
        return "module" if lm_layout(model) else None
    if not isinstance(model, (str, os.PathLike)):
        return None
    kind = lm_kind(Path(model))
    if kind is None and module is not None:
        raise SpecError(f"{model}: module= is given, but the path is not a language-model "
                        "checkpoint (GPT-2 directory, nanoGPT or torch encoder checkpoint)")
    return kind


def _certify_lm(model: Any, kind: str, dataset: Any, output: PathLike | None,
                **kw: Any) -> LMResult:
    import tempfile

    from exactmem.api.lm import certify_lm

    data = dataset if isinstance(dataset, Dataset) else Path(dataset)
    if kind != "module":
        return certify_lm(model, data, output, kind=kind, **kw)
    from exactmem.lm.checkpoints.live_module import save_module

    if kw["module"] is not None:
        raise SpecError("module=: give the module as the model, or a checkpoint path with "
                        "module=, not both")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "module.pt"
        kind = save_module(model, path)
        return certify_lm(path, data, output, kind=kind, **{**kw, "module": model})
