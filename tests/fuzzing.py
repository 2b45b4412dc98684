"""Crafted and mutated certificates for the checker, and the independent reference that
decides whether an accepted certificate is a true one.

Shared by tests/checker/test_checker_attacks.py, tests/checker/test_checker_fuzz.py and
scripts/fuzz_checker.py.  The reference uses only the producer's side (the builder's
decoder, its exact forward pass or its interval pass, its size accounting and its canonical
encoder), never the checker.
"""

from __future__ import annotations

import copy
import hashlib
import json
import random
from collections.abc import Callable, Iterator
from fractions import Fraction
from pathlib import Path
from typing import Any

from exactmem.certificate import build_certificate
from exactmem.certificate.build import digest_of
from exactmem.certificate.encode import spec_from_json, spec_to_json
from exactmem.constructions import get
from exactmem.datasets.draw import generate
from exactmem.datasets.draw_attention import generate_for
from exactmem.model.dataset import Dataset, canonical_json, dataset_from_json
from exactmem.model.interval import has_softmax_scores
from exactmem.model.interval_verdict import certify_interval, evaluate_certified
from exactmem.model.sizes import sizes

Cert = dict[str, Any]

# the six constructions, each on a small dataset it accepts
SETTINGS: dict[str, tuple[Callable[[], Dataset], dict[str, Any]]] = {
    "lookup": (lambda: generate("next-token", N=12, n=4, vocab=6, classes=3, seed=1), {}),
    "vardi2022-relu": (lambda: generate("next-token", N=12, n=1, vocab=20, classes=3, seed=2,
                                        dim=2), {}),
    "kajitsuka2025-next-token": (lambda: generate("next-token", N=12, n=4, vocab=6, classes=3,
                                                  seed=3), {}),
    "kajitsuka2025-seq2seq": (lambda: generate("seq2seq", N=6, n=3, vocab=5, classes=3, seed=4),
                              {}),
    "mahdavi2024-mha": (lambda: generate_for("mahdavi2024-mha", seed=3, heads=2, head_dim=3, n=3,
                                             dim=5), {"heads": 2, "head_dim": 3}),
    "dana2024-aot": (lambda: generate_for("dana2024-aot", seed=3, heads=2, head_dim=2, dim=2,
                                          vocab=40), {"heads": 2, "head_dim": 2, "dim": 2}),
}


def genuine(name: str) -> Cert:
    """A genuine certificate of construction ``name`` on its small dataset."""
    make, options = SETTINGS[name]
    ds = make()
    con = get(name)
    result = con.build(ds, {**con.defaults(), **options})
    evaluation = evaluate_certified(result.spec, ds, result.hints)
    assert evaluation.memorized, (name, evaluation.failures[:3])
    return build_certificate(ds, result, name, evaluation)


def redigest(cert: Cert, rehash_dataset: bool = True) -> Cert:
    """Make the digests consistent again, so only the semantic checks can object."""
    if rehash_dataset and isinstance(cert.get("dataset"), dict):
        try:
            data = cert["dataset"]["data"]
            cert["dataset"]["sha256"] = hashlib.sha256(
                canonical_json(dataset_from_json(data).to_json()).encode()).hexdigest()
        except Exception:  # noqa: BLE001 - a mutated dataset may not parse; keep the old hash
            pass
    try:
        cert["digest"] = digest_of(cert)
    except (TypeError, ValueError):
        pass
    return cert


