"""The language-model part of the certificate checker (standard library only;
docs/trained-models.md): :mod:`.lm_verify` checks an ``exactmem.lm-certificate/1``,
:mod:`.lm_model` reads the model, :mod:`.lm_forward` runs it on balls with
:mod:`.lm_bounds`, :mod:`.lm_ops` (rotary positions, SiLU, the gated product) and
:mod:`.lm_trig` (pi, cos, sin), :mod:`.lm_codelength` bounds code lengths."""
