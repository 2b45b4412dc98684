"""``check-search`` on an ``--all-labelings`` run (standard library only;
docs/proof-checker.md).

``exactmem search --all-labelings --bits B --results R.jsonl`` answers, for each swept
shape, every labelling of a set of input sequences (one representative per symmetry
class); its results store ``R.jsonl`` holds a header (the sequences, vocabulary, number of
labels, ties, bits) and one record per answered query.  :func:`check_store` checks every
record on the dataset it names (the header's sequences with the record's labels, hashed
as the search hashes it): a ``found`` record's network (B-bit integer weights, the
record's shape) is run by the checker's own exact forward pass and must give every label
as the unique argmax (or the scalar output); an ``infeasible`` record's CNF is re-derived
and its LRAT proof checked, as in :mod:`.search_check`.  One verdict for the store.

What the records establish, per shape, is then stated by the checker: a refuted
labelling means the shape does not shatter the sequences; "shatters" needs every one of
the ``classes ** N`` labellings found, directly or as the image of a found one under a
symmetry the checker verifies itself -- a token permutation mapping the sequences (a
multiset of all but the last token, and the last token) onto themselves, and for an
argmax readout a permutation of its rows, both applied only to networks whose output
provably depends on nothing else (an embedding without positions, every attention layer
over all positions and not causal, the readout at the last position).

:func:`check_labelings_answer` checks the ``--json`` answer of such a run: its store, and
that each shape's ``shatters``, the summary and the texts follow from it.
"""

from __future__ import annotations

import hashlib
from itertools import permutations
from pathlib import Path
from typing import Any

from ..cert_dataset import canonical
from ..parse import integer, network, obj
from ..strict_json import loads
from ..verdict import CheckReport, Unusable
from .search_claims import Failed, Family, label, shape, statement, summary
from .search_sizes import MAX_BITS, MAX_SEQUENCES, Sizes, search_report

STORE_FORMAT = "exactmem.search-results/1"
MAX_LABELLINGS = 1 << 24  # classes ** N (the search's cap)
MAX_PERMUTED_TOKENS = 8  # token permutations tried for symmetries: at most 8! of them
MAX_STORE_BYTES = 1 << 30


def _dataset(seqs: list[list[int]], vocab: int, labels: list[int]) -> dict[str, Any]:
    return {"format": "exactmem.dataset/1", "task": "next-token", "inputs": "token-ids",
            "vocab_size": vocab, "sequences": seqs, "labels": labels}


def read_store(path: Path) -> tuple[dict[str, Any], list[Any]]:
    """The header and the records of a results store (strict JSON, one value a line)."""
    try:
        size = path.stat().st_size
        if size > MAX_STORE_BYTES:
            raise Unusable(f"{path}: {size} bytes exceeds the limit of {MAX_STORE_BYTES}")
        text = path.read_bytes().decode("utf-8")
    except OSError as exc:
        raise Unusable(f"{path}: cannot read ({exc.strerror or exc})") from None
    except UnicodeDecodeError:
        raise Unusable(f"{path}: not UTF-8 text") from None
    lines = text.splitlines()
    values = []
    for k, line in enumerate(lines):
        try:
            values.append(loads(line))
        except Unusable as exc:
            raise Unusable(f"{path}: line {k + 1}: {exc}") from None
    if not values or type(values[0]) is not dict or values[0].get("format") != STORE_FORMAT:
        raise Unusable(f"{path}: line 1: expected the header of an {STORE_FORMAT!r} store")
    return obj(values[0], "store header", ("format", "header"))["header"], values[1:]


