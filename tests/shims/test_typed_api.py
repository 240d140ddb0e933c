"""The stable API is typed: mypy --strict passes on shims/ and on the example
backend that imports it (tools/typecheck.py, also the nox session ``typecheck``).

It runs here, not only on demand, because a new mypy or torch release can turn
a clean check red with no change of ours (torch 2.13 left ``torch.library.Library``
unannotated; a newer mypy stopped narrowing ``type[object]`` to a dataclass).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch
from packaging.version import Version

from spyre_matrix.catalog import load_catalog

ROOT = Path(__file__).resolve().parents[2]
DEVELOPMENT = load_catalog().development

# The typing contract is checked against the development release (as `nox -s
# typecheck` installs it); a matrix cell on another release tests behaviour.
pytestmark = pytest.mark.skipif(Version(torch.__version__).release != Version(DEVELOPMENT).release,
                                reason=f"the stable API is typechecked against torch {DEVELOPMENT}")


def test_stable_api_passes_mypy_strict() -> None:
    pytest.importorskip("mypy")
    run = subprocess.run([sys.executable, str(ROOT / "tools" / "typecheck.py")], cwd=ROOT,
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert run.stdout.count("Success: no issues found") == 2, run.stdout


def test_typecheck_reports_an_error_in_the_stable_api(tmp_path: Path) -> None:
    """The check is not vacuous: the same script fails on a typing error in a copy of shims/."""
    pytest.importorskip("mypy")
    import shutil

    copy = tmp_path / "repo"
    for folder in ("shims", "surface", "examples", "tools"):
        shutil.copytree(ROOT / folder, copy / folder, ignore=shutil.ignore_patterns("__pycache__"))
    target = copy / "shims" / "jsonform.py"
    target.write_text(target.read_text() + "\n\ndef _broken() -> int:\n    return 'not an int'\n")
    run = subprocess.run([sys.executable, str(copy / "tools" / "typecheck.py")], cwd=copy,
                         capture_output=True, text=True, timeout=600)
    assert run.returncode != 0
    assert "jsonform.py" in run.stdout and "Incompatible return value type" in run.stdout, run.stdout
