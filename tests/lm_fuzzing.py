"""Fuzzing the language-model checker: genuine bases, a crafted corpus (near ties,
degenerate heads, extreme scales, code-length claims at the edge) and mutations of every
field, each answer judged by the independent mpmath reference (tests/lm_reference.py).
Used by tests/lm/test_lm_fuzz.py (a small count) and scripts/fuzz_lm_checker.py (10^4)."""

from __future__ import annotations

import copy
import gzip
import json
import random
import re
import time
from collections.abc import Callable
from dataclasses import replace
from fractions import Fraction
from pathlib import Path
from typing import Any

import mpmath
import numpy as np
from lm_crafted import digits, next_token_dataset, redigest, self_labelled, small_spec
from lm_reference import code_lengths, judge

from exactmem.checker.cert_dataset import canonical
from exactmem.checker.lm import lm_verify
from exactmem.checker.verify import check_file
from exactmem.lm.certfile import build_lm_certificate
from exactmem.lm.decoder import LMSpec
from exactmem.model.dataset import Dataset

Cert = dict[str, Any]


def _provable(cert: Cert) -> Cert:
    """``cert`` claiming only the positions the checker proves (partial), re-digested."""
    unproved: list[tuple[int, int]] = []
    lm_verify.check(copy.deepcopy(cert), Path("."), unproved=unproved)
    c = copy.deepcopy(cert)
    c["claims"]["partial"] = True
    c["claims"]["positions"] = [[p for p in row if (i, p) not in set(unproved)]
                                for i, row in enumerate(c["claims"]["positions"])]
    return redigest(c)


def _with_code_lengths(cert: Cert, slack: Fraction = Fraction(1, 1 << 20)) -> Cert:
    """Claims of the true code length (reference, 400 bits) plus ``slack`` rounded up to
    ``2**-32``."""
    c = copy.deepcopy(cert)
    out = []
    for x in code_lengths(c):
        units = int(mpmath.ceil((x + mpmath.mpf(slack.numerator) / slack.denominator)
                                * 2 ** 32))
        out.append(_text(Fraction(units, 1 << 32)))
    c["claims"]["code_length_bits"] = out
    return redigest(c)


def _text(x: Fraction) -> str:
    return digits(x.numerator) if x.denominator == 1 else \
        f"{digits(x.numerator)}/{digits(x.denominator)}"


def _all_positions(spec: LMSpec, ds: Dataset, coded: bool = False) -> Cert:
    claims = [list(range(spec.context))] * len(ds.sequences)
    cert = build_lm_certificate(spec, ds, claims, partial=False,
                                code_lengths=[Fraction(10 ** 6)] * len(ds.sequences)
                                if coded else None)
    return cert


def genuine() -> dict[str, Cert]:
    """Genuine certificates of several architectures: the positions the checker proves
    claimed; two with code-length claims (the true code length plus ``2**-20``)."""
    out = {}
    variants: dict[str, dict[str, Any]] = {
        "pre-ln gelu_tanh tied": dict(spec=dict(layers=2, tied=True)),
        "post-ln relu": dict(spec=dict(act="relu"), arch=dict(norm_first=False)),
        "rmsnorm gelu_erf": dict(spec=dict(act="gelu_erf", heads=1),
                                 arch=dict(norm="rmsnorm")),
        "no final norm": dict(spec=dict(seed=8), arch=dict(final_norm=False)),
    }
    for name, kw in variants.items():
        spec = small_spec(**kw["spec"])
        arch = dict(kw.get("arch", {}))
        if arch.get("final_norm") is False:
            arch["tensors"] = {k: v for k, v in spec.tensors.items() if not k.startswith("lnf")}
        spec = replace(spec, **arch)
        out[name] = _provable(_all_positions(spec, self_labelled(spec, 3)))
    spec = small_spec(seed=9)
    out["code lengths"] = _with_code_lengths(_provable(_all_positions(
        spec, next_token_dataset(spec, 3), coded=True)))
    spec = small_spec(seed=10, v=3, t=4)
    out["code lengths, repeats"] = _with_code_lengths(_provable(_all_positions(
        spec, next_token_dataset(spec, 0, sequences=[[0, 1, 2, 0, 1]] * 3 + [[2, 2, 1, 0, 0]]),
        coded=True)))
    return out


