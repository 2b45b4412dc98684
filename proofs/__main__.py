"""``python -m proofs [FILTER] [--quick]``: run the proof obligations, one line per lemma
(the same as ``exactmem prove``)."""

import sys

from exactmem.cli import main

sys.exit(main(["prove", *sys.argv[1:]]))
