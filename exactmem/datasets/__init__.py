"""Dataset generation: random datasets (:mod:`exactmem.datasets.draw`) and random datasets
that satisfy the assumptions of the softmax-attention constructions
(:mod:`exactmem.datasets.draw_attention`)."""