# ---------------------------------------------------------------- crafted models

def _spec(rng: random.Random) -> LMSpec:
    d = rng.choice([2, 4, 6, 8])
    heads = rng.choice([h for h in (1, 2, 3, 4) if d % h == 0])
    spec = small_spec(seed=rng.randrange(1 << 30), v=rng.randint(1, 9), t=rng.randint(1, 5),
                      d=d, heads=heads, layers=rng.randint(1, 2), d_ff=rng.randint(1, 8),
                      tied=rng.random() < 0.5, std=rng.choice([0.05, 0.5, 1.0, 3.0]),
                      act=rng.choice(["gelu_tanh", "gelu_erf", "relu"]))
    arch: dict[str, Any] = {}
    if rng.random() < 0.3:
        arch["norm_first"] = False
    if rng.random() < 0.3:
        arch["norm"] = "rmsnorm"
    if rng.random() < 0.2:
        arch["final_norm"] = False
        arch["tensors"] = {k: v for k, v in spec.tensors.items() if not k.startswith("lnf")}
    return replace(spec, **arch)


def _edit(spec: LMSpec, rng: random.Random) -> tuple[str, LMSpec]:
    """One crafted feature: a near tie, a degenerate head, a zero gain or layer, an
    extreme scale."""
    t = {k: v.copy() for k, v in spec.tensors.items()}
    d, dh = spec.d_model, spec.d_model // spec.heads
    kind = rng.choice(["near tie", "zero query", "zero key", "zero value", "zero gain",
                       "zero layer", "scale up", "scale down", "tiny eps", "plain"])
    head = "wte" if spec.tied_head else "head"
    if kind == "near tie" and spec.vocab_size > 1:
        a, b = rng.sample(range(spec.vocab_size), 2)
        t[head][a] *= 4  # rows a and b lead the logits, and are equal but for one
        t[head][b] = t[head][a]  # coordinate: 0 and +-2^-k
        j = rng.randrange(d)
        k = rng.choice([0, 20, 60, 120, 200, 400])
        t[head][a, j] = 0.0
        t[head][b, j] = np.ldexp(rng.choice([1.0, -1.0]), -k) if k else 0.0
        kind = (f"near tie 2^-{k}" if k else "near tie 0 (exact)") + f" rows {a} {b}"
    elif kind.startswith("zero ") and kind != "zero gain" and kind != "zero layer":
        part = "qkv".index(kind.split()[1][0])
        h = rng.randrange(spec.heads)
        lo = part * d + h * dh
        t["h0.attn.weight"][:, lo:lo + dh] = 0
        t["h0.attn.bias"][lo:lo + dh] = 0
    elif kind == "zero gain":
        name = rng.choice([k for k in t if k.endswith("ln1.weight") or k.endswith(
            "ln2.weight") or k == "lnf.weight"])
        t[name][:] = 0
        kind += f" {name}"
    elif kind == "zero layer":
        for k in t:
            if k.startswith("h0."):
                t[k][...] = 0
    elif kind in ("scale up", "scale down"):
        name = rng.choice(sorted(t))
        e = rng.choice([8, 30, 100, 400]) * (1 if kind == "scale up" else -1)
        t[name] = np.ldexp(t[name], e)
        kind += f" {name} 2^{e}"
    elif kind == "tiny eps":
        return kind, replace(spec, tensors=t, layer_norm_eps=2.0 ** -rng.choice([30, 200, 1000]))
    return kind, replace(spec, tensors=t)


