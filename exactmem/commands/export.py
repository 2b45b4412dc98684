"""``exactmem export CERT --format torch|safetensors|onnx -o OUT``: the certified network
in the float formats users load, or with int8 / bfloat16 weight matrices for a certificate
that claims them (``--dtype int8|bfloat16``); a language model's certificate through
:func:`exactmem.api.exports.export`."""

from __future__ import annotations

import argparse
import sys

from exactmem.commands._args import progress_of

FORMATS = ("torch", "safetensors", "onnx")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "export", help="write a certified network as a torch state_dict, safetensors or ONNX",
        description="Write the network of CERT with every weight rounded once to nearest into "
                    "--dtype. torch: a state_dict (.pt) with the structure in '_extra_state'; "
                    "safetensors: tensors plus an exact-rational sidecar OUT.exact.json, bound "
                    "by SHA-256 in the metadata; onnx: MatMul/Softmax-level graph with input "
                    "'tokens' or 'inputs' and outputs 'labels' and 'outputs'. The certificate "
                    "is re-checked first (skip with --no-check), unless this checker verified "
                    "the same certificate bytes and bound files before (check, certify-model "
                    "and export keep a verification record; --recheck runs it anyway). "
                    "The written file is then run "
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
    p.add_argument("--recheck", action="store_true",
                   help="run the checker even when it verified these certificate bytes before "
                        "(a verification record in the cache folder: docs/checker.md)")
    p.add_argument("--allow-lossy", action="store_true",
                   help="write the file even when it does not memorize every sequence in its "
                        "runtime (the fraction is printed)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from exactmem.api.exports import NotExported, export

    with progress_of("check", {"forward": "--no-check skips it; a certificate this "
                                          "checker verified before is not checked again"}) \
            as tick:  # minutes at 10^6 parameters
        try:
            result = export(args.certificate, args.output, args.format, args.dtype,
                            sidecar=args.sidecar, check=not args.no_check,
                            allow_lossy=args.allow_lossy, recheck=args.recheck,
                            progress=tick)
        except NotExported as exc:
            for line in exc.failures[:20]:
                print(f"  {line}", file=sys.stderr)
            print(exc)
            return exc.exit_code
    print(result.line)
    if result.verification:
        print(result.verification)
    return 0
