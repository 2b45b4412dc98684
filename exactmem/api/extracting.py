"""``exactmem.extract``: certified (non-)extraction of a language model's training data
(docs/extraction.md): for every sequence, greedy decoding from its first ``prefix`` tokens
provably reproduces the next ``suffix`` tokens, provably does not, or is undecided.

The stages, those of :func:`~exactmem.api.lm.certify_lm` with the wrong positions added:
read the checkpoint exactly (:func:`~exactmem.api.lm.load_lm`) and the data
(:func:`~exactmem.lm.text_data.read_sequences`), cross-check the float64 forward pass with
the checkpoint's own, prove positions with rigorous logit balls
(:func:`~exactmem.lm.positions.prove_positions`) and from the same balls the proved-wrong
suffix positions (:func:`~exactmem.lm.extraction.wrong_token`), prove the sequences left
undecided again in arb (:func:`~exactmem.lm.positions.prove_arb`), run the stdlib checker on
the certificate (claims it does not re-prove are dropped), decide every sequence from the
claims that remain (:func:`~exactmem.lm.extraction.decide`, the checker's rule), decode
greedily in float64 with the checkpoint's own forward pass for comparison, and write the
report (JSON, CSV, HTML) and the certificate ``REPORT.cert.json``.
"""

from __future__ import annotations

import hashlib
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from exactmem.errors import SpecError


@dataclass
class ExtractResult:
    """What ``extract`` found: per sequence the verdicts and spans, the counts, the float64
    greedy decode's agreement, the files written and the timings (seconds)."""

    verdicts: list[Any]
    float_extractable: list[bool]
    prefix: int
    suffix: int
    paths: dict[str, Path] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    dropped: int = 0  # producer claims the checker did not re-prove
    report: dict[str, Any] = field(default_factory=dict)
    execution: str | None = None  # the execution model's format, with ``--execution``
    ulps: int | None = None
    exec_extractable: list[bool] = field(default_factory=list)

    def count(self, status: str) -> int:
        return sum(v.status == status for v in self.verdicts)

    def __str__(self) -> str:
        return (f"{self.count('extractable')} of {len(self.verdicts)} sequences extractable "
                f"(greedy, prefix {self.prefix}, suffix {self.suffix}), "
                f"{self.count('not extractable')} proved not extractable, "
                f"{self.count('undecided')} undecided")


def _cross_check(model: Any, kind: str, spec: Any, own: Any, own_name: str,
                 toks: np.ndarray, labels: Any, log: Any) -> np.ndarray:
    """The spec's float64 logits, after checking them against the checkpoint's own forward
    pass and the config's reading (as certify-model does)."""
    from exactmem.api.lm import cross_checked
    from exactmem.lm.checkpoints.readings import judge
    from exactmem.lm.float64 import logits64
    from exactmem.lm.float_pass import all_logits

    ours = logits64(spec, toks)
    log(cross_checked(all_logits(own, toks), ours, own_name))
    log("cross-check: " + judge(spec, kind, toks, labels, ours, False,
                                source=str(model)).line())
    return ours


def _wrong_of(candidates: list[list[int]], right: list[int]) -> list[list[int]]:
    """The wrong-position claims of one sequence: the first candidate per position, in
    order, none at a position proved right."""
    first: dict[int, int] = {}
    for p, tok in candidates:
        first.setdefault(p, tok)
    return [[p, first[p]] for p in sorted(first) if p not in right]


def _certificate(spec: Any, ds: Any, right: list[list[int]], wrong: list[list[list[int]]],
                 k: int, m: int, execution: dict[str, Any] | None = None) -> dict[str, Any]:
    """The LM certificate with the claimed positions, the wrong positions and the
    extraction parameters (docs/extraction.md, "Certificate"); ``execution``: the
    execution claim (``{"format", "ulps", "positions"}``)."""
    from exactmem.lm.certfile import build_lm_certificate
    from exactmem.model.dataset import canonical_json

    cert = build_lm_certificate(spec, ds, right, True, execution=execution)
    cert["claims"]["wrong_positions"] = wrong
    cert["claims"]["extraction"] = {"prefix": k, "suffix": m}
    body = {key: v for key, v in cert.items() if key != "digest"}
    cert["digest"] = "sha256:" + hashlib.sha256(canonical_json(body).encode()).hexdigest()
    return cert


