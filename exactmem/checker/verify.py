"""Top level of the checker: replay a certificate and report every failure it finds.

Checked: the strict grammar (parse.py); the self-digest; the dataset and its SHA-256; the
network's shapes and kinds and their fit to the dataset; the output of every read position
of every sequence, exactly (or with rigorous softmax bounds, softmax_check.py), which must
recover the label and equal the certificate's claim; the size figures.  The checker, not
the producer, states what was proved (:attr:`CheckReport.claim`).  Not checked: the
construction's name and parameters, theorem bounds.
"""

import hashlib
from collections.abc import Callable, Sequence
from fractions import Fraction
from math import gcd
from pathlib import Path
from typing import Any

from . import floatexact
from . import passes as exact
from . import softmax_check as softmax_interval
from .cert_dataset import canonical, dataset, initial
from .net_claims import Basis, network_report
from .parse import BIASES, Layer, Matrix, integer, network, obj, ratio, show
from .passes import Outputs, Progress, Ticker, exact_outputs, run, work_units
from .strict_json import JsonFloat, read_json
from .verdict import CheckReport, Unusable

FORMAT = "exactmem.certificate/1"
TOP = ("format", "construction", "dataset", "network", "claims", "sizes", "hints", "digest")
SIZES = ("params_dense", "params_nonzero", "depth", "width", "max_bits")
LM_FORMAT = "exactmem.lm-certificate/1"
__all__ = ["CHECKERS", "Progress", "check_certificate", "check_file", "check_network", "run",
           "sizes"]


def _no_floats(value: Any, where: str) -> None:
    stack: list[tuple[Any, str]] = [(value, where)]
    while stack:
        v, w = stack.pop()
        if isinstance(v, JsonFloat):
            raise Unusable(f"{w}: the JSON float {v.text}; numbers are integers or 'p/q' strings")
        if type(v) is dict:
            stack += [(x, f"{w}.{k}") for k, x in v.items()]
        elif type(v) is list:
            stack += [(x, f"{w}[{i}]") for i, x in enumerate(v)]


