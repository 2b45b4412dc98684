"""``exactmem info CERT [--json]``: size figures beside the bound that describes the network."""

from __future__ import annotations

import argparse
import json

PER = {"label_bits_per_nonzero": "label bits / nonzero parameters",
       "label_bits_per_dense": "label bits / dense parameters (zeros included)",
       "label_bits_per_stored_bit": "label bits / (dense parameters x bits of {dtype})",
       "label_bits_per_weight_bit": "label bits / weight_bits_total"}


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "info", help="size figures of a certificate's network, and the bound that describes it",
        description="Print the network's size (dense and nonzero parameters, depth, width, "
                    "max bits), N, the construction, and the bound that describes the network "
                    "for this N, n, d, C: the construction's theorem (width factor and "
                    "recorded r/delta included), or for a --max-bits (float-ready) network "
                    "its own Theta(N b / P) size and the counting bound N log2 C / (P + 1); "
                    "beside them the lower bounds (Kajitsuka & Sato Thm 4.2 / 4.3, the "
                    "counting bound), the optimality gaps, total weight bits and label bits "
                    "per nonzero parameter, per dense parameter and per stored bit of the "
                    "exported file (exactmem/constructions/bounds.py).",
        epilog="example: exactmem info c.json --json")
    p.add_argument("certificate")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from exactmem.api import verbs
    from exactmem.api.result_types import LMInfoResult

    res = verbs.info(args.certificate)
    if args.json:
        print(json.dumps(res.as_dict(), sort_keys=True))
        return 0
    if isinstance(res, LMInfoResult):  # a language model: what it claims, position by position
        print(res)
        return 0
    data = res.as_dict()
    for key in ("construction", "N", "n", "task", "inputs", "d", "C", "params_dense",
                "params_nonzero", "depth", "width", "max_bits"):
        print(f"{key:15s} {data[key]}")
    for key, value in data.get("bound", {}).items():
        print(f"bound.{key:9s} {value}")
    for key, value in data.get("measured_over_bound", {}).items():
        print(f"measured/bound.{key:9s} {value}")
    for key, low in data["lower_bounds"].items():
        print(f"lower.{key:9s} {low['value']} (measured/lower: {low['gap']}; {low['form']})")
    for key in ("embedding_nonzero", "rest_nonzero", "weight_bits_total",
                "weight_bits_max_nonzero", "label_bits"):
        print(f"{key:26s} {data[key]}")
    dtype = data["stored_dtype"] + ("" if data["stored_dtype_exact"] else
                                    ", export's default; not float-exact: the file "
                                    "does not memorize")
    per = dict(PER)
    if "narrow_claim" in data:  # int8 / bfloat16 weight matrices (claim of the certificate)
        from exactmem.api.support import dtype_bits

        bits = dtype_bits()
        split = ", ".join(f"{c} {dt} ({bits[dt]} bits)"
                          for dt, c in data["stored_split"].items())
        per["label_bits_per_stored_bit"] = (
            f"label bits / stored bits {data['stored_bits']}: {split}, the entries of "
            f"the file export --dtype {data['stored_dtype']} writes")
        print(f"{'params_narrow':26s} {data['params_narrow']} (weight-matrix entries, "
              f"{data['stored_dtype']} under the claim {data['narrow_claim']})")
        per = {"label_bits_per_narrow": "label bits / params_narrow", **per}
    for key, form in per.items():
        print(f"{key:26s} {data[key]} ({form.format(dtype=dtype)})")
    for key, value in data["optimality_gap"].items():
        print(f"optimality_gap.{key:11s} {value}")
    print(f"{'claimed':26s} {data['claimed_sequences']} of {data['N']} sequences"
          + (f", float-exact in {', '.join(data['float_exact'])}" if data["float_exact"]
             else ""))
    return 0
