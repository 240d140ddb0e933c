"""Run these tests on their own: ``pytest examples/minimal_backend``.

PrivateUse1 can be renamed once per process and ``import torch`` would otherwise
autoload the "spyre" device through its entry point, so autoload is switched off
before anything imports torch. Inductor's caches go to a fresh directory so the
first compile of each test really compiles.
"""

import os
import tempfile

os.environ["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", tempfile.mkdtemp(prefix="refdev-inductor-"))
