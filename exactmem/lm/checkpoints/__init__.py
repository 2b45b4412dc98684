"""Checkpoint importers of the language-model wing, one module per family: Hugging Face
GPT-2 (:mod:`.gpt2`), GPT-NeoX (:mod:`.gpt_neox`), LLaMA / Qwen2 / Mistral (:mod:`.llama`),
with the ``save_pretrained`` layouts they share in :mod:`.hf_files`; nanoGPT
(:mod:`.nanogpt`), stacks of torch ``nn.TransformerEncoderLayer`` (:mod:`.torch_encoder`),
live torch modules (:mod:`.live_module`); random checkpoints for tests and demos
(:mod:`.random_models`) and the other readings a config could have mistyped
(:mod:`.readings`).  Each reads a checkpoint exactly into an
:class:`~exactmem.lm.decoder.LMSpec` and offers the checkpoint's own float64 forward pass for
the cross-check.
"""
