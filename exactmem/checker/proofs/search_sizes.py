"""One size of a bit-bounded search question, checked (standard library only;
docs/proof-checker.md): ``found`` (a certificate, or a bare network run by the checker's
forward pass, with the size's shape and B-bit weights), ``infeasible`` (the CNF re-derived
and its LRAT proof checked, or label consistency) or ``unknown``.  Used by
:mod:`.search_check` (an answer's sizes) and :mod:`.search_store` (a store's records)."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from ..parse import choice, integer, network, obj, ratio
from ..passes import run
from ..strict_json import read_json
from ..verdict import CheckReport, Unusable
from ..verify import check_certificate
from .lrat import check_lrat_files
from .search_circuit import VariableLimit
from .search_claims import Failed, Family, nests_in, shape
from .search_encode import ENCODER, Question, encode

MAX_BITS = 8
MAX_SEQUENCES = 4096
MAX_SIZES = 100_000


def search_report() -> CheckReport:
    """An empty report of a search answer: a claim that fails rejects the answer whatever
    else is unusable; the counts of what was checked."""
    report = CheckReport(counts={"found": 0, "lrat": 0, "nested": 0, "label-consistency": 0,
                                 "unknown": 0})
    report.rejected_first = True
    return report


def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    try:
        with open(path, "rb") as fh:
            while chunk := fh.read(1 << 20):
                h.update(chunk)
    except OSError as exc:
        raise Unusable(f"{path}: cannot read ({exc.strerror})") from None
    return h.hexdigest()


def _bound_file(entry: dict[str, Any], key: str, where: str, base: Path) -> Path:
    """The file ``entry[key]`` (relative to the answer's folder); its SHA-256 must be
    ``entry[key + '_sha256']``."""
    name, digest = entry.get(key), entry.get(f"{key}_sha256")
    if type(name) is not str or not name:
        raise Unusable(f"{where}.{key}: expected a file name")
    if type(digest) is not str:
        raise Unusable(f"{where}.{key}_sha256: missing (the file is not bound to the answer)")
    path = base / name
    if not path.is_file():
        raise Unusable(f"{where}.{key}: {name}: no such regular file")
    if _sha256_file(path) != digest:
        raise Failed(f"{where}.{key}: {name} does not match its SHA-256")
    return path


class Sizes(Family):
    """The sizes of one question: a labelled next-token dataset (``seqs``, ``labels``,
    its vocabulary or dimension ``size`` and SHA-256) and B-bit weights; files are read
    relative to ``base``."""

    def __init__(self, inputs: str, size: int, seqs: tuple[Any, ...], labels: tuple[int, ...],
                 sha256: str, bits: int, base: Path, report: CheckReport) -> None:
        super().__init__(size, max(2, max(labels) + 1))
        self.inputs, self.seqs, self.labels, self.sha256 = inputs, seqs, labels, sha256
        self.bits, self.base, self.report = bits, base, report
        self.refuted: dict[str, bool] = {}  # CNF path -> refutation checked

    def entry(self, e: Any, where: str) -> str:
        """Check one size; returns its status (raises on a failure)."""
        if type(e) is not dict:
            raise Unusable(f"{where}: expected an object")
        sh = shape(e.get("shape"), f"{where}.shape")
        status = choice(e.get("status"), ("found", "infeasible", "unknown"), f"{where}.status")
        params = integer(e.get("params"), f"{where}.params", 0)
        if params != self.params(sh):
            raise Failed(f"{where}.params: {params}, but the shape has {self.params(sh)} "
                         "parameters")
        if status == "found":
            self.found(e, sh, where)
        elif status == "infeasible":
            kind = e.get("proof_kind")
            if kind == "lrat":
                self.lrat(e, sh, where)
            elif kind == "label-consistency":
                self.consistency(where)
            else:
                raise Failed(f"{where}: proof kind {kind!r} is not a checkable proof")
        return status

    def consistency(self, where: str) -> None:
        seen: dict[tuple[Any, Any], set[int]] = {}
        for s, y in zip(self.seqs, self.labels, strict=True):
            seen.setdefault((tuple(sorted(s)), s[-1]), set()).add(y)
        if all(len(ys) == 1 for ys in seen.values()):
            raise Failed(f"{where}: no two sequences with the same multiset and last token "
                          "carry different labels")
        self.report.counts["label-consistency"] += 1

    def lrat(self, e: dict[str, Any], sh: dict[str, Any], where: str) -> None:
        big = sh
        if "nests_in" in e:
            big = shape(e["nests_in"], f"{where}.nests_in")
            if not nests_in(sh, big):
                raise Failed(f"{where}: the shape does not nest in its nests_in shape")
        opts = obj(e.get("question"), f"{where}.question",
                   ("encoder", "symmetry", "segments", "fixed_embed"))
        if opts["encoder"] != ENCODER:
            raise Unusable(f"{where}.question.encoder: expected {ENCODER!r}")
        if opts["fixed_embed"] is not None:
            raise Unusable(f"{where}.question.fixed_embed: not supported by check-search")
        if type(opts["symmetry"]) is not bool or type(opts["segments"]) is not bool:
            raise Unusable(f"{where}.question: symmetry and segments are true or false")
        cnf = _bound_file(e, "cnf", where, self.base)
        proof = _bound_file(e, "proof", where, self.base)
        key = f"{cnf.resolve()} {proof.resolve()} {sorted(big.items())} {sorted(opts.items())}"
        if key not in self.refuted:
            q = Question(self.inputs, self.size, self.seqs, self.labels, self.sha256,
                         big["layers"], big["heads"], big["d_model"], big["head_dim"],
                         big["ff_width"], big["residual"], big["readout"], self.bits,
                         opts["symmetry"], opts["segments"])
            have = cnf.read_bytes()
            try:  # the work is bounded by the file offered: no more variables than bytes
                want = encode(q, len(have)).encode("ascii")
            except VariableLimit:
                raise Failed(f"{where}.cnf: not the CNF of the question (that needs more "
                              f"variables than the file has bytes)") from None
            if have != want:
                line = next((k for k, (a, b) in enumerate(zip(have.splitlines(),
                                                              want.splitlines()), 1)
                             if a != b), min(len(have.splitlines()), len(want.splitlines())))
                raise Failed(f"{where}.cnf: not the CNF of the question (first difference "
                              f"at line {line})")
            rep = check_lrat_files(str(cnf), str(proof))
            if rep.verdict == "s UNUSABLE":
                raise Unusable(f"{where}.proof: " + "; ".join(rep.reasons))
            if rep.verdict != "s VERIFIED":
                raise Failed(f"{where}.proof: " + "; ".join(rep.reasons))
            self.refuted[key] = True
        self.report.counts["nested" if big is not sh else "lrat"] += 1

    def found(self, e: dict[str, Any], sh: dict[str, Any], where: str) -> None:
        if "network" in e and "certificate_data" not in e and "certificate" not in e:
            self.found_network(e["network"], sh, where)
            return
        if "certificate_data" in e:
            cert, cbase = e["certificate_data"], self.base
        else:
            path = _bound_file(e, "certificate", where, self.base)
            cert, cbase = read_json(path), path.parent
        rep = check_certificate(cert, cbase)
        if not rep.verified:
            raise Failed(f"{where}: the certificate does not verify: "
                          + "; ".join(rep.failures[:3]))
        if cert["dataset"]["sha256"] != self.sha256:
            raise Failed(f"{where}: the certificate is about another dataset")
        net = cert["network"]
        got = network_shape(net)
        if got != sh:
            raise Failed(f"{where}: the certificate's network has the shape {got}")
        if cert["sizes"]["params_dense"] != e["params"]:
            raise Failed(f"{where}: the certificate's network has "
                          f"{cert['sizes']['params_dense']} parameters")
        off = _off_grid(net["layers"], self.bits)
        if off is not None:
            raise Failed(f"{where}: the weight {off} is not a {self.bits}-bit integer")
        self.report.counts["found"] += 1


    def found_network(self, value: Any, sh: dict[str, Any], where: str) -> None:
        """A bare network (a results store's record): run by the checker's exact forward
        pass on this dataset, every label the unique argmax (or the scalar output)."""
        net, layers, readout = network(value)
        if (net["kind"], net["dim"], net["n"]) != (self.inputs, self.size, len(self.seqs[0])):
            raise Failed(f"{where}.network: its input does not fit the dataset")
        got = network_shape(value)
        if got != sh:
            raise Failed(f"{where}.network: the network has the shape {got}")
        if net["out_dim"] != self.out(sh):
            raise Failed(f"{where}.network: {net['out_dim']} readout rows, the shape's "
                         f"parameter count has {self.out(sh)}")
        off = _off_grid(value["layers"], self.bits)
        if off is not None:
            raise Failed(f"{where}: the weight {off} is not a {self.bits}-bit integer")
        outs = run(net, layers, readout["positions"], [list(s) for s in self.seqs])
        for i, (row, y) in enumerate(zip(outs, self.labels, strict=True)):
            for vec in row:
                wins = [k for k, v in enumerate(vec) if v == max(vec)]
                ok = vec[0] == y if readout["kind"] == "scalar" else wins == [y]
                if not ok:
                    raise Failed(f"{where}: the network does not give sequence {i} its "
                                 f"label {y}")
        self.report.counts["found"] += 1


def network_shape(net: dict[str, Any]) -> dict[str, Any] | None:
    """The shape of a verified certificate's network (``None`` if it is not one of the
    searched family)."""
    try:
        layers = net["layers"]
        att = [la for la in layers if la["type"] == "attention"]
        ffs = [la for la in layers if la["type"] == "feedforward"]
        heads = att[0]["heads"]
        res = {att[0]["residual"], *(la["residual"] for la in att + ffs)}
        if len(res) != 1 or any(la["kind"] != "hardmax" for la in att) or \
                len({len(la["heads"]) for la in att}) != 1:
            return None
        return {"layers": len(att), "heads": len(heads),
                "d_model": len(layers[0]["table"] if layers[0]["type"] == "embedding"
                               else layers[0]["weight"]),
                "head_dim": len(heads[0]["query"]),
                "ff_width": len(ffs[0]["maps"][0]["weight"]) if ffs else 0,
                "residual": res.pop(), "readout": net["readout"]["kind"]}
    except (KeyError, IndexError, TypeError):
        return None


def _off_grid(value: Any, bits: int) -> str | None:
    """A number in the layers' matrices that is not a ``bits``-bit integer, or ``None``."""
    if type(value) is dict:
        return next((x for v in value.values() if (x := _off_grid(v, bits)) is not None),
                    None)
    if type(value) is list:
        for v in value:
            if type(v) is str:
                p, q = ratio(v, "network")
                if q != 1 or not -(1 << (bits - 1)) <= p < 1 << (bits - 1):
                    return v
            elif (x := _off_grid(v, bits)) is not None:
                return x
    return None
