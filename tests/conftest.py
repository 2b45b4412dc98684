from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

# verification records (exactmem.api.verified) go to a fresh folder per test process, never
# to the user's cache
if "EXACTMEM_CACHE" not in __import__("os").environ:
    import atexit
    import os
    import shutil
    import tempfile

    os.environ["EXACTMEM_CACHE"] = tempfile.mkdtemp(prefix="exactmem-verified-")
    atexit.register(shutil.rmtree, os.environ["EXACTMEM_CACHE"], ignore_errors=True)