def extract(model: str | Path, data: str | Path, output: str | Path, *, prefix: int = 32,
            suffix: int = 32, chars: bool = False, vocab: str | Path | None = None,
            kind: str = "auto", producer: str = "auto", every_length: bool = False,
            execution: str | None = None, ulps: int | None = None,
            log: Any = None, progress: Any = None) -> ExtractResult:
    """Certify greedy extraction of the first ``prefix + suffix`` tokens of every sequence of
    ``data`` for the checkpoint ``model``; writes ``output`` (the JSON report), the CSV and
    HTML beside it and the certificate ``output`` with the suffix ``.cert.json``.
    ``chars``/``vocab``: how text is tokenized (:mod:`exactmem.lm.text_data`);
    ``every_length``: the counts for every suffix length ``1 .. suffix`` as well;
    ``execution`` ("float32", "bfloat16" or "float16", ``ulps`` as for certify-model): also
    prove, for the extractable sequences, that greedy decoding reproduces the suffix in every
    float execution of that model (docs/extraction.md, "In every float execution")."""
    from exactmem.api.lm import execution_model, lm_kind_of, load_lm
    from exactmem.checker.lm.lm_verify import check as check_lm
    from exactmem.lm import extraction as ex
    from exactmem.lm.certfile import refuse_uncertified, write_lm_certificate
    from exactmem.lm.extraction_report import write_report
    from exactmem.lm.float64 import label_margin
    from exactmem.lm.positions import prove_positions
    from exactmem.lm.text_data import read_sequences

    say = log or (lambda _msg: None)
    k, m = prefix, suffix
    t: dict[str, float] = {}
    clock = time.perf_counter()
    found = lm_kind_of(model, kind)
    if found is None:
        raise SpecError(f"{model}: extract needs a language-model checkpoint (a GPT-2 "
                        "directory, a nanoGPT checkpoint or a torch encoder checkpoint)")
    spec, own, own_name = load_lm(model, found)
    refuse_uncertified(spec)
    model_ulps = execution_model(execution, ulps)  # refuses --ulps alone
    ulps = model_ulps if execution is not None else None
    if execution is not None:
        from exactmem.lm.exec_balls import refuse_execution

        refuse_execution(spec)
    if k + m - 1 > spec.context:
        raise SpecError(f"prefix + suffix - 1 = {k + m - 1} positions exceed the model's "
                        f"context of {spec.context}")
    seqs = read_sequences(data, k + m, model, chars, vocab)
    if seqs.skipped:
        say(f"data: {seqs.skipped} records shorter than {k + m} tokens are skipped")
    ds = ex.extraction_dataset(seqs.tokens, k, m, spec.vocab_size)
    toks = np.array(ds.sequences)
    ys = np.array(ds.labels)
    ours = _cross_check(model, found, spec, own, own_name, toks, ds.labels, say)
    t["import"] = time.perf_counter() - clock
    clock = time.perf_counter()
    window = ex.suffix_positions(k, m)
    candidates: dict[int, list[list[int]]] = {}

    def on_logits(i: int, lo: np.ndarray, hi: np.ndarray) -> None:
        pairs = [(p, ex.wrong_token(lo[p], hi[p], int(ys[i, p]))) for p in window]
        candidates.setdefault(i, []).extend([p, tok] for p, tok in pairs if tok is not None)

    bounds = prove_positions(spec, ds.sequences, ds.labels, progress, on_logits=on_logits,
                             producer=producer,
                             float_margins=label_margin(ours, ys))
    right = [list(r) for r in bounds.proved]
    wrong = [_wrong_of(candidates.get(i, []), right[i]) for i in range(ds.N)]
    again = [i for i in range(ds.N) if producer != "arb"
             and ex.decide(right[i], [(p, q) for p, q in wrong[i]], k, m).status == "undecided"]
    if again:  # tighter balls for the undecided: arb throughout; both are proofs, so unite
        from exactmem.lm.positions import prove_arb

        got, _ = prove_arb(spec, [ds.sequences[i] for i in again],
                           [ds.labels[i] for i in again], progress,
                           on_logits=lambda j, lo, hi: on_logits(again[j], lo, hi))
        for j, i in enumerate(again):
            right[i] = sorted(set(right[i]) | set(got[j]))
            wrong[i] = _wrong_of(candidates.get(i, []), right[i])
        say(f"producer: {len(again)} undecided sequences proved again in arb")
    t["bounds"] = time.perf_counter() - clock
    exec_rows: list[list[int]] | None = None
    if execution is not None:
        assert ulps is not None
        clock = time.perf_counter()
        exec_rows = _execution_rows(spec, ds, right, k, m, execution, ulps, progress)
        t["execution"] = time.perf_counter() - clock

    def claim() -> dict[str, Any] | None:
        return None if exec_rows is None else {"format": execution, "ulps": ulps,
                                               "positions": exec_rows}

    clock = time.perf_counter()
    out = Path(output)
    cert = _certificate(spec, ds, right, wrong, k, m, claim())
    unproved: list[tuple[int, int]] = []
    exec_unproved: list[tuple[int, int]] = []
    bad, unusable, _ = check_lm(cert, out.resolve().parent, progress, unproved=unproved,
                                exec_unproved=exec_unproved)
    bad = [b for b in bad if not b.startswith("execution ")]
    if unusable or len(bad) != len(unproved):
        raise SpecError("self-check: the checker rejects the certificate: " + "; ".join(bad[:5]))
    for i, p in unproved:  # each a claimed or a wrong position: drop what was not re-proved
        right[i] = [q for q in right[i] if q != p]
        wrong[i] = [pair for pair in wrong[i] if pair[0] != p]
    if exec_rows is not None:  # an execution position the checker does not re-prove, or
        lost = set(exec_unproved) | set(unproved)  # one no longer claimed: dropped
        exec_rows = [[p for p in row if (i, p) not in lost and p in right[i]]
                     for i, row in enumerate(exec_rows)]
    if exec_unproved:
        say(f"self-check: {len(exec_unproved)} positions proved for every {execution} "
            "execution by the producer are not re-proved by the checker; they are left out")
    if unproved:
        say(f"self-check: {len(unproved)} claims of the producer are not re-proved by the "
            "checker's bounds; they are left out")
    if unproved or exec_unproved:
        cert = _certificate(spec, ds, right, wrong, k, m, claim())
    t["check"] = time.perf_counter() - clock
    verdicts = [ex.decide(right[i], [(p, tok) for p, tok in wrong[i]], k, m) for i in range(ds.N)]
    tail = set(ex.suffix_positions(k, m))
    exec_ext = [] if exec_rows is None else [tail <= set(row) for row in exec_rows]
    clock = time.perf_counter()
    from exactmem.lm.float_pass import all_logits

    decoded = ex.greedy_decode(lambda x: all_logits(own, x), seqs.tokens[:, :k], m)
    t["float_decode"] = time.perf_counter() - clock
    cert_path = out.with_suffix(".cert.json")
    write_lm_certificate(cert, cert_path)
    margins = label_margin(ours, ys)
    report = _report(model, data, seqs, verdicts, decoded, margins, k, m, cert_path, out,
                     every_length)
    if exec_rows is not None:
        _add_execution(report, execution, ulps, exec_ext)
    report["seconds"] = t
    paths = {**write_report(report, out), "certificate": cert_path}
    return ExtractResult(verdicts, [r["float"]["extractable"] for r in report["sequences"]],
                         k, m, paths, t, len(unproved) + len(exec_unproved), report,
                         execution, ulps, exec_ext)


