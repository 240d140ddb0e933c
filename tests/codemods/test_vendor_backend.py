"""The vendor-shaped fixture backend (``fixtures/vendor_backend/vaccel``), migrated and not.

``vaccel`` is written the way out-of-tree Inductor backends are, against torch
2.10: custom scheduling, a layout pass, an ops handler, a post-grad pass, a
lowering, config patching, Dynamo/Inductor device registration. Here it runs on
the installed torch (every compat cell runs this file on its own release):

- migrated by ``migrate --from 2.10``, it must compile and run a small block
  (static and dynamic shapes) with its kernels, passes and lowering all firing,
  matching CPU eager;
- unmigrated, it must fail exactly where the API index says a name it uses is
  missing from the installed release (``DefaultHandler`` before 2.7,
  ``sizevars.size_hint`` from 2.12), and run elsewhere.

Each run is a fresh interpreter: the fixture renames PrivateUse1, which the
"spyre" device autoloaded by ``import torch`` would otherwise hold.
"""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from spyre_codemods.api_index import load_index
from spyre_codemods.driver import Job, run
from spyre_codemods.names import is_internal

FIXTURE = Path(__file__).parent / "fixtures" / "vendor_backend"
WRITTEN_FOR = "2.10"
INSTALLED = ".".join(torch.__version__.split("+")[0].split(".")[:3])
#: the release the window is checked on: "unmigrated fails on at least one of them"
MATRIX_CELLS = ("2.6.0", "2.10.0", "2.15.0")


def _copy(tmp_path: Path) -> Path:
    folder = tmp_path / "src"
    shutil.copytree(FIXTURE / "vaccel", folder / "vaccel", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(FIXTURE / "run_vaccel.py", folder)
    return folder


def _run(folder: Path, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TORCH_DEVICE_BACKEND_AUTOLOAD": "0", "PYTHONPATH": str(folder),
           "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")}
    env.pop("PYTEST_XDIST_WORKER", None)
    return subprocess.run([sys.executable, str(folder / "run_vaccel.py")], env=env, capture_output=True,
                          text=True, timeout=900)


def _internal_imports(folder: Path) -> set[str]:
    """Qualnames the fixture imports from torch internals."""
    found: set[str] = set()
    for path in (folder / "vaccel").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 and is_internal(node.module):
                found.update(f"{node.module}.{a.name}" for a in node.names)
            elif isinstance(node, ast.Import):
                found.update(a.name for a in node.names if is_internal(a.name))
    return found


def _missing_on(release: str, folder: Path) -> list[str]:
    """What the unmigrated fixture uses that ``release`` lacks, per the API index:
    its imports, and the sizevars method it calls (``V.graph.sizevars.size_hint``)."""
    view = load_index().view(release)
    assert view is not None, f"torch {release} is not in the API index"
    missing = sorted(q for q in _internal_imports(folder) if not view.has_module(q) and not view.resolves_qualname(q))
    if view.method("torch._inductor.sizevars.SizeVarAllocator", "size_hint") is None:
        missing.append("size_hint")
    return missing


def test_fixture_is_vendor_shaped() -> None:
    """It drives each extension point the issue names through Inductor's own classes."""
    folder = FIXTURE
    imports = _internal_imports(folder)
    for qualname in ("torch._inductor.scheduler.BaseScheduling", "torch._inductor.ops_handler.DefaultHandler",
                     "torch._inductor.custom_graph_pass.CustomGraphPass", "torch._inductor.lowering.register_lowering",
                     "torch._inductor.codegen.wrapper.PythonWrapperCodegen", "torch._inductor.config",
                     "torch._dynamo.device_interface.DeviceInterface"):
        assert qualname in imports, qualname
    lines = sum(len(p.read_text(encoding="utf-8").splitlines()) for p in (folder / "vaccel").glob("*.py"))
    assert 300 <= lines <= 1000


def test_unmigrated_fixture_fails_on_a_matrix_cell() -> None:
    missing = {release: _missing_on(release, FIXTURE) for release in MATRIX_CELLS}
    assert missing["2.10.0"] == []  # the release it was written for
    assert missing["2.6.0"] == ["torch._inductor.ops_handler.DefaultHandler"]
    assert missing["2.15.0"] == ["size_hint"]


def test_unmigrated_fixture_on_the_installed_release(tmp_path: Path) -> None:
    folder = _copy(tmp_path)
    missing = _missing_on(INSTALLED, folder)
    result = _run(folder, tmp_path)
    if missing:
        assert result.returncode != 0, result.stdout
        assert any(name.rpartition(".")[2] in result.stderr for name in missing), result.stderr[-2000:]
    else:
        assert result.returncode == 0, result.stderr[-4000:]


@pytest.fixture(scope="module")
def migrated(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    tmp_path = tmp_path_factory.mktemp("vaccel")
    folder = _copy(tmp_path)
    report = run([folder / "vaccel"], Job("migrate", WRITTEN_FOR, mode="write"))
    assert not report.errors, [(f.path, f.error) for f in report.errors]
    return folder, report.summary()


def test_migration_rewrites_every_internal_use(migrated: tuple[Path, dict]) -> None:
    folder, summary = migrated
    sites = summary["sites"]
    assert sites["todo"] == 0 and sites["skipped"] == 0
    assert sites["rewritten"] == sites["sites"] >= 20
    assert {"sched", "ops_handlers", "passes", "lowering", "config", "graph", "codegen"} <= set(summary["by_category"])
    assert _internal_imports(folder) == set()
    for path in (folder / "vaccel").glob("*.py"):
        source = path.read_text(encoding="utf-8")
        compile(source, str(path), "exec")
        assert "torch._inductor" not in source and "torch._dynamo" not in source, path
    again = run([folder / "vaccel"], Job("migrate", WRITTEN_FOR, mode="check"))
    assert not again.changed  # idempotent


def test_migrated_fixture_runs_on_the_installed_release(migrated: tuple[Path, dict], tmp_path: Path) -> None:
    folder, _ = migrated
    result = _run(folder, tmp_path)
    assert result.returncode == 0, result.stderr[-4000:]
    stats = json.loads(result.stdout.strip().splitlines()[-1])
    assert stats["torch"] == torch.__version__
    assert stats["graphs"] == 2  # static, then dynamic (reused at the second size)
    assert stats["kernels"] >= 10 and stats["launches"] > stats["kernels"]  # the dynamic graph ran twice
    assert stats["silu_fused"] == 2 and stats["operands_relaid"] == 4  # the post-grad and layout passes fired
    assert stats["max_abs_error"] < 1e-4