def crafted(count: int, seed: int) -> list[tuple[str, Cert]]:
    """``count`` crafted certificates of random small models with one crafted feature,
    labelled by float64 argmax (so near ties may be labelled either way), every position
    claimed or the provable ones, or code lengths claimed near the true value (above or
    below it by ``2**-k``)."""
    rng = random.Random(seed)
    out = []
    while len(out) < count:
        kind, spec = _edit(_spec(rng), rng)
        try:
            with np.errstate(all="ignore"):
                ds = self_labelled(spec, rng.randint(1, 3), seed=rng.randrange(1 << 20))
        except Exception:  # float64 overflow of a crafted scale: labels from random tokens
            ds = next_token_dataset(spec, 2, seed=rng.randrange(1 << 20))
        tie = re.search(r"rows (\d+) (\d+)", kind)
        if tie and rng.random() < 0.5:  # the labels of the tied pair swapped: the lower one
            a, b = int(tie[1]), int(tie[2])
            swap = {a: b, b: a}
            ds = replace(ds, labels=tuple(tuple(swap.get(y, y) for y in row)
                                          for row in ds.labels))
            kind += " swapped"
        claim = "all" if tie and rng.random() < 0.7 else rng.choice(["all", "provable", "code"])
        if claim == "code":
            ds = next_token_dataset(spec, rng.randint(1, 3), seed=rng.randrange(1 << 20))
            cert = _all_positions(spec, ds, coded=True)
            cert["claims"]["positions"] = [[] for _ in ds.sequences]
            cert["claims"]["partial"] = True
            k = rng.choice([8, 20, 40, 60])
            sign = rng.choice([1, -1])
            try:
                cert = _with_code_lengths(redigest(cert), Fraction(sign, 1 << k))
            except (ValueError, ZeroDivisionError, OverflowError):
                continue  # mpmath on a norm of zero: not a case the corpus needs
            kind += f", code length {'+' if sign > 0 else '-'}2^-{k}"
        else:
            cert = _all_positions(spec, ds)
            if claim == "provable":
                cert = _provable(cert)
        out.append((f"{kind}; {claim}", cert))
    return out


# ---------------------------------------------------------------- mutations

def _tensor_names(c: Cert) -> list[str]:
    return sorted(c["model"]["tensors"])


