"""Execution claims on the 1M GPT-2 shape (docs/trained-models.md, "Execution claims"):
certify-model with and without ``--execution`` on the first sequences of a dataset, the
positions claimed for the real-valued function and for every float32 / bfloat16 execution,
and the CPU time of each (self-check included; the ratio is against the first run).

    python scripts/bench_execution.py MODEL DATA --sequences 16
    python scripts/bench_execution.py --standin /tmp/standin --sequences 16
"""

from __future__ import annotations

import argparse
import resource
import time
from pathlib import Path

from exactmem.api.lm import certify_lm
from exactmem.model.dataset import Dataset, load_dataset


def cpu_seconds() -> float:
    """User and system CPU time of this process and its finished children (the checker's
    shards), so that the ratio does not depend on the machine's load."""
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(
        resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def standin(folder: Path, sequences: int) -> tuple[Path, Dataset]:
    """The random stand-in of the 1M GPT-2 shape (4 layers, d 128, weights of std 0.05, seed
    0) in ``folder / "standin"`` (made once) and ``sequences`` self-labelled sequences of
    64 tokens."""
    from exactmem.lm.checkpoints.random_models import random_gpt2, self_labelled

    model = folder / "standin"
    if not model.exists():
        random_gpt2(model, seed=0, layers=4, d_model=128, heads=4, vocab=2048, context=64,
                    std=0.05, bias_std=0.02)
    return model, self_labelled(model, sequences, 64, seed=0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("model", nargs="?")
    ap.add_argument("data", nargs="?")
    ap.add_argument("--standin", metavar="DIR",
                    help="write (once) and use the random stand-in of the 1M shape in DIR")
    ap.add_argument("--sequences", type=int, default=16)
    ap.add_argument("--formats", default="float32,bfloat16")
    ap.add_argument("--skip-real", action="store_true",
                    help="only the execution runs (ratios against the first of them)")
    args = ap.parse_args()
    if args.standin:
        model, ds = standin(Path(args.standin), args.sequences)
    else:
        model = Path(args.model)
        ds = load_dataset(args.data)
    ds = Dataset(task=ds.task, inputs=ds.inputs, vocab_size=ds.vocab_size,
                 sequences=ds.sequences[:args.sequences], labels=ds.labels[:args.sequences])
    runs = ([] if args.skip_real else [None]) + args.formats.split(",")
    base = None
    for fmt in runs:
        clock, cpu0 = time.perf_counter(), cpu_seconds()
        r = certify_lm(model, ds, None, partial=True, execution=fmt)
        took, cpu = time.perf_counter() - clock, cpu_seconds() - cpu0
        base = base or cpu
        print(f"{fmt or 'real-valued':12s} real {r.proved} of {r.positions}, execution "
              f"{r.exec_proved if fmt else '-'}; {cpu:.1f} CPU-s ({cpu / base:.2f}x), "
              f"{took:.1f} s wall; " + ", ".join(f"{k} {v:.1f}" for k, v in r.seconds.items()),
              flush=True)


if __name__ == "__main__":
    main()