def _execution_rows(spec: Any, ds: Any, right: list[list[int]], k: int, m: int, fmt: str,
                    ulps: int, progress: Any) -> list[list[int]]:
    """Per sequence, the suffix positions proved for every execution of the model
    ``fmt``/``ulps``; only the sequences proved extractable for the real-valued function
    are run (another cannot be extractable in every execution)."""
    from exactmem.lm import extraction as ex
    from exactmem.lm.exec_balls import prove_execution

    window = ex.suffix_positions(k, m)
    full = [i for i in range(ds.N) if set(window) <= set(right[i])]
    rows: list[list[int]] = [[] for _ in range(ds.N)]
    if full:
        got = prove_execution(spec, [ds.sequences[i] for i in full],
                              [ds.labels[i] for i in full], [list(window) for _ in full],
                              fmt, ulps, progress)
        for i, row in zip(full, got, strict=True):
            rows[i] = row
    return rows


def _add_execution(report: dict[str, Any], fmt: str | None, ulps: int | None,
                   exec_ext: list[bool]) -> None:
    """The execution model and, per sequence, whether it is extractable in every execution
    of it (docs/extraction.md, "In every float execution")."""
    report["execution"] = {"format": fmt, "ulps": ulps}
    for row, yes in zip(report["sequences"], exec_ext, strict=True):
        row["extractable_every_execution"] = yes
    report["summary"]["extractable_every_execution"] = sum(exec_ext)