def mutate(cert: Cert, rng: random.Random) -> tuple[str, Cert | str]:
    """One mutation of one field (or of the text), usually re-digested (and the dataset
    re-hashed) so that only the edit is judged; returns ``(what, certificate or text)``."""
    c = copy.deepcopy(cert)
    m, ts, claims = c["model"], c["model"]["tensors"], c["claims"]
    data = c["dataset"]["data"]
    n, seqs = len(data["sequences"][0]), data["sequences"]
    pick = rng.randrange(100)
    what = ""
    if pick < 10:
        key = rng.choice(["vocab_size", "context", "d_model", "heads", "layers", "d_ff"])
        value = rng.choice([m[key] + 1, m[key] - 1, 0, True, str(m[key]), 1 << 17,
                            10 ** 30])
        m[key] = value
        what = f"model.{key} = {str(value)[:20]}"
    elif pick < 20:
        key = rng.choice(["architecture", "activation", "norm", "tied_head", "final_norm",
                          "layer_norm_eps"])
        options = {"architecture": ["pre-ln-decoder", "post-ln-decoder", "decoder"],
                   "activation": ["gelu_tanh", "gelu_erf", "relu", "silu"],
                   "norm": ["layernorm", "rmsnorm", None],
                   "tied_head": [True, False, 1],
                   "final_norm": [False, True, None],
                   "layer_norm_eps": ["0", "1/3", "1/1000", "-1/2", "2/4", "1" + "0" * 30,
                                      "1/" + "9" * 2000, 1e-5]}[key]
        value = rng.choice(options)
        if value is None:
            m.pop(key, None)
        else:
            m[key] = value
        what = f"model.{key} = {str(value)[:20]}"
    elif pick < 45:
        name = rng.choice(_tensor_names(c))
        t = ts[name]
        k = rng.randrange(len(t["values"]))
        op = rng.choice(["+1", "neg", "x2^k", "zero", "big", "scale", "shape", "drop",
                         "zero all", "noncanonical"])
        if op == "+1":
            t["values"][k] = str(int(t["values"][k]) + rng.choice([1, -1]))
        elif op == "neg":
            t["values"][k] = str(-int(t["values"][k]))
        elif op == "x2^k":
            e = rng.choice([1, 10, 60, 1000])
            t["values"] = [digits(int(v) << e) for v in t["values"]]
            t["scale"] = t["scale"] + rng.choice([0, e])
        elif op == "zero":
            t["values"][k] = "0"
        elif op == "big":
            t["values"][k] = rng.choice(["", "-"]) + "9" * rng.choice([30, 400, 20000, 20001])
        elif op == "scale":
            t["scale"] = rng.choice([t["scale"] + 1, t["scale"] - 1, 0, 1100, 1101, True])
        elif op == "shape":
            s = list(t["shape"])
            s[0] = rng.choice([True, s[0] + 1, float(s[0]), "1"])
            t["shape"] = s
        elif op == "drop":
            ts.pop(name)
        elif op == "zero all":
            t["values"] = ["0"] * len(t["values"])
            t["scale"] = 0
        else:
            t["values"][k] = rng.choice(["+1", "01", " 1", "1.0", "１", "-0"])
        what = f"tensor {name} {op}"
    elif pick < 55:
        i = rng.randrange(len(seqs))
        op = rng.choice(["token", "label", "vocab", "duplicate", "swap", "sha"])
        if op == "token":
            p = rng.randrange(n)
            seqs[i][p] = rng.randrange(data["vocab_size"] + 1)
        elif op == "label":
            p = rng.randrange(n)
            data["labels"][i][p] = rng.randrange(m["vocab_size"] + 1)
        elif op == "vocab":
            data["vocab_size"] = rng.choice([data["vocab_size"] + 1, data["vocab_size"] - 1,
                                             10 ** 40])
        elif op == "duplicate":
            seqs.append(list(seqs[i]))
            data["labels"].append(list(data["labels"][i]))
            claims["positions"].append(list(claims["positions"][i]))
            if "code_length_bits" in claims:
                claims["code_length_bits"].append(claims["code_length_bits"][i])
        elif op == "swap" and len(seqs) > 1:
            seqs[0], seqs[-1] = seqs[-1], seqs[0]
        else:
            c["dataset"]["sha256"] = "0" * 64
        what = f"dataset {op}"
        if op != "sha" and rng.random() < 0.9:
            redigest(c, rehash_dataset=True)
            return what, c
    elif pick < 75:
        i = rng.randrange(len(seqs))
        op = rng.choice(["add", "remove", "partial", "unsorted", "range", "lower", "raise",
                         "zero", "huge", "tiny", "negative", "add code", "drop code"])
        row = claims["positions"][i]
        if op == "add":
            free = [p for p in range(n) if p not in row]
            if free:
                row.append(rng.choice(free))
                row.sort()
        elif op == "remove" and row:
            row.pop(rng.randrange(len(row)))
        elif op == "partial":
            claims["partial"] = not claims["partial"]
        elif op == "unsorted" and len(row) > 1:
            row.reverse()
        elif op == "range":
            row.append(n)
        elif op in ("lower", "raise", "zero", "huge", "tiny", "negative") and \
                "code_length_bits" in claims:
            x = Fraction(claims["code_length_bits"][i])
            e = rng.choice([4, 20, 32, 60])
            x = {"lower": x - Fraction(1, 1 << e), "raise": x + Fraction(1, 1 << e),
                 "zero": Fraction(0), "huge": Fraction(10 ** 19999),
                 "tiny": Fraction(1, 10 ** 19999 + 1), "negative": -x}[op]
            claims["code_length_bits"][i] = _text(x)
        elif op == "add code":
            claims["code_length_bits"] = [str(rng.choice([0, 10, 10 ** 6]))] * len(seqs)
        elif op == "drop code":
            claims.pop("code_length_bits", None)
        what = f"claims {op}"
    elif pick < 80:
        c["digest"] = rng.choice([cert["digest"], "sha256:" + "0" * 64, "", 7])
        return "digest", c
    else:
        text = canonical(c)
        op = rng.choice(["duplicate key", "bom", "trailing", "nan", "float", "truncate",
                         "gzip", "unknown key", "missing key"])
        if op == "duplicate key":
            text = text.replace('{"architecture":', '{"architecture":"post-ln-decoder",'
                                '"architecture":', 1)
        elif op == "bom":
            text = "\ufeff" + text
        elif op == "trailing":
            text += " x"
        elif op == "nan":
            text = text.replace('"partial":', '"partial":NaN,"x":', 1)
        elif op == "float":
            text = re.sub(r'"context":\d+', '"context":4.0', text, count=1)
        elif op == "truncate":
            text = text[:rng.randrange(len(text))]
        elif op == "gzip":
            return "gzip", "gzip:" + text
        elif op == "unknown key":
            c["claims"]["extra"] = 1
            return "unknown key", redigest(c)
        else:
            c.pop("claims")
            return "missing key", c
        return op, text
    if rng.random() < 0.95:
        redigest(c)
    return what, c


