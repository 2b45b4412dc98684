"""``exactmem export CERT --format torch|safetensors|onnx -o OUT``: the certified network
in the float formats users load, or with int8 / bfloat16 weight matrices for a certificate
that claims them (``--dtype int8|bfloat16``); a language model's certificate through
:mod:`exactmem.lm.exporting`."""

from __future__ import annotations

import argparse
import sys
from fractions import Fraction
from pathlib import Path
from typing import Any

FORMATS = ("torch", "safetensors", "onnx")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "export", help="write a certified network as a torch state_dict, safetensors or ONNX",
        description="Write the network of CERT with every weight rounded once to nearest into "
                    "--dtype. torch: a state_dict (.pt) with the structure in '_extra_state'; "
                    "safetensors: tensors plus an exact-rational sidecar OUT.exact.json, bound "
                    "by SHA-256 in the metadata; onnx: MatMul/Softmax-level graph with input "
                    "'tokens' or 'inputs' and outputs 'labels' and 'outputs'. The certificate "
                    "is re-checked first (skip with --no-check). The written file is then run "
                    "in its own runtime (onnxruntime for onnx, torch for torch and "
                    "safetensors) on the certificate's dataset and the memorized fraction "
                    "printed; below 1 nothing is written (exit 1) unless --allow-lossy. "
                    "--dtype int8 (a certificate claiming int8) writes int8 weight matrices "
                    "with int32 biases and tables: onnx an integer graph (MatMulInteger, "
                    "int32 accumulation), torch/safetensors int8 + int32 tensors run in "
                    "torch integer arithmetic; --dtype bfloat16 with a certificate claiming "
                    "bfloat16-weights/float32 writes bfloat16 weight matrices with float32 "
                    "biases and tables (onnx: bfloat16 initializers cast to float32), no "
                    "sidecar; without the claim: one-line error, exit 2, nothing written. "
                    "A language-model certificate (exactmem.lm-certificate/1, from "
                    "certify-model) is written with its stored weights in --dtype float64 "
                    "or float32 and its config: safetensors (config in the metadata), torch "
                    "({config, state_dict}) or onnx (input 'tokens', outputs 'logits' and "
                    "'labels'); the file is run in its runtime on the certificate's dataset "
                    "and must keep the label as the unique argmax at every certified "
                    "position (docs/trained-models.md). "
                    "CERT may be gzip-compressed. Exit 0 written, 1 the certificate is "
                    "rejected or the file would not memorize, 2 unusable input.",
        epilog="example: exactmem certify d.json -c kajitsuka2025-next-token --max-bits 24 "
               "-o c.json && exactmem export c.json --format onnx --dtype float32 -o net.onnx; "
               "exactmem certify d.json -c dense-int8 --float-exact int8 -o c8.json && "
               "exactmem export c8.json --format onnx --dtype int8 -o net8.onnx; "
               "exactmem certify-model gpt2/ d.json --partial -o lm.json && "
               "exactmem export lm.json --format onnx --dtype float32 -o lm.onnx",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("certificate", help="certificate file")
    p.add_argument("--format", "-f", required=True, choices=FORMATS, help="file format")
    p.add_argument("-o", "--output", required=True, metavar="OUT", help="file to write")
    p.add_argument("--dtype", default="float64",
                   choices=("float64", "float32", "bfloat16", "float16", "int8"),
                   help="type of the weights and of the run (a language model: float64/float32; "
                        "onnx: float64/float32; "
                        "safetensors: float64/float32/float16; int8, and bfloat16 weight "
                        "matrices, in every format for a certificate claiming int8 / "
                        "bfloat16-weights/float32; torch bfloat16 without that claim: every "
                        "tensor rounded to bfloat16)")
    p.add_argument("--sidecar", default=None,
                   help="safetensors only: exact sidecar path (default OUT.exact.json)")
    p.add_argument("--no-check", action="store_true",
                   help="do not re-run the checker on the certificate first")
    p.add_argument("--allow-lossy", action="store_true",
                   help="write the file even when it does not memorize every sequence in its "
                        "runtime (the fraction is printed)")
    p.set_defaults(func=run)


