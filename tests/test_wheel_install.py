"""A non-editable install works away from the checkout: the wheel is built,
installed into a fresh venv, and the user-facing commands run from a folder
outside the repository, importing only the installed packages.

torch and the other dependencies are not downloaded again: the venv sees the
running interpreter's site-packages (``--system-site-packages`` and a ``.pth``
line naming this environment's library folder, which does not activate this
environment's editable install), and the wheel is installed with ``--no-deps``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path

import pytest

from tests.support.workloads import TINY_WORKLOAD

pytestmark = pytest.mark.wheel

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("spyre_adapter", "spyre_shims", "spyre_codemods", "spyre_matrix", "spyre_surface")
#: Not needed to build the wheel (caches, build output, run logs, the repository's own folders).
_TOP_SKIP = {".git", "build", "dist", ".nox", ".pytest_cache", ".hypothesis", "site", "results", "tests", "docs",
             "benchmarks"}


def _skip(folder: str, names: list[str]) -> set[str]:
    top = _TOP_SKIP if Path(folder) == ROOT else set()
    return {n for n in names if n in top or n in ("__pycache__", "junit") or n.endswith(".egg-info")}


BACKEND = '''\
from torch._inductor.codegen.common import register_backend_for_device
from torch._inductor.virtualized import V


def size(node):
    return V.graph.sizevars.size_hint(node.numel)
'''


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv holding the project's wheel (built from a copy of the sources,
    so the build writes nothing into the checkout)."""
    base = tmp_path_factory.mktemp("wheel")
    src = base / "src"
    shutil.copytree(ROOT, src, ignore=_skip)
    dist = base / "dist"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", str(src),
                    "-w", str(dist)], check=True, capture_output=True, text=True)
    (wheel,) = dist.glob("spyre_adapter-*.whl")
    env_dir = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(env_dir)],
                   check=True)
    python = env_dir / "bin" / "python"
    purelib = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                  check=True, capture_output=True, text=True).stdout.strip())
    (purelib / "_spyre_test_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "-q", str(wheel)],
                   check=True, capture_output=True, text=True)
    return env_dir


def _run(venv: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    return subprocess.run(list(args), cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A working folder outside the checkout with a tiny backend tree and workload file."""
    assert not tmp_path.is_relative_to(ROOT)
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "backend.py").write_text(BACKEND)
    (tmp_path / "tiny.yaml").write_text(TINY_WORKLOAD)
    return tmp_path


def test_installed_packages_come_from_the_venv(venv: Path, outside: Path) -> None:
    res = _run(venv, outside, str(venv / "bin" / "python"), "-c",
               f"import importlib; print('\\n'.join(importlib.import_module(p).__file__ for p in {PACKAGES!r}))")
    assert res.returncode == 0, res.stderr
    files = [Path(line) for line in res.stdout.split()]
    assert len(files) == len(PACKAGES)
    for f in files:
        assert f.is_relative_to(venv), f"{f} is not the installed copy"
    # The data the commands read shipped with them.
    for data in ("spyre_surface/surface.toml", "spyre_matrix/releases.toml", "spyre_codemods/data"):
        assert (files[0].parents[1] / data).exists(), data


@pytest.mark.parametrize("command", [
    pytest.param(("run", "--model", "mlp", "--hidden", "64", "--intermediate", "128", "--seq", "8", "--dtype", "fp32"),
                 id="run"),
    pytest.param(("probe",), id="probe"),
    pytest.param(("upgrade", "--from", "2.6", "code"), id="upgrade"),
    pytest.param(("migrate", "code"), id="migrate"),
    pytest.param(("workloads", "tiny.yaml"), id="workloads"),
    pytest.param(("compat-table",), id="compat-table"),
])
def test_command_runs_from_the_installed_wheel(venv: Path, outside: Path, command: tuple[str, ...]) -> None:
    res = _run(venv, outside, str(venv / "bin" / "spyre-adapter"), *command)
    assert res.returncode == 0, textwrap.shorten(res.stdout, 2000) + res.stderr[-3000:]
    assert "Traceback" not in res.stderr
    if command[0] in ("upgrade", "migrate"):  # a diff of the tiny tree, nothing written
        assert "+++ b/code/backend.py" in res.stdout
        assert (outside / "code" / "backend.py").read_text() == BACKEND
    if command[0] == "workloads":
        assert "passed 1" in res.stdout
    if command[0] == "compat-table":  # from the matrix results shipped as package data
        assert "| pass |" in res.stdout
