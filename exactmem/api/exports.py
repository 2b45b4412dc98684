"""``exactmem.export``: the certified network in the float formats users load (torch state
dict, safetensors, ONNX), or with int8 / bfloat16 weight matrices for a certificate that
claims them; a language model's certificate through :mod:`exactmem.lm.exporting`.

The certificate is re-checked first; the file is written under a temporary name, run in
its own runtime on the certificate's dataset, and kept only when it memorizes (or with
``allow_lossy``).  A rejected certificate or a lossy file raises :class:`NotExported`.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import replace
from fractions import Fraction
from pathlib import Path
from typing import Any

from exactmem.api.result_types import ExportResult
from exactmem.errors import CertificateError, SpecError

PathLike = str | Path
FORMATS = ("torch", "safetensors", "onnx")
#: the optional package each format needs (all in the ``export`` extra), and its runtime
NEEDS = {"torch": ("torch", "export --format torch"),
         "safetensors": ("safetensors", "export --format safetensors"),
         "onnx": ("onnx", "export --format onnx")}
RUNS_IN = {"torch": "torch", "safetensors": "torch", "onnx": "onnxruntime"}
FLOAT_READY = ("kajitsuka2025-next-token", "kajitsuka2025-seq2seq", "lookup")


class NotExported(CertificateError):
    """Nothing was written: the checker rejects (or cannot read) the certificate, or the
    written file does not memorize in its runtime.  ``failures``: the checker's reasons;
    ``exit_code``: 1 (rejected, lossy) or 2 (unusable)."""

    def __init__(self, message: str, failures: tuple[str, ...] = (), exit_code: int = 1
                 ) -> None:
        super().__init__(message)
        self.failures, self.exit_code = failures, exit_code


def export(certificate: dict[str, Any] | PathLike, output: PathLike, format: str = "torch",  # noqa: A002
           dtype: str = "float64", *, sidecar: PathLike | None = None, check: bool = True,
           allow_lossy: bool = False, recheck: bool = False,
           progress: Callable[[str, int, int], None] | None = None) -> ExportResult:
    """Write the certified network of ``certificate`` (a file, or a parsed dict) to
    ``output`` in ``format`` with weights rounded once to nearest into ``dtype``
    (``exactmem export``); ``check=False`` skips the checker, ``progress`` follows it.  A
    certificate file this checker has verified before, with the same bytes and bound files,
    is not checked again (:mod:`exactmem.api.verified`) unless ``recheck``."""
    from exactmem.certificate import dataset_from_certificate
    from exactmem.exporters.runtimes import DTYPES, NARROW
    from exactmem.files.atomic import check_writable
    from exactmem.lm.certfile import LM_FORMAT
    from exactmem.optional import need

    if format not in FORMATS:
        raise SpecError(f"format: expected torch, safetensors or onnx, found {format!r}")
    need(*NEEDS[format])
    need(RUNS_IN[format], f"checking the written file (export --format {format})")
    cert, base, name = _read(certificate)
    source = None if isinstance(certificate, dict) else Path(certificate)
    if cert.get("format") == LM_FORMAT:
        return _export_lm(cert, base, name, Path(output), format, dtype, sidecar,
                          (check, recheck, source), allow_lossy, progress)
    if dtype not in DTYPES[format] + tuple(NARROW):
        raise SpecError(f"{format} export supports {', '.join(DTYPES[format])}, found {dtype}")
    if format == "safetensors" and isinstance(certificate, dict):
        raise CertificateError("safetensors export binds the certificate file: give its path")
    check_writable(output)
    if format == "safetensors" and sidecar:
        check_writable(sidecar)
    narrow = _narrow_claim(format, dtype, sidecar, cert, name)
    said = _check(cert, base, name, None, recheck, source) if check else NOT_CHECKED
    ds = dataset_from_certificate(cert, base)
    return replace(_write_and_run(cert, ds, name, Path(output), format, dtype, sidecar, narrow,
                                  allow_lossy), verification=said)


def _read(certificate: dict[str, Any] | PathLike) -> tuple[dict[str, Any], Path, str]:
    """The certificate, read strictly once (an ``exactmem.certificate/1``, its network
    parsed, or a language model's), its folder and its name."""
    if isinstance(certificate, dict):
        return certificate, Path("."), "the certificate"
    from exactmem.certificate.build import read_certificate
    from exactmem.lm.certfile import LM_FORMAT

    return (read_certificate(certificate, (LM_FORMAT,)), Path(certificate).parent,
            str(certificate))


NOT_CHECKED = "checker: not run (--no-check)"


def _check(cert: dict[str, Any], base: Path, name: str,
           progress: Callable[[str, int, int], None] | None, recheck: bool = False,
           source: Path | None = None) -> str:
    """Run the checker on ``cert`` unless ``source`` (its file) has a verification record
    (:mod:`exactmem.api.verified`) and not ``recheck``; record a VERIFIED file.  Returns
    the line saying which of the two happened."""
    from exactmem.api import verified
    from exactmem.checker import check_certificate

    now = rec = None
    if source is not None:  # read and hashed once, for the lookup and for the record
        now = verified.state(source)
        rec = None if now is None or recheck else verified.lookup(source, now)
    if rec is not None:
        return (f"checker: not run again; this checker verified these bytes at "
                f"{rec.get('when', '?')} (a verification record, docs/checker.md; "
                "--recheck runs it)")
    report = check_certificate(cert, base, progress=progress)
    if not report.verified:
        why = "cannot read" if report.unusable else "rejects"
        raise NotExported(f"not exported: the checker {why} {name}",
                          tuple(report.failures), int(report.exit_code))
    if source is not None:
        verified.record(source, getattr(report, "claim", None), now)
    return "checker: VERIFIED"


def _export_lm(cert: dict[str, Any], base: Path, name: str, out: Path, format: str,  # noqa: A002
               dtype: str, sidecar: PathLike | None,
               checking: tuple[bool, bool, Path | None], allow_lossy: bool,
               progress: Callable[[str, int, int], None] | None) -> ExportResult:
    """A language-model certificate (docs/trained-models.md, "Exporting a certified
    language model"): check it, write the file, run it in its runtime, count the certified
    positions where it keeps the label as the unique argmax."""
    from exactmem.certificate import dataset_from_certificate
    from exactmem.files.atomic import atomic_path, check_writable
    from exactmem.lm import exporting as lm

    if dtype not in lm.DTYPES:
        raise SpecError(f"a language model exports in {' or '.join(lm.DTYPES)}, found "
                        f"--dtype {dtype}")
    if sidecar:
        raise SpecError("--sidecar: a language-model export has no exact sidecar (the "
                        "certificate holds the exact weights)")
    out = check_writable(out)
    check, recheck, source = checking
    said = _check(cert, base, name, progress, recheck, source) if check else NOT_CHECKED
    if check:
        if progress is not None:
            progress("done; writing and running the file", 0, 0)
    spec = lm.spec_of(cert, base)
    tokens, labels = lm.tokens_of(spec, dataset_from_certificate(cert, base))
    claims = cert.get("claims")
    claimed = lm.claimed_positions(cert, tokens)
    with atomic_path(out) as tmp:  # removed unless the block ends without an error
        lm.write(format, spec, tmp, dtype,
                 {"exactmem.certificate_digest": str(cert.get("digest", ""))})
        ok = lm.file_proved(format, tmp, spec, tokens, labels)
        complete, line = lm.summary(ok, claimed, RUNS_IN[format], dtype)
        proof = lm.execution_line(claims, dtype, check, ok)
        if proof is not None:
            line += "; " + proof
        if not complete and not allow_lossy:
            raise NotExported(f"not exported: {line} (--allow-lossy writes it anyway)")
    lossy = "" if complete else " (lossy: written because of --allow-lossy)"
    return ExportResult(out, format, dtype, 0, 0, 0, None,
                        f"wrote {out} ({format}, {dtype}); {line}{lossy}", complete, said)


def _narrow_claim(format: str, dtype: str, sidecar: PathLike | None,  # noqa: A002
                  cert: dict[str, Any], name: str) -> str | None:
    """The claim behind a narrow ``dtype`` (runtimes.NARROW), or None for a float export;
    a certificate that does not claim it is unusable input (nothing is written)."""
    from exactmem.exporters.runtimes import DTYPES, NARROW

    if dtype not in NARROW:
        return None
    claims = [str(c) for c in (cert.get("claims") or {}).get("float_exact", [])]
    claim = NARROW[dtype]
    if claim in claims:
        if format == "safetensors" and sidecar:
            raise SpecError(f"--sidecar: a {dtype} safetensors file holds its weights "
                            f"exactly and has no sidecar")
        return claim
    if dtype in DTYPES[format]:  # torch bfloat16: every tensor rounded (float path)
        return None
    floats = ", ".join(d for d in DTYPES[format] if d not in NARROW)
    raise SpecError(f"{format} export --dtype {dtype} needs a certificate claiming "
                    f"{claim} (certify --float-exact {claim}); {name} claims "
                    f"{', '.join(claims) or 'no format'}; any certificate: --dtype {floats}")


def _write_narrow(format: str, dtype: str, narrow: str, cert: dict[str, Any], spec: Any,  # noqa: A002
                  tmp: Path) -> None:
    """The file of a narrow ``dtype`` (docs/float-exact.md, docs/dense-memorizers.md)."""
    meta = {"exactmem.certificate_digest": str(cert.get("digest", "")),
            "exactmem.dtype": narrow}
    if format == "onnx":
        import onnx

        from exactmem.exporters import lowp_onnx

        model = (lowp_onnx.build_int8_model(spec, meta) if dtype == "int8"
                 else lowp_onnx.build_bf16_model(spec))
        onnx.helper.set_model_props(model, {**{p.key: p.value for p in model.metadata_props},
                                            **meta})
        onnx.save_model(model, str(tmp))
        return
    import json

    from exactmem.exporters import lowp
    from exactmem.exporters.skeleton import skeleton

    if format == "torch":
        lowp.save_lowp_state_dict(spec, narrow, tmp)
    else:
        lowp.save_lowp(spec, narrow, tmp, {
            **meta, "exactmem.format": "exactmem.safetensors-narrow/1",
            "exactmem.skeleton": json.dumps(skeleton(spec), sort_keys=True)})


def _write_and_run(cert: dict[str, Any], ds: Any, name: str, out: Path, format: str,  # noqa: A002
                   dtype: str, sidecar: PathLike | None, narrow: str | None,
                   allow_lossy: bool) -> ExportResult:
    """Write the file under a temporary name, run it in its runtime, and keep it only when
    it memorizes (or with ``allow_lossy``)."""
    from exactmem.certificate import spec_from_certificate
    from exactmem.exporters.runtimes import load_torch, run_file
    from exactmem.files.atomic import atomic_path

    spec = spec_from_certificate(cert)
    extra = ""
    side: Path | None = None
    with ExitStack() as stack:
        tmp = stack.enter_context(atomic_path(out))
        if narrow:
            from exactmem.constructions.bounds import stored_split
            from exactmem.exporters.runtimes import run_narrow_file

            _write_narrow(format, dtype, narrow, cert, spec, tmp)
            ran = run_narrow_file(format, tmp, spec, ds, dtype)
            if not ran.complete and not allow_lossy:
                raise NotExported(f"not exported: the written file {ran.line()} "
                                  "(--allow-lossy writes it anyway)")
            split = ", ".join(f"{c} {dt}" for dt, c in stored_split(spec, narrow).items())
            lossy = "" if ran.complete else " (lossy: written because of --allow-lossy)"
            total = sum(len(row) for _, m, _ in _matrices(spec) for row in m.num)
            return ExportResult(
                out, format, dtype, total, 0, 0, None,
                f"wrote {out} ({format}, {dtype} weight matrices under the claim {narrow}): "
                f"{split} entries, none rounded; {ran.line()}{lossy}", ran.complete)
        if format == "torch":
            load_torch().save_state_dict(spec, tmp, dtype)
        elif format == "safetensors":
            from exactmem.exporters.safetensors_io import write_safetensors

            side = Path(sidecar) if sidecar else out.with_name(out.name + ".exact.json")
            side_tmp = stack.enter_context(atomic_path(side))
            write_safetensors(spec, tmp, name, dtype, side_tmp)
            extra = f"; exact sidecar {side}"
        else:
            from exactmem.exporters.onnx_export import write_onnx

            write_onnx(spec, tmp, dtype,
                       {"exactmem.certificate_digest": str(cert.get("digest", ""))})
        ran = run_file(format, tmp, spec, ds, dtype)
        if not ran.complete and not allow_lossy:
            advice = _advice(format, dtype, name, cert, spec, ds)
            raise NotExported(f"not exported: the written file {ran.line()} (--allow-lossy "
                              f"writes it anyway)\n  {advice}")
    total, rounded, overflow = _rounding(spec, dtype)
    lossy = "" if ran.complete else " (lossy: written because of --allow-lossy)"
    return ExportResult(out, format, dtype, total, rounded, overflow, side,
                        f"wrote {out} ({format}, {dtype}): {total} weights, {rounded} rounded, "
                        f"{overflow} overflowed to infinity{extra}; {ran.line()}{lossy}",
                        ran.complete)


def _advice(format: str, dtype: str, name: str, cert: dict[str, Any], spec: Any,  # noqa: A002
            ds: Any) -> str:
    """Which wider dtype of the format memorizes (run in memory), or how to build a network
    that float runs exactly."""
    from exactmem.exporters.runtimes import DTYPES, run_format
    from exactmem.floats.formats import FORMATS as FLOATS

    want = FLOATS[dtype].precision
    for dt in DTYPES[format]:
        if FLOATS[dt].precision > want:
            other = run_format(format, spec, ds, dt)
            if other.complete:
                return f"--dtype {dt} holds ({other.line()})"
    con = str(cert.get("construction", {}).get("name", "NAME"))
    how = (f"`exactmem certify DATA -c {con} --max-bits {want}` builds a float-ready network "
           f"that {dtype} runs exactly (docs/float-ready.md)")
    if con not in FLOAT_READY:
        how = ("--max-bits P (kajitsuka2025-next-token, kajitsuka2025-seq2seq, lookup) builds "
               "a float-ready network (docs/float-ready.md)")
    return (f"no {format} dtype as wide or wider memorizes; {how}; "
            f"`exactmem precision {name}` shows where float breaks it")


def _matrices(spec: Any) -> Any:
    from exactmem.exporters.skeleton import named_matrices

    return named_matrices(spec)


def _rounding(spec: Any, dtype: str) -> tuple[int, int, int]:
    """Weights in all, rounded, and overflowed to infinity when rounded into ``dtype``."""
    from exactmem.floats.formats import FORMATS as FLOATS
    from exactmem.floats.formats import round_to_format

    fmt = FLOATS[dtype]
    total = rounded = overflow = 0
    for _, m, _ in _matrices(spec):
        small = m.den == 1 and all(abs(x) < (1 << fmt.precision) for r in m.num for x in r)
        for row in m.num:
            total += len(row)
            if small:
                continue
            for x in row:
                v = round_to_format(Fraction(x, m.den), fmt)
                overflow += v is None
                rounded += v is not None and v != Fraction(x, m.den)
    return total, rounded, overflow