# ---------------------------------------------------------------- running

CLAIM = re.compile(r"c claim: (\d+) of (\d+) positions")
CODE = re.compile(r"code length at most (\d+) bits for the (\d+) distinct")


def write(path: Path, content: Cert | str) -> Path:
    if isinstance(content, str) and content.startswith("gzip:"):
        path.write_bytes(gzip.compress(content[5:].encode()))
    elif isinstance(content, str):
        path.write_text(content, encoding="utf-8")
    else:
        try:
            path.write_text(canonical(content))
        except (TypeError, ValueError):
            path.write_text(json.dumps(content))
    return path


def run_one(path: Path, content: Cert | str) -> dict[str, Any]:
    """Check the file, time it, and judge an accepted one with the reference: a false
    accept is a verdict of VERIFIED whose claims are not all true (or whose stated counts
    differ from the claims), a crash is any exception or a missing verdict."""
    start = time.perf_counter()
    try:
        report = check_file(path)
        verdict = report.verdict
    except Exception as exc:  # a crash
        return {"verdict": "crash", "seconds": time.perf_counter() - start,
                "why": f"{type(exc).__name__}: {exc}"[:300], "false": False}
    seconds = time.perf_counter() - start
    out = {"verdict": verdict, "seconds": seconds, "why": "", "false": False}
    if report.verified:
        text = content[5:] if isinstance(content, str) and content.startswith("gzip:") \
            else content
        cert = json.loads(text) if isinstance(text, str) else text
        ok, why = judge(cert)
        claim = report.claim or ""
        got = CLAIM.search("c claim: " + claim)
        if ok and got:
            claimed = sum(len(r) for r in cert["claims"]["positions"])
            if int(got[1]) != claimed:
                ok, why = False, f"states {got[1]} positions, claims {claimed}"
        code = CODE.search(claim)
        if ok and code:
            seen, total = set(), mpmath.mpf(0)
            for x, s, y in zip(code_lengths(cert), cert["dataset"]["data"]["sequences"],
                               cert["dataset"]["data"]["labels"], strict=False):
                key = (tuple(s), tuple(y))
                if key not in seen:
                    seen.add(key)
                    total += x
            if int(code[2]) != len(seen) or int(code[1]) < total:
                ok, why = False, f"code-length line {code[0]!r}, true total {total}"
        out["false"] = not ok
        out["why"] = why
    return out


def campaign(mutations: int, seed: int, tmp: Path, bases: dict[str, Cert],
             log: Callable[[str], None] | None = None) -> list[dict[str, Any]]:
    """``mutations`` mutations spread over ``bases``; one row per file."""
    rng = random.Random(seed)
    rows = []
    names = sorted(bases)
    for k in range(mutations):
        base = names[k % len(names)]
        what, content = mutate(bases[base], rng)
        row = run_one(write(tmp / f"m{k % 8}.json", content), content)
        row.update(base=base, what=what)
        rows.append(row)
        if log is not None and (row["false"] or row["verdict"] == "crash"):
            log(f"{base}: {what}: {row['verdict']} {row['why']}")
    return rows
