"""Every labelling of one shape on one incremental SAT solver: labels as assumptions.

With ``--bits``, two labels and an argmax readout, the CNF of a shape on the sequences is
built once with the label of each read position an open literal
(:func:`~exactmem.search.encode.sat_encoding.encode_labelled`); a labelling is then a set of
assumptions on one CaDiCaL instance (:class:`~exactmem.search.solvers.sat_backend.Incremental`).
What the solver learns answering one labelling serves the next, and its saved phases
start it near the network it found last, so most labellings are answered within a few
thousand conflicts instead of a fresh encoding and solve each.

Nothing here is trusted.  A model becomes a network that the checker certifies before it
is reported (:func:`~exactmem.search.drive.query.given_witness`); a labelling with no model
within the sweep's small budget -- unknown or refuted under assumptions -- is asked the
ordinary way, with its own CNF and, when refuted, an LRAT proof.

Each worker process keeps the solver of the shape it last swept (:func:`for_process`), so
the workers of an all-labellings run sweep in parallel, each learning on its own.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from dataclasses import dataclass, field

from exactmem.model.dataset import Dataset
from exactmem.model.dataset_checks import multiset_key
from exactmem.model.spec import NetworkSpec
from exactmem.search.question.shape import Shape

SWEEP_CONFLICTS = 100_000  # conflicts per labelling before it is left to its own query


def applies(ds: Dataset, shape: Shape, bits: int | None) -> bool:
    """Is the sweep defined for ``ds``, ``shape`` and ``bits``?"""
    return bits is not None and bits >= 1 and shape.readout == "argmax" and \
        ds.task == "next-token" and all(y in (0, 1) for y in ds.labels)


@dataclass
class LabelSweep:
    """The incremental solver of one shape on one set of sequences."""

    ds: Dataset
    shape: Shape
    bits: int
    answered: dict[str, int] = field(default_factory=lambda: {"sat": 0, "unsat": 0,
                                                             "unknown": 0})

    def __post_init__(self) -> None:
        from exactmem.search.encode.sat_encoding import encode_labelled
        from exactmem.search.solvers import sat_backend

        self.labelled = encode_labelled(self.ds, self.shape, self.bits)
        index: dict[tuple[object, ...], int] = {}
        for seq in self.ds.sequences:
            index.setdefault(multiset_key(seq), len(index))
        self.literals = [self.labelled.literals[(index[multiset_key(seq)], seq[-1])]
                         for seq in self.ds.sequences]
        self.solver = sat_backend.Incremental(self.labelled.problem.clauses)

    def network(self, labels: Sequence[int], conflicts: int = SWEEP_CONFLICTS
                ) -> tuple[NetworkSpec | None, int]:
        """A b-bit network proposed for ``labels`` (``None``: none within ``conflicts``,
        or two sequences of one read position labelled apart), and the conflicts used."""
        from exactmem.search.encode.sat_encoding import witness_from_model

        wanted = {lit if y else -lit for lit, y in zip(self.literals, labels, strict=True)}
        if any(-lit in wanted for lit in wanted):
            return None, 0
        res, used, model = self.solver.solve(sorted(wanted, key=abs), conflicts)
        self.answered["sat" if res else "unknown" if res is None else "unsat"] += 1
        if not res:
            return None, used
        ds = dataclasses.replace(self.ds, labels=tuple(labels))
        return witness_from_model(ds, self.shape, self.labelled.problem, set(model)), used

    def close(self) -> None:
        self.solver.close()


_KEPT: dict[str, LabelSweep] = {}


def for_process(ds: Dataset, shape: Shape, bits: int) -> LabelSweep:
    """This process's sweep of ``shape`` on ``ds``'s sequences (its labels aside), built on
    first use; the one of another question is closed then."""
    key = json.dumps([ds.task, ds.inputs, [list(s) for s in ds.sequences], ds.vocab_size,
                      ds.dim, shape.as_dict(), bits], default=str)
    if key not in _KEPT:
        release()
        _KEPT[key] = LabelSweep(dataclasses.replace(ds, labels=(0,) * len(ds.sequences)),
                                shape, bits)
    return _KEPT[key]


def release() -> None:
    """Close the solver kept in this process, if any."""
    for sweep in _KEPT.values():
        sweep.close()
    _KEPT.clear()
