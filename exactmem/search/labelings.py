"""Exhaustive mode: every labelling of a set of input sequences (the shattering question).

For next-token datasets of token ids (no positional information, a free embedding table):

* the inputs are *consistency classes* -- a multiset of tokens plus the last token
  (Kajitsuka & Sato eq. 5); :func:`generate_inputs` draws ``N`` distinct ones;
* symmetry: relabelling the vocabulary permutes embedding columns and, for an argmax
  readout (or a scalar readout with two labels, ``y -> 1 - y``), permuting the labels
  permutes readout rows; so two labelled datasets whose graphs (sequence, token and label
  nodes) are isomorphic have the same answer.  :func:`labelling_classes` keeps one
  representative per isomorphism class (networkx: Weisfeiler-Lehman hash buckets, then
  exact isomorphism tests);
* results stream to a JSON-lines file, one line per answered query, flushed and synced
  as it arrives; a rerun reads the file and solves only what is missing, so ``Ctrl-C``
  (or a kill) loses nothing that was stored.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import random
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from itertools import combinations_with_replacement, permutations, product
from pathlib import Path
from typing import Any

from exactmem import progress
from exactmem.errors import DatasetError
from exactmem.model.dataset import Dataset
from exactmem.search import label_sweep
from exactmem.search.encoding import TieMode
from exactmem.search.executors import Executor
from exactmem.search.grid_pool import MAX_FRONTS as GRID_FRONTS
from exactmem.search.label_sweep import SWEEP_CONFLICTS
from exactmem.search.outcome import Found
from exactmem.search.query import query_worker
from exactmem.search.shape import Shape, nests_in
from exactmem.search.transfer import DEFAULT_POOL, cheap_test_applies
from exactmem.search.transfer import DEFAULT_TRANSFER_RLIMIT as TRANSFER_RLIMIT

RESULTS_FORMAT = "exactmem.search-results/1"
PROBES = 4  # --bits --first-failure: labellings asked to SAT before the grid walk
QUICK_FRONTS = 4096  # fronts of the short walk whose misses are probed
LATE_FRONTS = 16_384  # plane pools: fronts walked again for what SAT left unknown
PROBE_EMBEDDINGS = 4096  # probes of an exhaustive plane shape: embeddings walked first


def consistency_classes(n: int, vocab: int) -> list[tuple[int, ...]]:
    """One sequence per (multiset of ``n`` tokens, last token): sorted rest, then last."""
    out = []
    for ms in combinations_with_replacement(range(vocab), n):
        for t in sorted(set(ms)):
            rest = list(ms)
            rest.remove(t)
            out.append((*rest, t))
    return out


def generate_inputs(N: int, n: int, vocab: int, seed: int = 0) -> tuple[tuple[int, ...], ...]:  # noqa: N803
    """``N`` distinct consistency classes of length-``n`` sequences over ``vocab`` tokens."""
    classes = consistency_classes(n, vocab)
    if N > len(classes):
        raise DatasetError(f"only {len(classes)} distinct sequences (up to permutation of all "
                           f"but the last token) exist for n = {n}, vocab = {vocab}; "
                           f"asked for N = {N}")
    if N == len(classes):
        return tuple(classes)
    rng = random.Random(seed)
    return tuple(sorted(rng.sample(classes, N)))


def labels_symmetric(readout: str, classes: int) -> bool:
    """Is every permutation of the labels a symmetry of the searched family?"""
    return readout == "argmax" or classes == 2


def labelled_graph(seqs: Sequence[tuple[int, ...]], labels: Sequence[int],
                   symmetric: bool) -> Any:
    import networkx as nx

    g = nx.Graph()
    for i, (seq, y) in enumerate(zip(seqs, labels, strict=True)):
        g.add_node(("s", i), kind="seq")
        counts: dict[int, int] = {}
        for t in seq:
            counts[t] = counts.get(t, 0) + 1
        for t, c in counts.items():
            g.add_node(("t", t), kind="tok")
            g.add_edge(("s", i), ("t", t), e=f"{c}/{int(t == seq[-1])}")
        g.add_node(("y", y), kind="label" if symmetric else f"label{y}")
        g.add_edge(("s", i), ("y", y), e="label")
    return g


@dataclass(frozen=True, slots=True)
class LabellingClass:
    """A representative labelling and how many labellings it stands for."""

    labels: tuple[int, ...]
    size: int


def labelling_classes(seqs: Sequence[tuple[int, ...]], classes: int,
                      symmetric: bool) -> list[LabellingClass]:
    """Every labelling in ``[classes]^N`` up to isomorphism, in enumeration order.

    Each class is represented by its first labelling in ``itertools.product`` order, i.e.
    the lexicographically smallest of its orbit.  Small cases go through the token and
    label permutations directly (:func:`_classes_by_permutations`), the others through
    graph isomorphism (:func:`_classes_by_graphs`); the tests check that both agree."""
    tokens = sorted({t for seq in seqs for t in seq})
    perms = math.factorial(len(tokens)) * (math.factorial(classes) if symmetric else 1)
    if perms <= 5040 and classes ** len(seqs) <= 1 << 22:
        return _classes_by_permutations(seqs, classes, symmetric)
    return _classes_by_graphs(seqs, classes, symmetric)


def token_symmetries(seqs: Sequence[tuple[int, ...]], vocab: int = 0
                     ) -> list[tuple[list[int], tuple[int, ...]]]:
    """The token permutations ``perm`` (``t -> perm[t]``, for ``t < max(vocab, tokens)``)
    that map the set of sequences (multiset of all but the last token, last token) onto
    itself, each with the map ``i -> image[i]`` of sequence indices: ``(image, perm)``."""
    def key(seq: Sequence[int]) -> tuple[tuple[int, ...], int]:
        return tuple(sorted(seq[:-1])), seq[-1]

    index = {key(seq): i for i, seq in enumerate(seqs)}
    tokens = sorted({t for seq in seqs for t in seq})
    size = max(vocab, tokens[-1] + 1 if tokens else 0)
    out = []
    for perm in permutations(tokens):
        pi = dict(zip(tokens, perm, strict=True))
        image = [index.get(key([pi[t] for t in seq]), -1) for seq in seqs]
        if -1 not in image:
            out.append((image, tuple(pi.get(t, t) for t in range(size))))
    return out


def _classes_by_permutations(seqs: Sequence[tuple[int, ...]], classes: int,
                             symmetric: bool) -> list[LabellingClass]:
    """Two labelled datasets are isomorphic (:func:`labelled_graph`) exactly when a
    permutation of the tokens maps the set of sequences (multiset, last token) onto
    itself and, with it and (``symmetric``) a permutation of the labels, one labelling
    onto the other: a sequence node is determined by its token edges.  So the orbit of
    each labelling under those permutations is its class (numpy, all labellings at once)."""
    import numpy as np

    maps = [image for image, _ in token_symmetries(seqs)]
    relabels = list(permutations(range(classes))) if symmetric else [tuple(range(classes))]
    n = len(seqs)
    codes = np.arange(classes ** n, dtype=np.int64)
    digits = (codes[:, None] // classes ** np.arange(n - 1, -1, -1)) % classes  # product order
    weights = classes ** np.arange(n - 1, -1, -1, dtype=np.int64)
    best = codes.copy()
    for image in maps:
        moved = np.empty_like(digits)
        moved[:, image] = digits  # the label of sequence i moves to sequence image[i]
        for sigma in relabels:
            best = np.minimum(best, np.asarray(sigma, dtype=np.int64)[moved] @ weights)
    reps, sizes = np.unique(best, return_counts=True)
    return [LabellingClass(tuple(int(x) for x in digits[r]), int(c))
            for r, c in zip(reps, sizes, strict=True)]


def _classes_by_graphs(seqs: Sequence[tuple[int, ...]], classes: int,
                       symmetric: bool) -> list[LabellingClass]:
    import networkx as nx
    from networkx.algorithms.isomorphism import categorical_edge_match, categorical_node_match

    nm, em = categorical_node_match("kind", None), categorical_edge_match("e", None)
    buckets: dict[str, list[int]] = {}
    reps: list[tuple[tuple[int, ...], Any]] = []
    sizes: list[int] = []
    for labels in product(range(classes), repeat=len(seqs)):
        g = labelled_graph(seqs, labels, symmetric)
        h = nx.weisfeiler_lehman_graph_hash(g, node_attr="kind", edge_attr="e")
        for r in buckets.setdefault(h, []):
            if nx.is_isomorphic(reps[r][1], g, node_match=nm, edge_match=em):
                sizes[r] += 1
                break
        else:
            buckets[h].append(len(reps))
            reps.append((labels, g))
            sizes.append(1)
    return [LabellingClass(lab, s) for (lab, _), s in zip(reps, sizes, strict=True)]


# results file -------------------------------------------------------------------------
def record_key(shape: Shape, labels: Sequence[int]) -> str:
    return f"{shape.label()} {shape.readout}|{','.join(map(str, labels))}"


class ResultsFile:
    """Append-only JSON lines: a header naming the question, then one record per query."""

    def __init__(self, path: Path, header: dict[str, Any]) -> None:
        self.path = path
        self.records: dict[str, dict[str, Any]] = {}
        self.by_labels: dict[tuple[int, ...], list[dict[str, Any]]] = {}
        lines: list[str] = []
        if path.exists():
            raw = path.read_text().splitlines()
            for k, line in enumerate(raw):
                try:
                    obj = json.loads(line)
                except json.JSONDecodeError:
                    if k == len(raw) - 1:
                        break  # a line cut by a kill: dropped, rewritten below
                    raise DatasetError(f"{path}: line {k + 1} is not JSON") from None
                lines.append(line)
                if k == 0:
                    if obj.get("header") != header:
                        raise DatasetError(f"{path}: the results file belongs to another "
                                           f"question (header {obj.get('header')!r})")
                elif "key" in obj:
                    self._index(obj)
            if len(lines) != len(raw) or not lines:
                from exactmem.model.atomic import write_text_atomic

                write_text_atomic(path, "".join(x + "\n" for x in lines))
        if not lines:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._write_line({"format": RESULTS_FORMAT, "header": header})

    def _write_line(self, obj: dict[str, Any]) -> None:
        # appended in place (a kill keeps every finished line), never through a symlink
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW,
                         0o666)
        except OSError as exc:
            raise DatasetError(f"cannot append to {self.path}: {exc.strerror or exc} "
                               "(a symlink is never followed)") from None
        with os.fdopen(fd, "a") as fh:
            fh.write(json.dumps(obj, sort_keys=True) + "\n")
            fh.flush()
            os.fsync(fh.fileno())

    def add(self, record: dict[str, Any]) -> None:
        self._write_line(record)
        self._index(record)

    def _index(self, record: dict[str, Any]) -> None:
        self.records[record["key"]] = record
        if "labels" in record:
            self.by_labels.setdefault(tuple(record["labels"]), []).append(record)


# running ------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Question:
    """The inputs, the label alphabet and the query settings of an exhaustive run."""

    sequences: tuple[tuple[int, ...], ...]
    vocab: int
    classes: int = 2
    ties: TieMode = "split"
    timeout_s: float = 60.0
    bound: str | None = None  # "p/q": |w| <= bound on every weight, or None
    retry_unknown: bool = False  # re-solve stored unknowns even under the same budget
    bits: int | None = None  # b-bit integer weights, decided by SAT
    conflicts: int | None = None  # SAT conflict budget per query
    proof_dir: str | None = None  # where CNF files and LRAT proofs are written
    rlimit: int | None = None  # Z3 resource limit per solver call (deterministic)
    cvc5_rlimit: int | None = None  # cvc5 resource limit of the cross-check (None: skipped)
    encoding: str = "positions"  # the first encoding; the other one cross-checks
    crosscheck: bool = True  # re-ask every refutation (second encoding, cvc5)
    transfer: bool = True  # try the fronts of earlier witnesses first (real weights)
    pool: int = DEFAULT_POOL  # random fronts tried on the labellings left unknown (0: none)
    grid: int = GRID_FRONTS  # with bits: fronts of the grid enumeration (0: none)
    sweep: int = SWEEP_CONFLICTS  # with bits: conflicts per labelling of the label sweep

    def header(self) -> dict[str, Any]:
        head: dict[str, Any] = {"sequences": [list(s) for s in self.sequences],
                                "vocab": self.vocab, "classes": self.classes,
                                "ties": self.ties}
        if self.bound is not None:
            head["bound"] = self.bound
        if self.bits is not None:
            head["bits"] = self.bits
        return head

    def retry(self, record: dict[str, Any]) -> bool:
        """Is a stored answer to be solved again?  Only an ``unknown``, and only with
        ``retry_unknown`` or a larger budget (timeout, Z3 ``rlimit``, or SAT conflicts with
        ``bits``) than the one it ran under (no ``rlimit`` counts as unlimited)."""
        if record.get("status") != "unknown":
            return False
        if self.bits is not None:
            from exactmem.search.sat_backend import DEFAULT_CONFLICTS

            return self.retry_unknown or (self.conflicts or DEFAULT_CONFLICTS) > \
                int(record.get("conflict_budget", 0))
        if self.retry_unknown or self.timeout_s > float(record.get("timeout", 0.0)):
            return True
        before = record.get("rlimit")
        return before is not None and (self.rlimit is None or self.rlimit > int(before))

    def dataset(self, labels: Sequence[int]) -> Dataset:
        return Dataset("next-token", "token-ids", self.sequences, tuple(labels),
                       vocab_size=self.vocab)


def run_shape(q: Question, shape: Shape, store: ResultsFile, executor: Executor,
              first_failure: bool = False, show_progress: bool = True,
              certificate_dir: Path | None = None,
              deadline: float | None = None) -> dict[str, Any]:
    """Answer every labelling class for one shape; stored answers are reused."""
    sym = labels_symmetric(shape.readout, q.classes)
    classes = labelling_classes(q.sequences, q.classes, sym)
    pending = []
    reused = padded = 0
    hard = []
    for cls in classes:
        key = record_key(shape, cls.labels)
        if key in store.records and not q.retry(store.records[key]):
            reused += 1
            continue
        if _pad_from_store(q, shape, cls.labels, key, store, _cert_path(certificate_dir, key)):
            padded += 1
            continue
        before = [r for r in store.by_labels.get(tuple(cls.labels), [])
                  if r["status"] != "found"]
        hard.append(bool(before))
        payload: dict[str, Any] = {"dataset": q.dataset(cls.labels).to_json(),
                                   "shape": shape.as_dict(), "ties": q.ties,
                                   "timeout": q.timeout_s, "key": key}
        if q.bound is not None:
            payload["bound"] = q.bound
        if q.bits is None:
            payload.update(rlimit=q.rlimit, cvc5_rlimit=q.cvc5_rlimit, encoding=q.encoding,
                           crosscheck=q.crosscheck)
        if q.bits is not None:
            payload["bits"], payload["conflicts"] = q.bits, q.conflicts
            if q.sweep and q.classes == 2:
                payload["sweep"] = q.sweep
            if q.proof_dir is not None:
                name = key.replace(" ", "_").replace("|", "__").replace(",", "")
                payload["proof_stem"] = str(Path(q.proof_dir) / name)
        path = _cert_path(certificate_dir, key)
        if path is not None:
            payload["certificate"] = str(path)
        pending.append(payload)
    # labellings that smaller shapes could not memorize first: a failing shape fails fast
    pending = [p for _, p in sorted(zip(hard, pending, strict=True),
                                    key=lambda hp: not hp[0])]
    failed = first_failure and any(store.records[record_key(shape, c.labels)]["status"] ==
                                   "infeasible" for c in classes
                                   if record_key(shape, c.labels) in store.records)
    transfer = q.transfer and q.bits is None
    donors = Donors(shape, store) if transfer else None
    # where the cheap test picks the random fronts, they are tried before every query
    cheap = cheap_test_applies(shape, q.classes)
    suspects: list[dict[str, Any]] = []
    if transfer and cheap and not failed and q.pool and pending:
        with progress.task(f"{shape.label()} random fronts ({q.pool} drawn as arrays)",
                           heartbeat=True) as bar:
            if not show_progress:
                bar.close()
            suspects = _suspects(q, shape, pending)
    solved = 0

    def with_donors(payloads: list[dict[str, Any]], only: bool = False,
                    pool: bool = False) -> Iterator[dict[str, Any]]:
        """Each payload as it is sent, with the donors known by then (lazy executors)."""
        for p in payloads:
            if deadline is not None:
                p["timeout"] = min(float(p["timeout"]),
                                   max(0.001, deadline - time.monotonic()))
            if donors is not None:
                p["donors"] = donors.current()
                p["transfer_only"] = only
                p["pool"] = [q.pool, 0] if q.pool and (pool or cheap) else None
            yield p

    answered: set[str] = set()

    def drain(payloads: Iterator[dict[str, Any]]) -> bool:
        """Store the answers as they come; ``True`` when the shape failed or time is up."""
        nonlocal solved
        for res in executor.run(query_worker, payloads):
            if res.get("status") == "not transferred":
                continue  # a transfer-only pass that found nothing keeps the stored answer
            res["labels"] = _labels(res)
            store.add(res)
            if donors is not None:
                donors.add(res)
            if res["key"] not in answered:
                answered.add(res["key"])
                solved += 1
                bar.update()
            if first_failure and res["status"] == "infeasible":
                return True
            if deadline is not None and time.monotonic() > deadline:
                return True
        return False

    def unknown(p: dict[str, Any]) -> bool:
        return bool(store.records.get(p["key"], {}).get("status") == "unknown")

    def task(what: str, total: int) -> progress.Task:
        t = progress.task(f"{shape.label()} {what}", total=total, unit="query", heartbeat=True)
        if not show_progress:
            t.close()  # closing first silences it
        return t

    walk = None  # a plane pool (one wide block): its sample goes on from walk to walk
    if q.bits is not None and pending and not failed:
        # with --first-failure, likely refutations go to SAT before the full walk (with the
        # segment clauses a refutation is often far cheaper than the walk): first what
        # smaller shapes could not memorize, then what a short walk did not find
        asked: set[int] = set()
        cut: set[int] = set()  # probes asked under a quarter of the conflict budget
        from exactmem.search import plane_exhaustive
        from exactmem.search.sat_backend import DEFAULT_CONFLICTS

        exhaustive = plane_exhaustive.applies(q.dataset(_labels(pending[0])), shape, q.bits)

        def probe(batch: list[dict[str, Any]], cheap: bool = False) -> bool:
            """Ask ``batch`` first (``cheap``: under a quarter of the conflict budget --
            a likely refutation is cheap, and the probe is asked again in full later)."""
            nonlocal bar  # drain advances it
            for p in batch:
                p.pop("sweep", None)  # the sweep never refutes
                asked.add(id(p))
                if exhaustive:  # the first embeddings of the exhaustive walk, then SAT
                    p["exhaustive"] = PROBE_EMBEDDINGS
                if cheap:
                    p["conflicts"] = max(1, (q.conflicts or DEFAULT_CONFLICTS) // 4)
                    cut.add(id(p))
            bar = task("probes", len(batch))
            try:
                return bool(batch) and drain(with_donors(batch))
            except KeyboardInterrupt:
                executor.close(cancel=True)
                raise
            finally:
                bar.close()
                for p in batch:
                    p.pop("exhaustive", None)
                    p["conflicts"] = q.conflicts

        walk = _walk_pool(q, shape, plane_only=True)
        stop = first_failure and probe(pending[:min(sum(hard), PROBES)], cheap=True)
        if first_failure and not stop:
            _seed(walk, store, shape)
            short = _grid_witnesses(q, shape, [p for p in pending if id(p) not in asked],
                                    show_progress, QUICK_FRONTS, walk)
            stop = probe([p for p in short if "witness" not in p][:PROBES])
            _seed(walk, store, shape)
        if stop:
            pending = []
        else:
            # grid enumeration: certified networks for what it finds, the rest asked
            # first; a probe left unknown is walked, and asked again only when it ran under
            # the cheap budget or is walked exhaustively
            walked = _grid_witnesses(q, shape, [p for p in pending if "witness" not in p and
                                                (id(p) not in asked or unknown(p))],
                                     show_progress, None, walk)
            seen = {id(p) for p in walked}
            # where every front can be walked for one labelling, what the walk missed
            # (a probe left unknown too) is walked exhaustively before its SAT query
            for p in walked:
                if "witness" not in p and exhaustive:
                    p["exhaustive"] = True
                    p.pop("sweep", None)
            pending = [p for p in walked if id(p) not in asked or "witness" in p or
                       "exhaustive" in p or id(p) in cut] + \
                [p for p in pending if "witness" in p and id(p) not in seen]
    bar = task("queries", len(pending))
    if pending and not failed:
        try:
            # labellings that no random front can serve are the likely refutations: they
            # are asked first, under the whole resource limit
            for p in suspects:
                p["rlimit"] = q.rlimit
            if suspects and drain(with_donors(suspects)):
                raise _Stop
            asked = {id(p) for p in suspects}
            todo = [p for p in pending if id(p) not in asked]
            budgets = _budgets(q, donors is not None)
            for k, budget in enumerate(budgets):
                # an earlier pass is skipped where a stored unknown already ran under it
                batch = todo if k == len(budgets) - 1 else \
                    [p for p in todo if int(store.records.get(p["key"], {}).get("rlimit")
                                            or 0) < int(budget or 0)]
                for p in batch:
                    p["rlimit"] = budget
                if drain(with_donors(batch)):
                    raise _Stop
                if donors is None:
                    break
                # a cheap pass: the unknown answers against every front found since, and
                # against random fronts whose streams some tail can label (first time only)
                again = [p for p in todo
                         if unknown(p) and (k == 0 or donors.grew_since(p.get("donors", [])))]
                if drain(with_donors(again, only=True, pool=k == 0)):
                    raise _Stop
                todo = [p for p in todo if unknown(p)]
            # a plane pool walks again for what SAT left unknown, near every network found
            late = [p for p in pending if unknown(p) and "exhaustive" not in p]
            if walk is not None and late and (deadline is None or time.monotonic() < deadline):
                _seed(walk, store, shape)
                walk.patience = LATE_FRONTS
                late = _grid_witnesses(q, shape, late, show_progress, LATE_FRONTS, walk)
                drain(with_donors([p for p in late if "witness" in p]))
        except _Stop:
            pass
        except KeyboardInterrupt:
            executor.close(cancel=True)
            raise
        finally:
            label_sweep.release()  # the serial executor's solver, kept in this process
    bar.close()
    summary = summarize(shape, classes, store, reused, solved)
    summary["padded"] = padded
    return summary


def _walk_pool(q: Question, shape: Shape, fronts: int | None = None,
               plane_only: bool = False) -> Any:
    """The enumeration that serves ``shape`` (:mod:`~exactmem.search.grid_pool` for
    ``d_model`` 1, :mod:`~exactmem.search.plane_pool` for one wider block), or ``None``.
    ``plane_only``: ``None`` unless a plane pool serves it."""
    from exactmem.search import grid_pool, plane_pool

    if not q.grid:
        return None
    probe = q.dataset([0] * len(q.sequences))
    if grid_pool.applies(probe, shape, q.bits) and not plane_only:
        assert q.bits is not None
        return grid_pool.GridPool(probe, shape, q.bits,
                                  max_fronts=min(q.grid, fronts or q.grid))
    if plane_pool.applies(probe, shape, q.bits):
        assert q.bits is not None
        return plane_pool.PlanePool(probe, shape, q.bits, max_fronts=q.grid)
    return None


def _grid_witnesses(q: Question, shape: Shape, pending: list[dict[str, Any]],
                    show_progress: bool, fronts: int | None = None,
                    pool: Any = None) -> list[dict[str, Any]]:
    """Walk the b-bit networks of ``shape`` (:func:`_walk_pool`) for the pending
    labellings: each one found gets its network in the payload (the worker certifies it,
    then answers ``found``); those not found are returned first -- where the walk was
    exhaustive they have no network, and the SAT query (with its LRAT proof) follows.
    ``fronts``: walk at most that many (a seeded sample), not ``q.grid``.  ``pool``: a
    plane pool to go on with (its sample continues where the last walk stopped)."""
    from exactmem.certificate import spec_to_json
    from exactmem.search import grid_pool

    if not pending:
        return pending
    if pool is None:
        pool = _walk_pool(q, shape, fronts)
    if pool is None:
        return pending
    assert q.bits is not None
    words = [grid_pool.word_of(_labels(p)) for p in pending]
    grid = isinstance(pool, grid_pool.GridPool)  # else a plane pool, which goes on
    total = pool.planned if grid or fronts is None else \
        min(pool.planned - pool.walked, fronts)
    what = "grid fronts" if grid else \
        f"sampled fronts, until {pool.patience} in a row serve nothing new"
    with progress.task(f"{shape.label()} {what} ({q.bits}-bit)", total=total,
                       unit="front", heartbeat=True) as bar:
        if not show_progress:
            bar.close()
        left = pool.cover(words, tick=bar.update) if grid else \
            pool.cover(words, tick=bar.update, limit=fronts)
    for p, word in zip(pending, words, strict=True):
        if word not in left:
            p["witness"] = spec_to_json(pool.spec(word, q.dataset(_labels(p))))
            kind = "" if grid else " (sampled)"
            p["witness_note"] = (f"grid enumeration{kind}: front {pool.front_index(word)} of "
                                 f"{pool.total} ({'all' if pool.exhaustive else pool.walked}"
                                 f" walked)")
    # the farthest from every walked front first: the likeliest (and quickest) refutations
    far = pool.excess(left)
    missed = sorted((p for p, w in zip(pending, words, strict=True) if w in left),
                    key=lambda p: -far[grid_pool.word_of(_labels(p))])
    if pool.exhaustive:  # no network has them: the sweep (which never refutes) is skipped
        for p in missed:
            p.pop("sweep", None)
    return missed + [p for p, w in zip(pending, words, strict=True) if w not in left]


def _seed(walk: Any, store: ResultsFile, shape: Shape) -> None:
    """Give a plane pool the fronts of the networks of ``shape`` found by SAT so far (the
    fronts it mutates): late labellings are served near other late ones."""
    if walk is None:
        return
    label = record_key(shape, ())
    for key, rec in store.records.items():
        if key.startswith(label) and rec.get("status") == "found" and "network" in rec \
                and key not in walk.seeded and \
                not any("grid enumeration" in n for n in rec.get("notes", [])):
            walk.seeded.add(key)
            walk.seed(rec["network"])


def _labels(p: dict[str, Any]) -> list[int]:
    """The labelling of a payload or answer, read from its key."""
    return [int(x) for x in p["key"].split("|")[1].split(",")]


class _Stop(Exception):
    """The shape failed (or time is up) before the budget passes."""


def _suspects(q: Question, shape: Shape, pending: list[dict[str, Any]]
              ) -> list[dict[str, Any]]:
    """The pending queries whose labelling no front of the array pool
    (:mod:`~exactmem.search.front_pool`) can serve, farthest from every front first
    (:meth:`~exactmem.search.front_pool.FrontPool.distance`)."""
    from exactmem.search import front_pool

    if not q.pool or not pending:
        return []
    first = q.dataset(_labels(pending[0]))
    if not front_pool.applies(first, shape):
        return []
    pool = front_pool.pool_for(first, shape, 0)
    far = [(pool.distance(_labels(p), q.pool), k) for k, p in enumerate(pending)]
    return [pending[k] for d, k in sorted(far, key=lambda dk: (-dk[0], dk[1])) if d > 0]


def _budgets(q: Question, transfer: bool) -> list[int | None]:
    """Z3 resource limits of the full queries, pass by pass.  With transfer and a
    resource limit: a tenth of it first (most witnesses come cheap, and each new front
    answers other labellings by transfer), then the whole limit for what is left."""
    if not transfer or q.rlimit is None or q.rlimit < 10 * TRANSFER_RLIMIT:
        return [q.rlimit]
    return [q.rlimit // 10, q.rlimit]


class Donors:
    """Witnesses of ``shape`` (or of shapes nested in it) found so far, one per distinct
    front, newest first: what :mod:`exactmem.search.transfer` re-fits."""

    def __init__(self, shape: Shape, store: ResultsFile, limit: int = 64) -> None:
        self.shape, self.limit = shape, limit
        self.fronts: dict[str, list[Any]] = {}
        for rec in store.records.values():
            self.add(rec)

    def add(self, rec: dict[str, Any]) -> None:
        if rec.get("status") != "found" or "network" not in rec:
            return
        small = Shape.from_dict(rec["shape"])
        if small != self.shape and not nests_in(small, self.shape):
            return
        layers = rec["network"]["layers"]
        tail = 2 if small.ff_width else 1  # the last feed-forward layer and the readout
        key = json.dumps([rec["shape"], layers[:-tail]], sort_keys=True)
        self.fronts.pop(key, None)
        self.fronts[key] = [rec["shape"], rec["network"]]

    def current(self) -> list[list[Any]]:
        return list(reversed(list(self.fronts.values())))[:self.limit]

    def grew_since(self, before: list[list[Any]]) -> bool:
        return self.current() != before


def _cert_path(certificate_dir: Path | None, key: str) -> Path | None:
    if certificate_dir is None:
        return None
    certificate_dir.mkdir(parents=True, exist_ok=True)
    name = key.replace(" ", "_").replace("|", "__").replace(",", "")
    return certificate_dir / f"{name}.cert.json"


def _pad_from_store(q: Question, shape: Shape, labels: tuple[int, ...], key: str,
                    store: ResultsFile, cert_path: Path | None = None) -> bool:
    """Answer from a stored witness of a smaller nested shape (zero-padded, re-certified)."""
    from exactmem.search.encoding import EncodeOptions
    from exactmem.search.query import padded_result

    for rec in store.by_labels.get(tuple(labels), []):
        small = Shape.from_dict(rec["shape"])
        if rec["status"] == "found" and "network" in rec and small != shape and \
                nests_in(small, shape):
            res = padded_result(q.dataset(labels), small, rec["network"], shape,
                                EncodeOptions(ties=q.ties))
            if res is None:
                continue
            if cert_path is not None and res.certificate is not None:
                from exactmem.certificate import write_certificate

                write_certificate(res.certificate, cert_path)
                res = dataclasses.replace(res, certificate_path=str(cert_path))
            out = res.as_dict()
            from exactmem.certificate import spec_to_json

            assert isinstance(res.outcome, Found)
            out.update(key=key, labels=list(labels), network=spec_to_json(res.outcome.witness),
                       padded_from=small.as_dict(), verified=True)
            store.add(out)
            return True
    return False


def summarize(shape: Shape, classes: list[LabellingClass], store: ResultsFile,
              reused: int, solved: int) -> dict[str, Any]:
    counts = {"found": 0, "infeasible": 0, "unknown": 0, "unanswered": 0}
    labellings = dict(counts)
    secs: list[float] = []
    params = None
    for cls in classes:
        rec = store.records.get(record_key(shape, cls.labels))
        status = rec["status"] if rec else "unanswered"
        counts[status] += 1
        labellings[status] += cls.size
        if rec:
            secs.append(float(rec["seconds"]))
            params = rec["params"]
    if counts["infeasible"]:
        shatters: bool | None = False
    elif counts["found"] == len(classes):
        shatters = True
    else:
        shatters = None
    secs.sort()
    return {"shape": shape.as_dict(), "params": params, "shatters": shatters,
            "classes": counts, "labellings": labellings, "reused": reused, "solved": solved,
            "median_seconds": secs[len(secs) // 2] if secs else None,
            "seconds": round(sum(secs), 4)}


def shattering_search(q: Question, shapes: Sequence[Shape], store: ResultsFile,
                      executor: Executor, first_failure: bool = False,
                      show_progress: bool = True,
                      certificate_dir: Path | None = None,
                      deadline: float | None = None,
                      caps_ok: Callable[[int], bool] | None = None) -> dict[str, Any]:
    """Shapes smallest first until one memorizes every labelling (or ``deadline``,
    a ``time.monotonic()`` value, passes).  ``caps_ok(params)``: no shape beyond the
    swept family has at most ``params`` parameters (else the answer is "at most")."""
    per_shape = []
    smallest = None
    cut = False  # the deadline passed before every shape was tried
    for shape in shapes:
        if deadline is not None and time.monotonic() > deadline:
            cut = True
            break
        summary = run_shape(q, shape, store, executor, first_failure, show_progress,
                            certificate_dir, deadline)
        per_shape.append(summary)
        if summary["shatters"]:
            smallest = summary
            break
    # a minimum needs every smaller shape refuted under exact tie semantics, and (``caps_ok``)
    # no shape beyond the swept caps with fewer parameters
    proved = smallest is not None and all(s["shatters"] is False for s in per_shape[:-1]) \
        and q.ties == "split" and (caps_ok is None or caps_ok(int(smallest["params"])))
    if smallest is not None:
        status = "found"
    elif per_shape and not cut and all(s["shatters"] is False for s in per_shape):
        status = "infeasible"  # every shape of the family refuted
    else:
        status = "unknown"
    return {"status": status,
            "minimal": {**smallest["shape"], "params": smallest["params"]} if smallest else None,
            "proved_minimal": proved, "claim": ("minimal" if proved else "at most")
            if smallest else None, "ties": q.ties, "shapes": per_shape,
            "reused": sum(s["reused"] for s in per_shape),
            "padded": sum(s["padded"] for s in per_shape),
            "solved": sum(s["solved"] for s in per_shape)}