def sizes(net: dict[str, Any], layers: Sequence[Layer]) -> dict[str, int]:
    """Recompute the size figures (definitions in docs/certificate-format.md)."""
    mats: list[Matrix] = []
    depth, width = 0, net["dim"] if net["kind"] == "vectors" else 1
    for la in layers:
        if la["type"] == "embedding":
            mats.append(la["table"])
            if la["positions"] is not None:
                mats.append(la["positions"])
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
                mats.extend(h[b] for b in BIASES if h[b] is not None)
            depth += 1
            width = max(width, len(la["heads"][0]["value"][0][0]),
                        sum(len(h["value"][0]) for h in la["heads"]))
    bits = 0
    for rows, den in mats:
        for r in rows:
            for x in r:
                if x:
                    g = gcd(x, den)
                    bits = max(bits, abs(x // g).bit_length(), (den // g).bit_length())
    return {"params_dense": sum(len(r) * len(r[0]) for r, _ in mats),
            "params_nonzero": sum(1 for r, _ in mats for row in r for x in row if x),
            "depth": depth, "width": width, "max_bits": bits}


def _claimed(value: Any, count: int) -> list[int]:
    """``claims.sequences`` (optional): the indices of the sequences claimed, strictly
    increasing; all sequences when absent."""
    ids: list[int] = value.get("sequences", list(range(count))) if type(value) is dict else []
    if type(ids) is not list or not ids:
        raise Unusable("claims.sequences: a non-empty list of sequence indices")
    for j, i in enumerate(ids):
        integer(i, f"claims.sequences[{j}]", 0, count - 1)
        if j and i <= ids[j - 1]:
            raise Unusable("claims.sequences: indices must be strictly increasing")
    return ids


def _claims(value: Any, count: int, readout: dict[str, Any]
            ) -> tuple[list[list[Any]], list[str]]:
    """``claims.outputs``: per claimed sequence one CLAIM per read position (docs: grammar),
    and the float formats claimed exact (``claims.float_exact``, optional)."""
    obj(value, "claims", ("outputs",), ("float_exact", "sequences"))
    formats: list[str] = value.get("float_exact", [])
    if type(formats) is not list or not formats and "float_exact" in value or any(
            f not in floatexact.CLAIMS for f in formats) or len(set(formats)) < len(formats):
        raise Unusable(f"claims.float_exact: a non-empty list of distinct formats among "
                       f"{sorted(floatexact.CLAIMS)}")
    claims: list[list[Any]] = value["outputs"]
    if type(claims) is not list or len(claims) != count:
        raise Unusable(f"claims.outputs: expected a list of {count} lists")
    valid: set[str] = set()  # claim texts read already (the same text is valid everywhere)
    for i, row in enumerate(claims):
        if type(row) is not list or len(row) != len(readout["positions"]):
            raise Unusable(f"claims.outputs[{i}]: one claim per read position expected")
        for k, c in enumerate(row):
            if type(c) is str and c in valid:
                continue
            w = f"claims.outputs[{i}][{k}]"
            if readout["kind"] == "scalar":
                ratio(c, w)
            elif c is not None and (ratio(c, w)[1] != 1 or c.startswith("-")):
                raise Unusable(f"{w}: an argmax claim is a class index string or null")
            if type(c) is str:
                valid.add(c)
    return claims, formats


def _exact_readout(outs: Outputs, claims: Sequence[Sequence[Any]], labels: Sequence[Any],
                   task: str, readout: dict[str, Any], failures: list[str], ids: Sequence[int]
                   ) -> None:
    scalar = readout["kind"] == "scalar"
    claimed: dict[str, Fraction] = {}  # each claim text read once
    for i, row, claim, lab in zip(ids, outs, claims, labels):
        labs = [lab] if task == "next-token" else lab
        for p, vec, y, c in zip(readout["positions"], row, labs, claim):
            if scalar:
                got = vec[0]
                want = claimed.get(c)
                if want is None:
                    want = claimed[c] = Fraction(*ratio(c, "claim"))
                if got != y:
                    failures.append(f"sequence {i}, position {p}, readout: output {show(got)} "
                                    f"!= label {y}")
                if want != got:
                    failures.append(f"sequence {i}, position {p}, readout: claimed output "
                                    f"{c!r} but the network gives {show(got)}")
                continue
            best = max(vec)
            wins = [k for k, v in enumerate(vec) if v == best]
            won = str(wins[0]) if len(wins) == 1 else None
            if len(wins) == 1 and wins[0] == y and c == won:
                continue
            where = f"sequence {i}, position {p}, readout"
            if len(wins) > 1:
                failures.append(f"{where}: tie between classes {wins[:8]} (label {y})")
            elif wins[0] != y:
                failures.append(f"{where}: argmax class {wins[0]} != label {y}")
            if c != won:
                failures.append(f"{where}: claimed output {c!r} but the network gives {won!r}")


def _check_lm(cert: dict[str, Any], base: Path, progress: Progress | None,
              shard: tuple[int, int], reference: bool = False,
              weights: Path | None = None) -> CheckReport:
    from .lm.lm_verify import check_report  # language models: docs/trained-models.md

    return check_report(cert, base, progress, shard, weights, reference=reference)


def check_certificate(cert: Any, base: Path = Path("."), progress: Progress | None = None,
                      shard: tuple[int, int] = (0, 1),
                      weights: Path | str | None = None, *, reference: bool = False
                      ) -> CheckReport:
    """Check a decoded certificate with the checker of its format (:data:`CHECKERS`);
    returns a :class:`CheckReport` with every failure.

    ``progress(stage, done, total)``, if given, is called as the forward pass advances.
    ``shard = (k, K)`` evaluates only the k-th of K equal slices of the sequences (every
    other check is made in full); :func:`sharded.combine` joins the K reports into one.
    ``weights``: a language model's bound weights file, read instead of the one beside it.
    ``reference``: the standard-library path only (docs/checker.md, "Fast path").
    """
    fmt = cert.get("format") if type(cert) is dict else None
    if weights is not None:
        if fmt != LM_FORMAT:
            return network_report(["--weights: only a language-model certificate binds a "
                                   "weights file"], unusable=True)
        return _check_lm(cert, base, progress, shard, reference, Path(weights))
    checker = CHECKERS.get(fmt) if type(fmt) is str else None
    if checker is None:
        return network_report([f"format: expected {FORMAT!r}"], unusable=True)
    return checker(cert, base, progress, shard, reference)


def check_network(cert: dict[str, Any], base: Path = Path("."),
                  progress: Progress | None = None,
                  shard: tuple[int, int] = (0, 1), reference: bool = False) -> CheckReport:
    """Check a decoded ``exactmem.certificate/1`` (:func:`check_certificate`; one path,
    whatever ``reference`` says)."""
    failures: list[str] = []
    basis: Basis
    try:
        if type(cert) is not dict or cert.get("format") != FORMAT:
            raise Unusable(f"format: expected {FORMAT!r}")
        obj(cert, "certificate", TOP)
        con = obj(cert["construction"], "construction", ("name", "params"))
        if type(con["name"]) is not str or type(con["params"]) is not dict:
            raise Unusable("construction: a name string and a params object")
        _no_floats(con["params"], "construction.params")  # the one untyped part
        hints = obj(cert["hints"], "hints", (), ("softmax",))
        for key in obj(cert["sizes"], "sizes", SIZES):
            integer(cert["sizes"][key], f"sizes.{key}", 0)
        if type(cert["digest"]) is not str:
            raise Unusable("digest: expected a 'sha256:...' string")
        task, inputs, toks, labels, dsize, ds_hash = dataset(cert["dataset"], base)
        if ds_hash != cert["dataset"]["sha256"]:
            failures.append("dataset: its SHA-256 does not match the one bound in the certificate")
        net, layers, readout = network(cert["network"])
        if (inputs, dsize, len(toks[0])) != (net["kind"], net["dim"], net["n"]):
            raise Unusable(f"network.input: {net['kind']}, dim {net['dim']}, seq_len {net['n']} "
                           f"does not fit the dataset ({inputs}, {dsize}, n = {len(toks[0])})")
        if (task == "seq2seq") != (readout["name"] == "every"):
            raise Unusable(f"network.readout.positions: {readout['name']!r} does not fit the "
                           f"{task} task (next-token: last or first; seq2seq: every)")
        chosen = _claimed(cert["claims"], len(toks))
        claims, formats = _claims(cert["claims"], len(chosen), readout)
        body = {k: v for k, v in cert.items() if k != "digest"}  # typed fields read above
        actual = "sha256:" + hashlib.sha256(canonical(body).encode()).hexdigest()
        if cert["digest"] != actual:
            failures.insert(0, f"digest: the certificate's content does not match its digest "
                               f"(claimed {cert['digest'][:80]}, content hashes to {actual})")
        k, count = shard
        lo, hi = k * len(chosen) // count, (k + 1) * len(chosen) // count
        soft = hints.get("softmax")
        if type(soft) is dict and "readout" in soft:  # one matrix over all sequences
            lo, hi = (0, len(chosen)) if k == 0 else (0, 0)
        ids = chosen[lo:hi]
        part = ([toks[i] for i in ids], [labels[i] for i in ids], claims[lo:hi])
        soft_scores = softmax_interval.needed(layers)
        slices = 1 if soft_scores or not formats else max(1, -(-(hi - lo) // exact.CHUNK))
        tick = Ticker(progress, "forward", work_units(layers, hi - lo, slices))
        if soft_scores:  # irrational softmax: rigorous interval check
            bad, bits, eps, exists = softmax_interval.check(
                hints, net, layers, readout, task, part[1], part[2],
                initial(net, part[0], layers), tick, ids) if hi > lo else ([], 0, Fraction(0), None)
            gap = softmax_interval.label_gap(labels, task)  # of the whole dataset
            if readout["kind"] == "scalar" and exists is False and not eps < Fraction(gap, 2):
                failures.append(f"hints.softmax.epsilon: {show(eps)} is not below half the "
                                f"smallest gap between distinct labels ({gap}/2): "
                                "|f - y| <= epsilon would not identify the labels")
            failures += bad
            if formats:
                failures.append("claims.float_exact: softmax scores are not float-exact")
            basis = (readout["kind"], False, eps, gap, bits, (), exists, len(toks))
        else:
            if hints:
                raise Unusable("hints.softmax: only for networks with softmax scores")
            outs = exact_outputs(net, layers, readout["positions"], part[0], formats, tick,
                                 failures)
            _exact_readout(outs, part[2], part[1], task, readout, failures, ids)
            basis = (readout["kind"], True, None, None, None, tuple(formats), False, len(toks))
        recomputed = sizes(net, layers)
        if cert["sizes"] != recomputed:
            failures.append(f"sizes: claimed {cert['sizes']}, recomputed {recomputed}")
    except Unusable as exc:
        return network_report([*failures, str(exc)], unusable=True)
    return network_report(failures, basis=basis, positions=(hi - lo) * len(readout["positions"]),
                       sequences=hi - lo)


CHECKERS: dict[str, Callable[[dict[str, Any], Path, Progress | None, tuple[int, int], bool],
                             CheckReport]] = {FORMAT: check_network, LM_FORMAT: _check_lm}
# certificate format -> its checker


def check_file(path: Path | str, progress: Progress | None = None,
               shard: tuple[int, int] = (0, 1),
               weights: Path | str | None = None, *, reference: bool = False) -> CheckReport:
    """Read and check a certificate file; unreadable input gives an ``unusable`` report
    (``weights``, ``reference``: :func:`check_certificate`)."""
    p = Path(path)
    try:
        cert = read_json(p)
    except Unusable as exc:
        return network_report([str(exc)], unusable=True)
    return check_certificate(cert, p.parent, progress, shard, weights, reference=reference)