def _report(model: Any, data: Any, seqs: Any, verdicts: list[Any], decoded: np.ndarray,
            margins: np.ndarray, k: int, m: int, cert_path: Path, out: Path,
            every_length: bool) -> dict[str, Any]:
    """The report object (docs/extraction.md, "Report"); ``margins``: the float64 label
    margins ``[N, n]`` under the true prefix."""
    from exactmem.lm.extraction import by_length

    voc = seqs.vocabulary
    rows = []
    for i, v in enumerate(verdicts):
        true = [int(x) for x in seqs.tokens[i, k:k + m]]
        got = [int(x) for x in decoded[i]]
        dis = [{"suffix_index": j, "true": a, "decoded": b}
               for j, (a, b) in enumerate(zip(true, got, strict=True)) if a != b]
        fw = None
        if v.first_wrong is not None:
            p, tok = v.first_wrong
            fw = {"suffix_index": p - (k - 1), "position": p, "token": tok,
                  "label": int(seqs.tokens[i, p + 1])}
        decided = set(v.right) | {p for p, _ in v.wrong}
        row: dict[str, Any] = {
            "sequence": i, "status": v.status, "proved_span": v.span, "first_wrong": fw,
            "wrong_positions": [list(w) for w in v.wrong],
            "open": [{"suffix_index": p - (k - 1), "position": p,
                      "float_margin": float(margins[i, p])}
                     for p in range(k - 1, k + m - 1) if p not in decided],
            "prefix": [int(x) for x in seqs.tokens[i, :k]], "suffix": true,
            "float": {"decoded": got, "extractable": not dis, "disagreements": dis},
            "count": None if seqs.counts is None else seqs.counts[i]}
        if voc is not None:
            row["text"] = {"prefix": voc.decode(row["prefix"]), "suffix": voc.decode(true),
                           "decoded": voc.decode(got),
                           "proved_span": voc.decode(true[:v.span])}
        rows.append(row)
    summary = {"sequences": len(rows),
               **{s.replace(" ", "_"): sum(v.status == s for v in verdicts)
                  for s in ("extractable", "not extractable", "undecided")},
               "float_extractable": sum(r["float"]["extractable"] for r in rows),
               "longest_proved_span": max(v.span for v in verdicts)}
    rel = os.path.relpath(cert_path.resolve(), out.resolve().parent)
    report: dict[str, Any] = {
        "format": "exactmem.extraction-report/1", "model": str(model), "data": str(data),
        "prefix": k, "suffix": m, "certificate": rel,
        "certificate_sha256": None, "tokenizer": None if voc is None else voc.source,
        "summary": summary, "sequences": rows}
    report["certificate_sha256"] = hashlib.sha256(cert_path.read_bytes()).hexdigest()
    if every_length:
        report["by_length"] = by_length(verdicts, k, m)
    return report
