"""mypy --strict on the stable API and on the example backend, as a vendor sees them.

    python tools/typecheck.py          exit status: mypy's (0: no errors)

Checks ``shims/`` (without the private ``_torch`` package) and
``examples/minimal_backend/minimal_backend.py``. Imports are followed into
torch and ``spyre_shims._torch`` without reporting their errors. mypy finds
packages by folder name and cannot follow an editable install's import hook,
so the stable API (folder ``shims/``) and the surface declaration it reads
(folder ``surface/``) are linked under their installed names in a temporary
folder put on ``MYPYPATH``. The nox session ``typecheck`` and the test suite
both run this script.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: sympy ships no types; everything else the stable API imports is checked
FLAGS = ("--strict", "--follow-imports=silent", "--disable-error-code=import-untyped")
LINKED = {"spyre_shims": "shims", "spyre_surface": "surface"}
TARGETS = (("--exclude", "shims/_torch/", "shims"), ("examples/minimal_backend/minimal_backend.py",))


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="typecheck-") as tmp:
        for name, folder in LINKED.items():
            (Path(tmp) / name).symlink_to(ROOT / folder, target_is_directory=True)
        env = {**os.environ, "MYPYPATH": tmp}
        status = 0
        for target in TARGETS:
            cmd = [sys.executable, "-m", "mypy", *FLAGS, "--cache-dir", str(Path(tmp) / "cache"), *target]
            status = subprocess.run(cmd, cwd=ROOT, env=env).returncode or status
        return status


if __name__ == "__main__":
    sys.exit(main())
