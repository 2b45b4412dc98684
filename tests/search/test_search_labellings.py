"""Exhaustive mode: isomorphism classes, resumable results, executors (local and Dask)."""

# load-safe: the kill-and-resume test polls a file for its condition (9 stored results) or
# the run's own end, with no deadline; the sleep is its polling interval only.

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from itertools import product
from pathlib import Path

import pytest

from exactmem.search.drive.all_labellings import run_shape
from exactmem.search.drive.executors import SerialExecutor
from exactmem.search.drive.results import ExhaustiveRun, ResultsFile
from exactmem.search.question.labellings import (
    consistency_classes,
    generate_inputs,
    labelled_graph,
    labelling_classes,
)
from exactmem.search.question.shape import Shape

CMD = [sys.executable, "-m", "exactmem", "search", "--all-labellings", "--N", "6", "--n", "2",
       "--vocab", "3", "--minimize", "params", "--workers", "2", "--timeout", "60"]


def test_consistency_classes_and_generated_inputs_are_distinct() -> None:
    assert len(consistency_classes(2, 3)) == 9 and len(consistency_classes(3, 2)) == 6
    seqs = generate_inputs(6, 2, 3, seed=4)
    keys = {(tuple(sorted(s)), s[-1]) for s in seqs}
    assert len(seqs) == len(keys) == 6


@pytest.mark.parametrize("symmetric", [True, False])
def test_labelling_classes_partition_every_labelling(symmetric: bool) -> None:
    import networkx as nx
    from networkx.algorithms.isomorphism import categorical_edge_match, categorical_node_match

    seqs = generate_inputs(5, 2, 3)
    classes = labelling_classes(seqs, 2, symmetric)
    assert sum(c.size for c in classes) == 2 ** len(seqs)
    nm, em = categorical_node_match("kind", None), categorical_edge_match("e", None)
    graphs = [labelled_graph(seqs, c.labels, symmetric) for c in classes]
    for i, g in enumerate(graphs):  # representatives are pairwise non-isomorphic
        for h in graphs[i + 1:]:
            assert not nx.is_isomorphic(g, h, node_match=nm, edge_match=em)
    # every labelling is isomorphic to exactly one representative
    for labels in list(product(range(2), repeat=len(seqs)))[::5]:
        g = labelled_graph(seqs, labels, symmetric)
        hits = sum(nx.is_isomorphic(g, h, node_match=nm, edge_match=em) for h in graphs)
        assert hits == 1
    if symmetric:  # swapping labels is a symmetry: fewer classes than without it
        assert len(classes) < len(labelling_classes(seqs, 2, False))


def test_results_file_drops_a_cut_line_and_refuses_another_question(tmp_path: Path) -> None:
    q = ExhaustiveRun(generate_inputs(3, 2, 2), 2, timeout_s=30)
    path = tmp_path / "r.jsonl"
    store = ResultsFile(path, q.header())
    run_shape(q, Shape(), store, SerialExecutor(), show_progress=False)
    n = len(store.records)
    assert n > 0
    with path.open("a") as fh:
        fh.write('{"key": "cut in the mid')
    again = ResultsFile(path, q.header())
    assert len(again.records) == n
    assert all(json.loads(x) for x in path.read_text().splitlines())
    from exactmem.errors import DatasetError

    with pytest.raises(DatasetError, match="another question"):
        ResultsFile(path, ExhaustiveRun(generate_inputs(3, 2, 3), 3).header())


def test_all_labellings_n6_shatters_with_zero_unknowns_and_resumes_after_a_kill(
        tmp_path: Path) -> None:
    results = tmp_path / "n6.jsonl"
    proc = subprocess.Popen([*CMD, "--results", str(results), "--quiet"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    # wait for the condition (9 stored lines) or the run's own end, never for a clock
    while proc.poll() is None:
        if results.exists() and len(results.read_text().splitlines()) >= 9:
            break
        time.sleep(0.05)  # polling interval only
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    stored = {json.loads(x)["key"] for x in results.read_text().splitlines()[1:]
              if x.endswith("}")}
    assert len(stored) >= 8
    done = subprocess.run([*CMD, "--results", str(results), "--json"], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    rep = json.loads(done.stdout)
    assert rep["status"] == "found" and rep["proved_minimal"] is True
    for size in rep["sizes"]:
        assert {"shape", "params", "status", "seconds"} <= set(size)
    last = rep["sizes"][-1]
    assert last["status"] == "found" and last["classes"]["unknown"] == 0
    assert last["classes"]["found"] == sum(last["classes"].values())
    assert all(s["status"] == "infeasible" for s in rep["sizes"][:-1])
    # nothing stored was solved again: each key appears once, the rerun reused them all
    lines = [json.loads(x) for x in results.read_text().splitlines()[1:]]
    keys = [r["key"] for r in lines]
    assert len(keys) == len(set(keys))
    assert rep["reused"] >= len(stored) - 1
    assert rep["reused"] + rep["padded"] + rep["solved"] == len(keys)
    assert all(r["verified"] for r in lines if r["status"] == "found")
    # every stored witness (solved or zero-padded) has the size of its record's shape
    from exactmem.certificate import spec_from_json
    from exactmem.model.sizes import sizes

    assert any("padded_from" in r for r in lines)
    for r in lines:
        if r["status"] == "found":
            assert sizes(spec_from_json(r["network"])).params_dense == r["params"]
    # a third run solves nothing
    third = subprocess.run([*CMD, "--results", str(results), "--json"], capture_output=True,
                           text=True, timeout=300)
    assert json.loads(third.stdout)["solved"] == 0


def test_dask_executor_on_a_local_cluster(tmp_path: Path) -> None:
    from distributed import LocalCluster

    from exactmem.search.drive.executors import DaskExecutor

    q = ExhaustiveRun(generate_inputs(4, 2, 2), 2, timeout_s=30)
    # dashboard ":0": a free port (the default 8787 collides with a concurrent run)
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False,
                      dashboard_address=":0") as cluster:
        ex = DaskExecutor(cluster.scheduler_address)
        try:
            store = ResultsFile(tmp_path / "d.jsonl", q.header())
            summary = run_shape(q, Shape(ff_width=1), store, ex, show_progress=False)
        finally:
            ex.close()
    assert summary["solved"] == sum(summary["classes"].values()) > 0
    assert summary["classes"]["unknown"] == 0


@pytest.mark.parametrize(("N", "n", "vocab", "classes", "symmetric"),
                         [(6, 2, 3, 2, True), (7, 2, 3, 2, False), (5, 3, 3, 3, True),
                          (8, 2, 4, 2, True), (6, 2, 4, 3, False)])
def test_labelling_classes_by_permutations_match_graph_isomorphism(
        N: int, n: int, vocab: int, classes: int, symmetric: bool) -> None:  # noqa: N803
    from exactmem.search.question.labellings import _classes_by_graphs, _classes_by_permutations

    for seed in range(2):
        seqs = generate_inputs(N, n, vocab, seed)
        graphs = _classes_by_graphs(seqs, classes, symmetric)
        perms = _classes_by_permutations(seqs, classes, symmetric)
        assert [(c.labels, c.size) for c in perms] == [(c.labels, c.size) for c in graphs]
        assert sum(c.size for c in perms) == classes ** N
