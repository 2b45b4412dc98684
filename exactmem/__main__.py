"""``python -m exactmem``."""

import sys

from exactmem.cli import main

sys.exit(main())