def text_of(cert: Cert) -> str:
    return json.dumps(cert, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


# ---------------------------------------------------------------- the reference
def reference_accepts(cert: Cert) -> tuple[bool, str]:
    """Is ``cert`` a true, well-formed certificate?  Decided by the producer's code only:
    canonical layout (decode + re-encode gives the same network), dataset hash, digest,
    sizes, claims equal to the producer's evaluation, and every label recovered."""
    try:
        if set(cert) != {"format", "construction", "dataset", "network", "claims", "sizes",
                         "hints", "digest"}:
            return False, "top-level fields"
        ds_entry = cert["dataset"]
        if set(ds_entry) != {"sha256", "data"}:
            return False, "dataset entry"
        ds = dataset_from_json(ds_entry["data"])
        if ds.to_json() != ds_entry["data"] or ds.sha256() != ds_entry["sha256"]:
            return False, "dataset not canonical or hash"
        spec = spec_from_json(cert["network"])
        if spec_to_json(spec) != cert["network"]:
            return False, "network not canonical"
        if cert["digest"] != digest_of(cert):
            return False, "digest"
        if cert["sizes"] != sizes(spec).as_dict():
            return False, "sizes"
        hints = cert["hints"]
        if has_softmax_scores(spec):
            hint = hints.get("softmax") if isinstance(hints, dict) else None
            if not isinstance(hint, dict) or set(hints) != {"softmax"}:
                return False, "softmax hint"
            eps = Fraction(hint["epsilon"]) if "epsilon" in hint else None
            labels = sorted({y for i in range(ds.N) for y in ds.position_labels(i)})
            gap = min((b - a for a, b in zip(labels, labels[1:], strict=False)), default=1)
            if eps is not None and not eps < Fraction(gap, 2):
                return False, "epsilon does not identify the labels"
            out = certify_interval(spec, ds, eps, (int(hint["precision"]), 128, 1024))
            if not out.verified:
                return False, "not certified by the reference interval pass"
            want = [[str(y) for y in ds.position_labels(i)] for i in range(ds.N)]
        else:
            if hints != {}:
                return False, "hints on an exact network"
            from exactmem.model.evaluate import evaluate

            ev = evaluate(spec, ds)
            if ev.failures:
                return False, f"reference evaluation fails: {ev.failures[0]}"
            want = [[None if v is None else (str(v.numerator) if v.denominator == 1 else
                                            f"{v.numerator}/{v.denominator}") for v in row]
                    for row in ev.predictions]
        if cert["claims"] != {"outputs": want}:
            return False, "claims"
        return True, "true certificate"
    except Exception as exc:  # noqa: BLE001 - the reference rejects what it cannot read
        return False, f"reference cannot read it: {type(exc).__name__}: {exc}"


# ---------------------------------------------------------------- mutations
NUMBER_FORMS = [
    lambda s: "+" + s, lambda s: s + "\n", lambda s: " " + s, lambda s: s + "/1",
    lambda s: s.translate(str.maketrans("0123456789", "٠١٢٣٤٥٦٧٨٩")),
    lambda s: s.translate(str.maketrans("0123456789", "０１２３４５６７８９")),
    lambda s: "-0" if s == "0" else "2" + s if s.lstrip("-")[:1] != "0" else s,
    lambda s: _scaled(s, 2), lambda s: _scaled(s, -1), lambda s: _scaled(s, 10 ** 40),
    lambda s: "0", lambda s: "1", lambda s: "1/3", lambda s: "9" * 30000,
]


def _scaled(s: str, k: int) -> str:
    try:
        v = Fraction(s) * k
    except (ValueError, ZeroDivisionError):
        return s
    return str(v.numerator) if v.denominator == 1 else f"{v.numerator}/{v.denominator}"


def _nonreduced(s: str) -> str:
    try:
        v = Fraction(s)
    except (ValueError, ZeroDivisionError):
        return s
    return f"{2 * v.numerator}/{2 * v.denominator}"


VALUES: list[Any] = [None, True, False, 0, 1, -1, 5.0, float("nan"), "", "x", [], {}, [[]],
                     "1", "0", 2 ** 70, [1], {"a": 1}]


def _paths(node: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[tuple[Any, ...], Any]]:
    yield path, node
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _paths(v, (*path, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _paths(v, (*path, i))


def _parent(cert: Cert, path: tuple[Any, ...]) -> Any:
    node: Any = cert
    for p in path[:-1]:
        node = node[p]
    return node


def mutate(cert: Cert, rng: random.Random) -> tuple[str, str | Cert]:
    """One random mutation; returns ``(description, certificate or raw text)``."""
    c = copy.deepcopy(cert)
    paths = [p for p, _ in _paths(c) if p]
    kind = rng.choice(["number", "number", "number", "value", "delete", "add", "list",
                       "list", "claim", "label", "token", "hint", "size", "text"])
    if kind == "number":
        strings = [p for p in paths if isinstance(_parent(c, p)[p[-1]], str)
                   and p[0] not in ("digest", "format")]
        p = rng.choice(strings)
        old = _parent(c, p)[p[-1]]
        form = rng.choice([*NUMBER_FORMS, _nonreduced])
        _parent(c, p)[p[-1]] = form(old)
        desc = f"number at {p}: {old[:20]!r} -> {_parent(c, p)[p[-1]][:20]!r}"
    elif kind == "value":
        p = rng.choice(paths)
        _parent(c, p)[p[-1]] = copy.deepcopy(rng.choice(VALUES))
        desc = f"value at {p}"
    elif kind == "delete":
        p = rng.choice(paths)
        parent = _parent(c, p)
        del parent[p[-1]]
        desc = f"delete {p}"
    elif kind == "add":
        dicts = [p for p, v in _paths(c) if isinstance(v, dict)]
        p = rng.choice(dicts)
        node = c
        for q in p:
            node = node[q]
        node[rng.choice(["extra", "bias", "keys", "residual", "path", "epsilon"])] = \
            copy.deepcopy(rng.choice(VALUES))
        desc = f"add a field under {p}"
    elif kind == "list":
        lists = [p for p, v in _paths(c) if isinstance(v, list) and v]
        p = rng.choice(lists)
        node = c
        for q in p:
            node = node[q]
        op = rng.choice(["drop", "dup", "swap", "reverse"])
        i = rng.randrange(len(node))
        if op == "drop":
            del node[i]
        elif op == "dup":
            node.insert(i, copy.deepcopy(node[i]))
        elif op == "swap":
            j = rng.randrange(len(node))
            node[i], node[j] = node[j], node[i]
        else:
            node.reverse()
        desc = f"list {op} at {p}"
    elif kind == "claim":
        rows = c["claims"]["outputs"]
        i = rng.randrange(len(rows))
        k = rng.randrange(len(rows[i]))
        rows[i][k] = rng.choice(["0", "1", "2", "3", None, "1/2", "-1"])
        desc = f"claim {i},{k}"
    elif kind == "label":
        data = c["dataset"]["data"]
        i = rng.randrange(len(data["labels"]))
        new = rng.randrange(4)
        if isinstance(data["labels"][i], list):
            data["labels"][i][rng.randrange(len(data["labels"][i]))] = new
        else:
            data["labels"][i] = new
        if rng.random() < 0.5:  # keep the claims in step with the label
            c["claims"]["outputs"][i] = [str(y) for y in
                                         (data["labels"][i] if isinstance(data["labels"][i], list)
                                          else [data["labels"][i]])]
        desc = f"label {i}"
    elif kind == "token":
        data = c["dataset"]["data"]
        i = rng.randrange(len(data["sequences"]))
        k = rng.randrange(len(data["sequences"][i]))
        tok = data["sequences"][i][k]
        if isinstance(tok, list):
            tok[rng.randrange(len(tok))] = rng.choice(["0", "1", "1/2", "-3"])
        else:
            data["sequences"][i][k] = rng.randrange(8)
        desc = f"token {i},{k}"
    elif kind == "hint":
        hint = c["hints"].setdefault("softmax", {})
        key = rng.choice(["precision", "epsilon", "taylor_order"])
        hint[key] = rng.choice([2, 8, 64, 4096, 5000, "1/2", "10", "1/4", "0", "1/1000"])
        desc = f"hint {key} = {hint[key]!r}"
    elif kind == "size":
        key = rng.choice(list(c["sizes"]))
        c["sizes"][key] = rng.choice([0, c["sizes"][key] + 1, c["sizes"][key] - 1, 5.0])
        desc = f"size {key}"
    else:
        text = text_of(redigest(c))
        key = rng.choice(['"network":', '"claims":', '"labels":', '"sizes":'])
        dup = {'"network":': '"network":{"input":1},', '"claims":': '"claims":{"outputs":[]},',
               '"labels":': '"labels":[],', '"sizes":': '"sizes":{},'}[key]
        return f"duplicate key {key}", text.replace(key, dup + key, 1)
    return desc, redigest(c, rehash_dataset=rng.random() < 0.7)


def write(tmp: Path, name: str, content: str | Cert) -> Path:
    path = tmp / name
    text = content if isinstance(content, str) else text_of(content)
    path.write_text(text)
    return path


# ---------------------------------------------------------------- the crafted attacks
def _first_weight(c: Cert) -> tuple[list[Any], int, int]:
    """A (row list, i, j) of the first non-zero weight of the first non-embedding layer."""
    for la in c["network"]["layers"]:
        for key in ("weight", "table"):
            if key in la and la["type"] != "embedding":
                return la[key][0], 0, 0
        for m in la.get("maps", []):
            return m["weight"][0], 0, 0
        for h in la.get("heads", []):
            return h["value"][0], 0, 0
    raise AssertionError("no weight")


def crafted(certs: dict[str, Cert], tmp: Path) -> list[tuple[str, Path, int]]:
    """Every attack of the security review, as files with the exit code they must get
    (1 = rejected, 2 = unusable)."""
    cases: list[tuple[str, str | Cert, int]] = []
    m = copy.deepcopy(certs["mahdavi2024-mha"])
    readout = m["network"]["layers"][-1]
    readout["weight"] = [["0" for _ in row] for row in readout["weight"]]
    if readout.get("bias") is not None:
        readout["bias"] = ["0" for _ in readout["bias"]]
    for eps in ("10", "1/2"):
        mm = copy.deepcopy(m)
        mm["hints"]["softmax"]["epsilon"] = eps
        mm["sizes"] = sizes(spec_from_json(mm["network"])).as_dict()
        cases.append((f"mahdavi zero readout, epsilon {eps}", redigest(mm), 1))
    honest = copy.deepcopy(certs["mahdavi2024-mha"])
    honest["hints"]["softmax"]["epsilon"] = "1/2"
    cases.append(("mahdavi genuine network, epsilon 1/2", redigest(honest), 1))
    lk = certs["lookup"]
    text = text_of(lk)
    wrong = copy.deepcopy(lk)
    row, i, j = _first_weight(wrong)
    row[j] = "12345"
    cases.append(("duplicate network key (wrong one first)",
                  text.replace('"network":', '"network":' + json.dumps(wrong["network"],
                               separators=(",", ":")) + ',"network":', 1), 2))
    for form in ("+{}", "{}\n", "٢٨", "２８", "{}/1", "56/2", "-0", " {}"):
        c = copy.deepcopy(lk)
        row, i, j = _first_weight(c)
        row[j] = form.format(row[j]) if "{}" in form else form
        cases.append((f"weight written {form!r}", redigest(c), 2))
    c = copy.deepcopy(lk)
    c["sizes"]["depth"] = float(c["sizes"]["depth"])
    cases.append(("sizes.depth = 5.0", redigest(c), 2))
    c = copy.deepcopy(lk)
    c["sizes"]["depth"] = float("nan")
    cases.append(("NaN in sizes", redigest(c, rehash_dataset=False), 2))
    c = copy.deepcopy(lk)
    c["dataset"]["data"]["labels"][0] = float("nan")
    cases.append(("NaN label", redigest(c, rehash_dataset=False), 2))
    c = copy.deepcopy(lk)
    del c["hints"]
    cases.append(("missing hints", redigest(c), 2))
    c = copy.deepcopy(lk)
    c["dataset"]["path"] = "elsewhere.json"
    cases.append(("data and path together", redigest(c), 2))
    c = copy.deepcopy(lk)
    c["network"]["readout"]["temperature"] = "1"
    cases.append(("unknown field", redigest(c), 2))
    c = copy.deepcopy(lk)
    c["dataset"]["data"]["sequences"], c["dataset"]["data"]["labels"] = [], []
    c["claims"]["outputs"] = []
    cases.append(("empty embedded dataset", redigest(c), 2))
    c = copy.deepcopy(lk)
    row, i, j = _first_weight(c)
    row[j] = "7" * 10 ** 6
    cases.append(("a weight of 10^6 digits", redigest(c), 2))
    cases.append(("10^5 nested brackets", "[" * 10 ** 5 + "]" * 10 ** 5, 2))
    c = copy.deepcopy(lk)
    del c["dataset"]["data"]
    c["dataset"]["path"] = "/dev/zero"
    cases.append(("dataset.path = /dev/zero", redigest(c, rehash_dataset=False), 2))
    d = copy.deepcopy(certs["dana2024-aot"])
    for la in d["network"]["layers"]:
        for h in la.get("heads", []):
            h["query"] = [[_scaled(x, 10 ** 40) for x in r] for r in h["query"]]
    d["sizes"] = sizes(spec_from_json(d["network"])).as_dict()
    cases.append(("dana query weights x 1e40", redigest(d), 1))
    c = copy.deepcopy(lk)
    c["network"]["readout"]["positions"] = "every"
    cases.append(("seq2seq readout on next-token data", redigest(c), 2))
    out = []
    for k, (name, content, code) in enumerate(cases):
        out.append((name, write(tmp, f"attack{k}.json", content), code))
    return out
