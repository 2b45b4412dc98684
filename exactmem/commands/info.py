"""``exactmem info CERT [--json]``: size figures beside the theorem's bound."""

from __future__ import annotations

import argparse
import json
from typing import Any


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "info", help="size figures of a certificate's network, and the theorem's bound",
        description="Print the network's size (dense and nonzero parameters, depth, width, "
                    "max bits), N, the construction, and where the construction states one, "
                    "the theorem's bound for this N, n, d, C.",
        epilog="example: exactmem info c.json --json")
    p.add_argument("certificate")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)


def info(cert: dict[str, Any]) -> dict[str, Any]:
    from exactmem import constructions
    from exactmem.certificate import dataset_from_certificate, spec_from_certificate
    from exactmem.errors import UnknownConstructionError
    from exactmem.model.sizes import sizes

    spec = spec_from_certificate(cert)
    ds = dataset_from_certificate(cert)
    out: dict[str, Any] = dict(sizes(spec).as_dict())
    name = cert.get("construction", {}).get("name")
    out.update({"N": ds.N, "n": ds.n, "task": ds.task, "inputs": ds.inputs,
                "d": ds.dim if ds.inputs == "vectors" else ds.vocab_size,
                "C": ds.num_classes, "construction": name,
                "params": cert.get("construction", {}).get("params", {})})
    try:
        con = constructions.get(name)
    except UnknownConstructionError:
        con = None
    if con is not None and con.bound is not None:
        params = {k: v for k, v in out["params"].items()
                  if k not in ("N", "n", "d", "C", "inputs", "task")}
        out["bound"] = dict(con.bound(N=ds.N, n=ds.n, d=out["d"], C=ds.num_classes,
                                      inputs=ds.inputs, task=ds.task, **params))
    return out


def run(args: argparse.Namespace) -> int:
    from exactmem.certificate import read_certificate

    data = info(read_certificate(args.certificate))
    if args.json:
        print(json.dumps(data, sort_keys=True))
    else:
        for key in ("construction", "N", "n", "task", "inputs", "d", "C", "params_dense",
                    "params_nonzero", "depth", "width", "max_bits"):
            print(f"{key:15s} {data[key]}")
        for key, value in data.get("bound", {}).items():
            print(f"bound.{key:9s} {value}")
    return 0