class _Shape:
    """What one shape's records establish; ``covered``: one byte per labelling (its
    labels as a base-``classes`` number), set when a found network answers it."""

    def __init__(self, total: int) -> None:
        self.found: set[tuple[int, ...]] = set()
        self.covered = bytearray(total)
        self.count = 0  # labellings covered
        self.refuted: list[tuple[int, ...]] = []
        self.unknown = 0
        self.params: set[int] = set()
        self.last: dict[tuple[int, ...], str] = {}  # labelling -> its last record's status

    def classes(self) -> dict[str, int]:
        """Labelling classes per status, each by its last record (as the search counts)."""
        out = {"found": 0, "infeasible": 0, "unknown": 0}
        for status in self.last.values():
            out[status] += 1
        return out


class Store:
    """A results store under check; ``report`` collects failures and counts."""

    def __init__(self, header: Any, base: Path, report: CheckReport) -> None:
        h = obj(header, "header", ("sequences", "vocab", "classes", "ties"), ("bits", "bound"))
        if "bits" not in h:
            raise Unusable("header.bits: missing (a store of real weights is the solvers' "
                           "word; check-search reads bit-bounded stores)")
        self.bits = integer(h["bits"], "header.bits", 1, MAX_BITS)
        self.vocab = integer(h["vocab"], "header.vocab", 1, 64)
        self.classes = integer(h["classes"], "header.classes", 2, 8)
        if h["ties"] != "split":
            raise Failed(f"header.ties: {h['ties']!r}; the checked semantics split hardmax "
                         "ties over the tied keys ('split')")
        seqs = h["sequences"]
        if type(seqs) is not list or not 0 < len(seqs) <= MAX_SEQUENCES:
            raise Unusable(f"header.sequences: expected 1 to {MAX_SEQUENCES} sequences")
        for k, s in enumerate(seqs):
            if type(s) is not list or not s or len(s) != len(seqs[0]):
                raise Unusable(f"header.sequences[{k}]: sequences of one length")
            for t in s:
                integer(t, f"header.sequences[{k}]", 0, self.vocab - 1)
        if self.classes ** len(seqs) > MAX_LABELLINGS:
            raise Unusable(f"header: {self.classes}^{len(seqs)} labellings, more than "
                           f"{MAX_LABELLINGS}")
        self.seqs, self.base, self.report = seqs, base, report
        self.shapes: dict[str, _Shape] = {}
        self.symmetries = _token_symmetries(seqs)

    def record(self, rec: Any, where: str) -> None:
        if type(rec) is not dict:
            raise Unusable(f"{where}: expected an object")
        labels = rec.get("labels")
        if type(labels) is not list or len(labels) != len(self.seqs):
            raise Unusable(f"{where}.labels: expected {len(self.seqs)} labels")
        for y in labels:
            integer(y, f"{where}.labels", 0, self.classes - 1)
        sh = shape(rec.get("shape"), f"{where}.shape")
        key = f"{label(sh, True)} {sh['readout']}|{','.join(map(str, labels))}"
        if rec.get("key") != key:
            raise Failed(f"{where}.key: {rec.get('key')!r} does not name the record's shape "
                         f"and labels ({key!r})")
        data = _dataset(self.seqs, self.vocab, labels)
        digest = hashlib.sha256(canonical(data).encode()).hexdigest()
        sizes = Sizes("token-ids", self.vocab, tuple(tuple(s) for s in self.seqs),
                      tuple(labels), digest, self.bits, self.base, self.report)
        status = sizes.entry(rec, where)
        name = f"{label(sh, True)} {sh['readout']}"
        one = self.shapes.get(name) or self.shapes.setdefault(
            name, _Shape(self.classes ** len(self.seqs)))
        one.params.add(rec["params"])
        one.last[tuple(labels)] = status
        if status == "found":
            one.found.add(tuple(labels))
            net, layers, readout = network(rec["network"])
            symmetric = layers[0]["positions"] is None and readout["name"] == "last" and \
                all(not la["causal"] and la["keys"] is None for la in layers
                    if la["type"] == "attention")
            rows = net["out_dim"] if readout["kind"] == "argmax" and symmetric else 0
            self.cover(one, tuple(labels), symmetric, rows)
        elif status == "infeasible":
            one.refuted.append(tuple(labels))
        else:
            one.unknown += 1
            self.report.counts["unknown"] += 1

    def cover(self, one: _Shape, labels: tuple[int, ...], symmetric: bool, rows: int) -> None:
        """Mark the labellings a found network answers: its own, and with a symmetric
        network its images under the token symmetries and the permutations of its
        ``rows`` readout rows (labels beyond them stay)."""
        images = self.symmetries if symmetric else [list(range(len(labels)))]
        perms = [tuple(range(self.classes))]
        if rows:
            perms = [(*p, *range(rows, self.classes)) for p in permutations(range(rows))]
        weights = [self.classes ** (len(labels) - 1 - i) for i in range(len(labels))]
        for image in images:
            for p in perms:
                code = sum(p[y] * weights[image[i]] for i, y in enumerate(labels))
                if not one.covered[code]:
                    one.covered[code] = 1
                    one.count += 1

    def conclusions(self) -> dict[str, bool | None]:
        """Per shape: ``True`` (shatters: every labelling covered), ``False`` (a
        labelling refuted) or ``None``; one line each in ``report.lines``."""
        total = self.classes ** len(self.seqs)
        out: dict[str, bool | None] = {}
        for name, one in self.shapes.items():
            counts = (f"{len(one.found)} labellings found ({one.count} of {total} "
                      f"with their symmetric images), {len(one.refuted)} refuted, "
                      f"{one.unknown} unknown")
            if one.refuted:
                out[name] = False
                text = (f"does not shatter the {len(self.seqs)} sequences (labelling "
                        f"{','.join(map(str, one.refuted[0]))} refuted)")
            elif one.count == total:
                out[name] = True
                text = f"shatters the {len(self.seqs)} sequences"
            else:
                out[name] = None
                text = "open"
            self.report.lines.append(f"{name}: {text}; {counts}")
        return out


