"""The language-model wing: trained decoders (GPT-2, nanoGPT, torch encoder stacks) as an
:class:`~exactmem.lm.decoder.LMSpec`, the block written once over operations
(:mod:`exactmem.lm.block`) and run in each arithmetic domain -- float64
(:mod:`exactmem.lm.float64`), entry-wise balls (:mod:`exactmem.lm.balls`,
:mod:`exactmem.lm.ball_steps`), norm balls (:mod:`exactmem.lm.normballs`), python-flint arb
(:mod:`exactmem.lm.arb`), torch and ONNX for exports (:mod:`exactmem.lm.torchrun`,
:mod:`exactmem.lm.onnx_graph`) -- the position proofs (:mod:`exactmem.lm.positions`,
:mod:`exactmem.lm.split`), code lengths, the certificate (:mod:`exactmem.lm.certfile`), the
export (:mod:`exactmem.lm.exporting`) and the checkpoint importers
(:mod:`exactmem.lm.checkpoints`).  The checker re-proves certificates with its own wiring
(``exactmem/checker``).

Import the submodule you need; importing this package loads neither torch nor flint.
"""