#: the optional package each format needs (all in the ``export`` extra), and its runtime
NEEDS = {"torch": ("torch", "export --format torch"),
         "safetensors": ("safetensors", "export --format safetensors"),
         "onnx": ("onnx", "export --format onnx")}
RUNS_IN = {"torch": "torch", "safetensors": "torch", "onnx": "onnxruntime"}
FLOAT_READY = ("kajitsuka2025-next-token", "kajitsuka2025-seq2seq", "lookup")


class _Lossy(Exception):
    """The written file does not memorize: it is discarded (nothing is written)."""


def run(args: argparse.Namespace) -> int:
    from exactmem.adapters import need
    from exactmem.adapters.runtimes import DTYPES, NARROW
    from exactmem.certificate import dataset_from_certificate
    from exactmem.errors import SpecError
    from exactmem.files.atomic import check_writable
    from exactmem.lm.certfile import LM_FORMAT

    need(*NEEDS[args.format])
    need(RUNS_IN[args.format], f"checking the written file (export --format {args.format})")
    cert = _read(args.certificate)
    if cert.get("format") == LM_FORMAT:
        return _run_lm(args, cert)
    if args.dtype not in DTYPES[args.format] + tuple(NARROW):
        raise SpecError(f"{args.format} export supports {', '.join(DTYPES[args.format])}, "
                        f"found {args.dtype}")
    check_writable(args.output)
    if args.format == "safetensors" and args.sidecar:
        check_writable(args.sidecar)
    args.narrow = _narrow_claim(args, cert)
    if not args.no_check:
        from exactmem.checker import check_certificate

        report = check_certificate(cert, Path(args.certificate).parent)
        if not report.verified:
            for line in report.failures[:20]:
                print(f"  {line}", file=sys.stderr)
            print(f"not exported: the checker rejects {args.certificate}")
            return 1
    ds = dataset_from_certificate(cert, Path(args.certificate).parent)
    try:
        line = _write_and_run(args, cert, ds)
    except _Lossy as exc:
        print(f"not exported: {exc}")
        return 1
    print(line)
    return 0


def _read(path: str) -> dict[str, Any]:
    """The certificate, read strictly once: an ``exactmem.certificate/1`` (its network
    parsed) or a language model's."""
    from exactmem.certificate.build import read_certificate
    from exactmem.lm.certfile import LM_FORMAT

    return read_certificate(path, (LM_FORMAT,))


def _run_lm(args: argparse.Namespace, cert: dict[str, Any]) -> int:
    """A language-model certificate (docs/trained-models.md, "Exporting a certified
    language model"): check it, write the file, run it in its runtime, count the certified
    positions where it keeps the label as the unique argmax."""
    from exactmem.certificate import dataset_from_certificate
    from exactmem.errors import SpecError
    from exactmem.files.atomic import atomic_path, check_writable
    from exactmem.lm import exporting as lm

    if args.dtype not in lm.DTYPES:
        raise SpecError(f"a language model exports in {' or '.join(lm.DTYPES)}, found "
                        f"--dtype {args.dtype}")
    if args.sidecar:
        raise SpecError("--sidecar: a language-model export has no exact sidecar (the "
                        "certificate holds the exact weights)")
    out = check_writable(args.output)
    base = Path(args.certificate).parent
    if not args.no_check:
        from exactmem import progress
        from exactmem.checker import check_certificate

        tick, close = progress.hook("check", heartbeat=True)  # minutes at 10^6 parameters
        try:
            report = check_certificate(cert, base, progress=tick)
        finally:
            close()
        if not report.verified:
            for line in report.failures[:20]:
                print(f"  {line}", file=sys.stderr)
            why = "cannot read" if report.unusable else "rejects"
            print(f"not exported: the checker {why} {args.certificate}")
            return int(report.exit_code)
    spec = lm.spec_of(cert)
    tokens, labels = lm.tokens_of(spec, dataset_from_certificate(cert, base))
    claims = cert.get("claims")
    claimed = claims.get("positions") if isinstance(claims, dict) else None
    if (not isinstance(claimed, list) or len(claimed) != len(tokens)
            or not all(isinstance(r, list) and all(type(p) is int and 0 <= p < tokens.shape[1]
                                                   for p in r) for r in claimed)):
        raise SpecError("claims.positions: expected one list of positions per sequence")
    try:
        with atomic_path(out) as tmp:  # removed unless the block ends without an error
            lm.write(args.format, spec, tmp, args.dtype,
                     {"exactmem.certificate_digest": str(cert.get("digest", ""))})
            ok = lm.file_proved(args.format, tmp, spec, tokens, labels)
            complete, line = lm.summary(ok, claimed, RUNS_IN[args.format], args.dtype)
            if not complete and not args.allow_lossy:
                raise _Lossy(f"{line} (--allow-lossy writes it anyway)")
    except _Lossy as exc:
        print(f"not exported: {exc}")
        return 1
    lossy = "" if complete else " (lossy: written because of --allow-lossy)"
    print(f"wrote {out} ({args.format}, {args.dtype}); {line}{lossy}")
    return 0


