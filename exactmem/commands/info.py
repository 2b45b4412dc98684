"""``exactmem info CERT [--json]``: size figures beside the bound that describes the network."""

from __future__ import annotations

import argparse
import json
from typing import Any

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


def info(cert: dict[str, Any]) -> dict[str, Any]:
    from exactmem.certificate import dataset_from_certificate, spec_from_certificate
    from exactmem.constructions.bounds import figures
    from exactmem.model.sizes import sizes

    spec = spec_from_certificate(cert)
    ds = dataset_from_certificate(cert)
    out: dict[str, Any] = dict(sizes(spec).as_dict())
    name = cert.get("construction", {}).get("name")
    out.update({"N": ds.N, "n": ds.n, "task": ds.task, "inputs": ds.inputs,
                "d": ds.dim if ds.inputs == "vectors" else ds.vocab_size,
                "C": ds.num_classes, "construction": name,
                "params": cert.get("construction", {}).get("params", {})})
    claims = cert.get("claims", {})  # what the certificate claims; `exactmem check` decides
    out["float_exact"] = list(claims.get("float_exact", []))
    out.update(figures(spec, ds, name, out["params"], out["float_exact"]))
    out["claimed_sequences"] = len(claims.get("sequences", range(ds.N)))
    return out


LM_KEYS = ("certified_positions", "positions", "sequences_in_full", "N", "n", "partial",
           "params", "vocab_size", "context", "d_model", "heads", "layers", "d_ff",
           "activation", "tied_head")


def lm_summary(path: str) -> dict[str, Any] | None:
    """:func:`exactmem.certificate.lm.lm_info` of a language-model certificate (the dataset
    embedded or bound by path beside it), or None when ``path`` holds another format."""
    from pathlib import Path

    from exactmem.certificate.lm import LM_FORMAT, lm_info
    from exactmem.checker.parse import Unusable, read_json
    from exactmem.errors import CertificateError

    try:
        cert = read_json(Path(path))
        if not isinstance(cert, dict) or cert.get("format") != LM_FORMAT:
            return None
        entry = cert.get("dataset")
        if isinstance(entry, dict) and "data" not in entry and isinstance(entry.get("path"), str):
            cert = {**cert, "dataset": {**entry,
                                        "data": read_json(Path(path).parent / entry["path"])}}
        return lm_info(cert)
    except Unusable as exc:
        raise CertificateError(str(exc)) from None
    except (KeyError, TypeError, ValueError, AttributeError, OSError) as exc:
        raise CertificateError(f"{path}: not a readable {LM_FORMAT} certificate "
                               f"({type(exc).__name__}: {exc})") from None


def run(args: argparse.Namespace) -> int:
    from exactmem.certificate import read_certificate

    lm = lm_summary(args.certificate)
    if lm is not None:  # a language model: what it claims, position by position
        if args.json:
            print(json.dumps(lm, sort_keys=True))
        else:
            for key in LM_KEYS:
                print(f"{key:20s} {lm[key]}")
        return 0
    data = info(read_certificate(args.certificate))
    if args.json:
        print(json.dumps(data, sort_keys=True))
    else:
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
        for key, form in PER.items():
            print(f"{key:26s} {data[key]} ({form.format(dtype=dtype)})")
        for key, value in data["optimality_gap"].items():
            print(f"optimality_gap.{key:11s} {value}")
        print(f"{'claimed':26s} {data['claimed_sequences']} of {data['N']} sequences"
              + (f", float-exact in {', '.join(data['float_exact'])}" if data["float_exact"]
                 else ""))
    return 0