def _token_symmetries(seqs: list[list[int]]) -> list[list[int]]:
    """The maps ``i -> image[i]`` of sequence indices induced by the token permutations
    that map the sequences (multiset of all but the last token, last token) onto
    themselves; only the identity past :data:`MAX_PERMUTED_TOKENS` tokens."""
    def key(s: list[int]) -> tuple[tuple[int, ...], int]:
        return tuple(sorted(s[:-1])), s[-1]

    index = {key(s): i for i, s in enumerate(seqs)}
    ident = list(range(len(seqs)))
    tokens = sorted({t for s in seqs for t in s})
    if len(index) != len(seqs) or len(tokens) > MAX_PERMUTED_TOKENS:
        return [ident]
    out = []
    for perm in permutations(tokens):
        pi = dict(zip(tokens, perm, strict=True))
        image = [index.get(key([pi[t] for t in s]), -1) for s in seqs]
        if -1 not in image:
            out.append(image)
    return out


def _checked_store(header: Any, records: list[Any], base: Path, report: CheckReport
                   ) -> Store:
    """The store with every record checked; failures go to ``report``."""
    store = Store(header, base, report)
    for k, rec in enumerate(records):
        try:
            store.record(rec, f"record {k + 1}")
        except Failed as exc:
            for x in exc.args:
                report.reject(str(x))
        except Unusable as exc:
            report.refuse(str(exc))
    return store


def check_store_records(header: Any, records: list[Any], base: Path, report: CheckReport
                        ) -> dict[str, bool | None]:
    return _checked_store(header, records, base, report).conclusions()


def _guarded(report: CheckReport, work: Any) -> CheckReport:
    try:
        work()
    except Failed as exc:
        for x in exc.args:
            report.reject(str(x))
    except (Unusable, MemoryError, RecursionError) as exc:
        report.refuse(str(exc) or type(exc).__name__)
    except Exception as exc:  # noqa: BLE001 - never a traceback, never a verified answer
        report.refuse(f"cannot be checked: {type(exc).__name__}: {exc}")
    return report


