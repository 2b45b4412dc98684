"""The finders an exhaustive run puts before its queries, for one shape.

:func:`walk_pool` picks the enumeration of b-bit networks that serves a shape (the grid
walk for ``d_model`` 1, the plane walk for one wider block) and :func:`grid_witnesses`
walks it for the pending labellings; :func:`suspects` orders the labellings that no random
front can serve (real weights) first; :class:`Donors` keeps the fronts of the witnesses
found so far for witness transfer; :func:`budgets` gives the resource limit of each pass.
Every network proposed here is certified by the worker before it answers ``found``.
"""

from __future__ import annotations

import json
from typing import Any

from exactmem import progress
from exactmem.search.drive.results import ExhaustiveRun, ResultsFile, record_key
from exactmem.search.finders.transfer import DEFAULT_TRANSFER_RLIMIT as TRANSFER_RLIMIT
from exactmem.search.question.shape import Shape, nests_in


def walk_pool(q: ExhaustiveRun, shape: Shape, fronts: int | None = None,
               plane_only: bool = False) -> Any:
    """The enumeration that serves ``shape`` (:mod:`~exactmem.search.finders.grid_pool` for
    ``d_model`` 1, :mod:`~exactmem.search.finders.plane_pool` for one wider block), or ``None``.
    ``plane_only``: ``None`` unless a plane pool serves it."""
    from exactmem.search.finders import grid_pool, plane_pool

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


def grid_witnesses(q: ExhaustiveRun, shape: Shape, pending: list[dict[str, Any]],
                    show_progress: bool, fronts: int | None = None,
                    pool: Any = None) -> list[dict[str, Any]]:
    """Walk the b-bit networks of ``shape`` (:func:`walk_pool`) for the pending
    labellings: each one found gets its network in the payload (the worker certifies it,
    then answers ``found``); those not found are returned first -- where the walk was
    exhaustive they have no network, and the SAT query (with its LRAT proof) follows.
    ``fronts``: walk at most that many (a seeded sample), not ``q.grid``.  ``pool``: a
    plane pool to go on with (its sample continues where the last walk stopped)."""
    from exactmem.certificate import spec_to_json
    from exactmem.search.finders import grid_pool

    if not pending:
        return pending
    if pool is None:
        pool = walk_pool(q, shape, fronts)
    if pool is None:
        return pending
    assert q.bits is not None
    words = [grid_pool.word_of(labels_of(p)) for p in pending]
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
            p["witness"] = spec_to_json(pool.spec(word, q.dataset(labels_of(p))))
            kind = "" if grid else " (sampled)"
            p["witness_note"] = (f"grid enumeration{kind}: front {pool.front_index(word)} of "
                                 f"{pool.total} ({'all' if pool.exhaustive else pool.walked}"
                                 f" walked)")
    # the farthest from every walked front first: the likeliest (and quickest) refutations
    far = pool.excess(left)
    missed = sorted((p for p, w in zip(pending, words, strict=True) if w in left),
                    key=lambda p: -far[grid_pool.word_of(labels_of(p))])
    if pool.exhaustive:  # no network has them: the sweep (which never refutes) is skipped
        for p in missed:
            p.pop("sweep", None)
    return missed + [p for p, w in zip(pending, words, strict=True) if w not in left]


def seed_walk(walk: Any, store: ResultsFile, shape: Shape) -> None:
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


def labels_of(p: dict[str, Any]) -> list[int]:
    """The labelling of a payload or answer, read from its key."""
    return [int(x) for x in p["key"].split("|")[1].split(",")]



def suspects(q: ExhaustiveRun, shape: Shape, pending: list[dict[str, Any]]
              ) -> list[dict[str, Any]]:
    """The pending queries whose labelling no front of the array pool
    (:mod:`~exactmem.search.finders.front_pool`) can serve, farthest from every front first
    (:meth:`~exactmem.search.finders.front_pool.FrontPool.distance`)."""
    from exactmem.search.finders import front_pool

    if not q.pool or not pending:
        return []
    first = q.dataset(labels_of(pending[0]))
    if not front_pool.applies(first, shape):
        return []
    pool = front_pool.pool_for(first, shape, 0)
    far = [(pool.distance(labels_of(p), q.pool), k) for k, p in enumerate(pending)]
    return [pending[k] for d, k in sorted(far, key=lambda dk: (-dk[0], dk[1])) if d > 0]


def budgets(q: ExhaustiveRun, transfer: bool) -> list[int | None]:
    """Z3 resource limits of the full queries, pass by pass.  With transfer and a
    resource limit: a tenth of it first (most witnesses come cheap, and each new front
    answers other labellings by transfer), then the whole limit for what is left."""
    if not transfer or q.rlimit is None or q.rlimit < 10 * TRANSFER_RLIMIT:
        return [q.rlimit]
    return [q.rlimit // 10, q.rlimit]


class Donors:
    """Witnesses of ``shape`` (or of shapes nested in it) found so far, one per distinct
    front, newest first: what :mod:`exactmem.search.finders.transfer` re-fits."""

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


