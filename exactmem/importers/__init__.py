"""Importers: a user's model file read exactly as a :class:`~exactmem.model.NetworkSpec`.

* :mod:`exactmem.importers.import_model`: a state dict or safetensors file in the export
  layout (docs/model-layout.md);
* :mod:`exactmem.importers.model_kinds`: what ``certify-model`` reads and refuses;
* :mod:`exactmem.importers.aot_fold`: Dana et al.'s attention-only model.

Language-model checkpoints are read in :mod:`exactmem.lm.checkpoints`.  Importing this
package loads no torch; a missing optional package is :func:`exactmem.optional.missing`'s
error.
"""