def is_store(path: str) -> bool:
    """Does the file open with a results store's header line?"""
    try:
        with open(path, "rb") as fh:
            first = fh.read(1 << 16).split(b"\n", 1)[0]
    except OSError:
        return False
    return STORE_FORMAT.encode() in first and not first.lstrip().startswith(b"[")


def check_store(path: Path, base: Path | None = None) -> CheckReport:
    """Check every record of a results store; files are relative to its folder (or
    ``base``)."""
    report = search_report()

    def work() -> None:
        header, records = read_store(path)
        check_store_records(header, records, path.parent if base is None else base, report)
    return _guarded(report, work)


def check_labelings_answer(answer: dict[str, Any], base: Path) -> CheckReport:
    """Check an ``--all-labelings`` answer: its store (``results``, relative to ``base``),
    and that its header, each size's ``shatters``, the summary and the texts follow."""
    report = search_report()

    def work() -> None:
        for key in ("bits", "sizes", "sequences", "vocab", "classes", "results", "status",
                    "minimal", "proved_minimal"):
            if key not in answer:
                raise Unusable(f"answer.{key}: missing")
        if type(answer["results"]) is not str:
            raise Unusable("answer.results: expected the store's file name")
        header, records = read_store(base / answer["results"])
        if type(header) is dict:
            for field in ("sequences", "vocab", "classes", "bits"):
                if answer[field] != header.get(field):
                    raise Failed(f"{field}: the answer and its store's header differ")
        store = _checked_store(header, records, base, report)
        found = store.conclusions()
        if report.failures:
            return
        sizes = answer["sizes"]
        if type(sizes) is not list:
            raise Unusable("sizes: expected a list")
        # the sizes' parameter counts are those of the search's probe (two readout rows)
        fam = Family(integer(answer["vocab"], "vocab", 1, 64), 2)
        done = []
        words = {True: "shatters", False: "does not shatter", None: "is open"}
        for k, e in enumerate(sizes):
            if type(e) is not dict or any(x not in e for x in ("shape", "shatters", "status")):
                raise Unusable(f"sizes[{k}]: expected an object with shape, shatters, status")
            sh = shape(e["shape"], f"sizes[{k}].shape")
            name = f"{label(sh, True)} {sh['readout']}"
            said = e["shatters"]
            if said not in (True, False, None) or type(said) is int:
                raise Unusable(f"sizes[{k}].shatters: expected true, false or null")
            if said is not None and said is not found.get(name):
                raise Failed(f"sizes[{k}]: {name} {words[said]}, says the answer; by the "
                             f"store it {words[found.get(name)]}")
            status = {True: "found", False: "infeasible", None: "unknown"}[said]
            if e["status"] != status:
                raise Failed(f"sizes[{k}].status: {e['status']!r} with shatters {said}")
            if said is not None and e.get("params") != fam.params(sh):
                raise Failed(f"sizes[{k}].params: {e.get('params')!r}, but the shape has "
                             f"{fam.params(sh)} parameters")
            one = store.shapes.get(name)
            counts = one.classes() if one is not None else {}
            stated = e.get("classes")
            if type(stated) is not dict or any(stated.get(x, 0) != counts.get(x, 0)
                                               for x in ("found", "infeasible", "unknown")):
                raise Failed(f"sizes[{k}].classes: {stated!r}, but the store answers "
                             f"{counts or 'no labelling'} for {name}")
            done.append((e, status))
        summary(answer, done, fam, answer["bits"])
        report.claim = statement(answer, answer["bits"]).replace(
            "status found: ", f"status found: shatters the {len(answer['sequences'])} "
            "sequences with ", 1)
    return _guarded(report, work)


__all__ = ["STORE_FORMAT", "check_labelings_answer", "check_store", "read_store"]