def _narrow_claim(args: argparse.Namespace, cert: dict[str, Any]) -> str | None:
    """The claim behind a narrow ``--dtype`` (runtimes.NARROW), or None for a float export;
    a certificate that does not claim it is unusable input (nothing is written)."""
    from exactmem.adapters.runtimes import DTYPES, NARROW
    from exactmem.errors import SpecError

    if args.dtype not in NARROW:
        return None
    claims = [str(c) for c in (cert.get("claims") or {}).get("float_exact", [])]
    claim = NARROW[args.dtype]
    if claim in claims:
        if args.format == "safetensors" and args.sidecar:
            raise SpecError(f"--sidecar: a {args.dtype} safetensors file holds its weights "
                            f"exactly and has no sidecar")
        return claim
    if args.dtype in DTYPES[args.format]:  # torch bfloat16: every tensor rounded (float path)
        return None
    floats = ", ".join(d for d in DTYPES[args.format] if d not in NARROW)
    raise SpecError(f"{args.format} export --dtype {args.dtype} needs a certificate claiming "
                    f"{claim} (certify --float-exact {claim}); {args.certificate} claims "
                    f"{', '.join(claims) or 'no format'}; any certificate: --dtype {floats}")


def _write_narrow(args: argparse.Namespace, cert: dict[str, Any], spec: Any, tmp: Path,
                  ) -> None:
    """The file of a narrow ``--dtype`` (docs/float-exact.md, docs/dense-memorizers.md)."""
    meta = {"exactmem.certificate_digest": str(cert.get("digest", "")),
            "exactmem.dtype": args.narrow}
    if args.format == "onnx":
        import onnx

        from exactmem.adapters import lowp_onnx

        model = (lowp_onnx.build_int8_model(spec, meta) if args.dtype == "int8"
                 else lowp_onnx.build_bf16_model(spec))
        onnx.helper.set_model_props(model, {**{p.key: p.value for p in model.metadata_props},
                                            **meta})
        onnx.save_model(model, str(tmp))
        return
    import json

    from exactmem.adapters import lowp
    from exactmem.adapters.skeleton import skeleton

    if args.format == "torch":
        lowp.save_lowp_state_dict(spec, args.narrow, tmp)
    else:
        lowp.save_lowp(spec, args.narrow, tmp, {
            **meta, "exactmem.format": "exactmem.safetensors-narrow/1",
            "exactmem.skeleton": json.dumps(skeleton(spec), sort_keys=True)})


