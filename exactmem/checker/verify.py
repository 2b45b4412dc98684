"""Top level of the checker: replay a certificate and report every failure it finds.

Checked: the format tag; the self-digest; the dataset's SHA-256; the network's shapes and
kinds; the exact output of every read position of every sequence, which must give the
label (scalar: equal; argmax: unique maximum) and equal the certificate's claim; the size
figures.  Not checked: the construction's name and parameters, theorem bounds.
"""

import hashlib
import json
from fractions import Fraction
from pathlib import Path

from . import forward
from . import interval as softmax_interval
from .parse import Unusable, field, network, rational

FORMAT = "exactmem.certificate/1"
DATASET_FORMAT = "exactmem.dataset/1"


class CheckReport:
    """``verified`` is True only when no failure was found; ``unusable`` marks unreadable input."""

    def __init__(self, failures, unusable=False):
        self.failures = list(failures)
        self.unusable = unusable

    @property
    def verified(self):
        return not self.failures and not self.unusable

    @property
    def exit_code(self):
        return 0 if self.verified else (2 if self.unusable else 1)


def canonical(obj):
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def _fmt(x):
    return str(x.numerator) if x.denominator == 1 else f"{x.numerator}/{x.denominator}"


def dataset(entry, base):
    """The dataset (embedded or by path), normalised; its hash must match."""
    if not isinstance(entry, dict):
        raise Unusable("dataset: expected an object")
    if "data" in entry:
        data = entry["data"]
    elif "path" in entry:
        try:
            data = json.loads((base / field(entry, "path", str, "dataset")).read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise Unusable(f"dataset.path: cannot read the bound dataset ({exc})") from exc
    else:
        raise Unusable("dataset: neither embedded data nor a path")
    if field(data, "format", str, "dataset") != DATASET_FORMAT:
        raise Unusable(f"dataset.format: expected {DATASET_FORMAT}")
    task, inputs = field(data, "task", str, "dataset"), field(data, "inputs", str, "dataset")
    seqs, labels = field(data, "sequences", list, "dataset"), field(data, "labels", list, "dataset")
    norm = {"format": DATASET_FORMAT, "task": task, "inputs": inputs, "labels": labels}
    if inputs == "token-ids":
        norm["vocab_size"] = field(data, "vocab_size", int, "dataset")
        norm["sequences"] = seqs
        toks = seqs
    elif inputs == "vectors":
        toks = [[tuple(rational(x, f"dataset.sequences[{i}]") for x in t) for t in s]
                for i, s in enumerate(seqs)]
        norm["sequences"] = [[[_fmt(x) for x in t] for t in s] for s in toks]
        norm["dim"] = data.get("dim", len(toks[0][0]) if toks and toks[0] else 0)
    else:
        raise Unusable(f"dataset.inputs: unknown kind {inputs!r}")
    digest = hashlib.sha256(canonical(norm).encode()).hexdigest()
    return task, inputs, toks, labels, digest


def initial(net, toks, first):
    """Distinct input columns and the index of every position."""
    table: dict = {}
    cols: list = []
    index: list = []
    if net["kind"] == "token-ids":
        rows, den = first["table"]
        cols = list(zip(*rows))
        for i, s in enumerate(toks):
            if not isinstance(s, list) or any(type(t) is not int or not 0 <= t < net["dim"]
                                              for t in s):
                raise Unusable(f"dataset.sequences[{i}]: token ids must be in [0, {net['dim']})")
            index.append(list(s))
        return cols, den, index
    den = 1
    for s in toks:
        for t in s:
            for x in t:
                den = den * x.denominator // forward.gcd(den, x.denominator)
    for i, s in enumerate(toks):
        row = []
        for t in s:
            if len(t) != net["dim"]:
                raise Unusable(f"dataset.sequences[{i}]: tokens must have {net['dim']} entries")
            j = table.get(t)
            if j is None:
                j = table[t] = len(cols)
                cols.append(tuple(x.numerator * (den // x.denominator) for x in t))
            row.append(j)
        index.append(row)
    return cols, den, index


def run(net, layers, read, toks):
    """Exact outputs ``[sequence][read position] -> tuple of Fractions``."""
    start = 1 if net["kind"] == "token-ids" else 0
    cols, den, index = initial(net, toks, layers[0] if layers else None)
    need, needs = read, [None] * len(layers)
    for i in range(len(layers) - 1, -1, -1):
        needs[i] = need
        if layers[i]["type"] == "attention":
            need = list(range(net["n"]))
    for i in range(start, len(layers)):
        la = layers[i]
        if la["type"] == "feedforward":
            cols, den = forward.feedforward(la, cols, den)
        else:
            cols, den, index = forward.attention(la, cols, den, index, needs[i])
    return [[tuple(Fraction(x, den) for x in cols[seq[p]]) for p in read] for seq in index]


def sizes(net, layers):
    """Recompute the size figures (definitions in docs/certificate-format.md)."""
    mats = []
    depth, width = 0, net["dim"] if net["kind"] == "vectors" else 1
    for la in layers:
        if la["type"] == "embedding":
            mats.append(la["table"])
            depth += 1
            width = max(width, len(la["table"][0]))
        elif la["type"] == "feedforward":
            for (w, b), biased in zip(la["maps"], la["bias_present"]):
                mats.append(w)
                if biased:
                    mats.append(b)
                width = max(width, len(w[0]))
            depth += len(la["maps"])
        else:
            for h in la["heads"]:
                mats.extend((h["query"], h["key"], h["value"], h["output"]))
            depth += 1
            width = max(width, len(la["heads"][0]["value"][0][0]),
                        sum(len(h["value"][0]) for h in la["heads"]))
    bits = 0
    for rows, den in mats:
        for r in rows:
            for x in r:
                if x:
                    g = forward.gcd(x, den)
                    bits = max(bits, abs(x // g).bit_length(), (den // g).bit_length())
    return {"params_dense": sum(len(r) * len(r[0]) for r, _ in mats),
            "params_nonzero": sum(1 for r, _ in mats for row in r for x in row if x),
            "depth": depth, "width": width, "max_bits": bits}


def check_certificate(cert, base=Path(".")):
    """Check a decoded certificate; returns a :class:`CheckReport` with every failure."""
    failures = []
    try:
        if not isinstance(cert, dict) or cert.get("format") != FORMAT:
            raise Unusable(f"format: expected {FORMAT!r}")
        claimed = field(cert, "digest", str, "certificate")
        body = {k: v for k, v in cert.items() if k != "digest"}
        actual = "sha256:" + hashlib.sha256(canonical(body).encode()).hexdigest()
        if claimed != actual:
            failures.append(f"digest: the certificate's content does not match its digest "
                            f"(claimed {claimed}, content hashes to {actual})")
        task, _inputs, toks, labels, ds_hash = dataset(cert.get("dataset"), base)
        if ds_hash != field(cert["dataset"], "sha256", str, "dataset"):
            failures.append("dataset: its SHA-256 does not match the one bound in the certificate")
        net, layers, readout = network(field(cert, "network", dict, "certificate"))
        claims = field(field(cert, "claims", dict, "certificate"), "outputs", list, "claims")
        if len(claims) != len(toks) or len(labels) != len(toks):
            raise Unusable("claims/labels: one entry per sequence expected")
        if any(len(s) != net["n"] for s in toks):
            raise Unusable(f"dataset.sequences: every sequence must have n = {net['n']} tokens")
        if len(readout["positions"]) != (1 if task == "next-token" else net["n"]):
            raise Unusable(f"network.readout: its positions do not fit the {task} task")
        if softmax_interval.needed(layers):  # irrational softmax: rigorous interval check
            failures += softmax_interval.check(cert.get("hints"), net, layers, readout, task,
                                               labels, claims, initial(net, toks, layers[0]))
            outs = []
        else:
            outs = run(net, layers, readout["positions"], toks)
    except Unusable as exc:
        return CheckReport([*failures, str(exc)], unusable=True)
    for i, (row, claim, lab) in enumerate(zip(outs, claims, labels)):
        labs = [lab] if task == "next-token" else lab
        if not isinstance(labs, list) or len(labs) != len(row) or not isinstance(claim, list) \
                or len(claim) != len(row):
            failures.append(f"sequence {i}: labels/claims do not match the read positions")
            continue
        for p, vec, y, c in zip(readout["positions"], row, labs, claim):
            where = f"sequence {i}, position {p}, readout"
            if readout["kind"] == "scalar":
                got = _fmt(vec[0])
                if vec[0] != y:
                    failures.append(f"{where}: output {got} != label {y}")
            else:
                best = max(vec)
                wins = [k for k, v in enumerate(vec) if v == best]
                got = str(wins[0]) if len(wins) == 1 else None
                if len(wins) > 1:
                    failures.append(f"{where}: tie between classes {wins} (label {y})")
                elif wins[0] != y:
                    failures.append(f"{where}: argmax class {wins[0]} != label {y}")
            if c != got:
                failures.append(f"{where}: claimed output {c!r} but the network gives {got!r}")
    if cert.get("sizes") != sizes(net, layers):
        failures.append(f"sizes: claimed {cert.get('sizes')}, recomputed {sizes(net, layers)}")
    return CheckReport(failures)


def check_file(path):
    """Read and check a certificate file; unreadable input gives an ``unusable`` report."""
    p = Path(path)
    try:
        cert = json.loads(p.read_text())
    except OSError as exc:
        return CheckReport([f"{p}: cannot read ({exc.strerror})"], unusable=True)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        return CheckReport([f"{p}: not valid JSON ({exc})"], unusable=True)
    return check_certificate(cert, p.parent)
