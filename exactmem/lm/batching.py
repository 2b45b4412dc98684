"""How many sequences the language-model stages hold at once: a batch is sized so that its
logit arrays ``[B, n, vocab]`` (the largest the float64 pass and the producer's balls make)
hold about :data:`CELLS` float64 values, so that memory is bounded by the model's shape and
not by the dataset (GPT-2 small at context 1,024: one sequence a batch, 412 MB an array)."""

from __future__ import annotations

from exactmem.lm.decoder import LMSpec

CELLS = 1 << 23  # float64 values in one [B, n, vocab] array of a batch (64 MiB)
MAX_BATCH = 64  # sequences a batch at most (the producer's batch at small shapes)


def batch_for(spec: LMSpec, n: int) -> int:
    """Sequences of ``n`` tokens a batch: at most :data:`MAX_BATCH`, and at most
    :data:`CELLS` logits ``n * vocab`` each (at least one sequence)."""
    widest = max(spec.vocab_size, spec.d_ff, 3 * spec.d_model)
    return max(1, min(MAX_BATCH, CELLS // max(1, n * widest)))