def _write_and_run(args: argparse.Namespace, cert: dict[str, Any], ds: Any) -> str:
    """Write the file under a temporary name, run it in its runtime, and keep it only when
    it memorizes (or with --allow-lossy); the summary line."""
    from contextlib import ExitStack

    from exactmem.adapters.runtimes import load_torch, run_file
    from exactmem.certificate import spec_from_certificate
    from exactmem.files.atomic import atomic_path

    spec = spec_from_certificate(cert)
    out = Path(args.output)
    extra = ""
    with ExitStack() as stack:
        tmp = stack.enter_context(atomic_path(out))
        if getattr(args, "narrow", None):
            from exactmem.adapters.runtimes import run_narrow_file

            _write_narrow(args, cert, spec, tmp)
            ran = run_narrow_file(args.format, tmp, spec, ds, args.dtype)
            if not ran.complete and not args.allow_lossy:
                raise _Lossy(f"the written file {ran.line()} (--allow-lossy writes it anyway)")
            from exactmem.constructions.bounds import stored_split

            split = ", ".join(f"{c} {dt}" for dt, c in stored_split(spec, args.narrow).items())
            lossy = "" if ran.complete else " (lossy: written because of --allow-lossy)"
            return (f"wrote {out} ({args.format}, {args.dtype} weight matrices under the claim "
                    f"{args.narrow}): {split} entries, none rounded; {ran.line()}{lossy}")
        if args.format == "torch":
            load_torch().save_state_dict(spec, tmp, args.dtype)
        elif args.format == "safetensors":
            from exactmem.adapters.safetensors_io import write_safetensors

            side = Path(args.sidecar) if args.sidecar else out.with_name(out.name + ".exact.json")
            side_tmp = stack.enter_context(atomic_path(side))
            write_safetensors(spec, tmp, args.certificate, args.dtype, side_tmp)
            extra = f"; exact sidecar {side}"
        else:
            from exactmem.adapters.onnx_export import write_onnx

            write_onnx(spec, tmp, args.dtype,
                       {"exactmem.certificate_digest": str(cert.get("digest", ""))})
        ran = run_file(args.format, tmp, spec, ds, args.dtype)
        if not ran.complete and not args.allow_lossy:
            raise _Lossy(f"the written file {ran.line()} (--allow-lossy writes it anyway)\n"
                         f"  {_advice(args, cert, spec, ds)}")
    total, rounded, overflow = _rounding(spec, args.dtype)
    lossy = "" if ran.complete else " (lossy: written because of --allow-lossy)"
    return (f"wrote {out} ({args.format}, {args.dtype}): {total} weights, {rounded} rounded, "
            f"{overflow} overflowed to infinity{extra}; {ran.line()}{lossy}")


def _advice(args: argparse.Namespace, cert: dict[str, Any], spec: Any, ds: Any) -> str:
    """Which wider dtype of the format memorizes (run in memory), or how to build a network
    that float runs exactly."""
    from exactmem.adapters.formats import FORMATS
    from exactmem.adapters.runtimes import DTYPES, run_format

    want = FORMATS[args.dtype].precision
    for dt in DTYPES[args.format]:
        if FORMATS[dt].precision > want:
            other = run_format(args.format, spec, ds, dt)
            if other.complete:
                return f"--dtype {dt} holds ({other.line()})"
    name = str(cert.get("construction", {}).get("name", "NAME"))
    how = (f"`exactmem certify DATA -c {name} --max-bits {want}` builds a float-ready network "
           f"that {args.dtype} runs exactly (docs/float-ready.md)")
    if name not in FLOAT_READY:
        how = ("--max-bits P (kajitsuka2025-next-token, kajitsuka2025-seq2seq, lookup) builds "
               "a float-ready network (docs/float-ready.md)")
    return (f"no {args.format} dtype as wide or wider memorizes; {how}; "
            f"`exactmem precision {args.certificate}` shows where float breaks it")


def _rounding(spec: Any, dtype: str) -> tuple[int, int, int]:
    """Weights in all, rounded, and overflowed to infinity when rounded into ``dtype``."""
    from exactmem.adapters.formats import FORMATS as FLOATS
    from exactmem.adapters.formats import round_to_format
    from exactmem.adapters.skeleton import named_matrices

    fmt = FLOATS[dtype]
    total = rounded = overflow = 0
    for _, m, _ in named_matrices(spec):
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
