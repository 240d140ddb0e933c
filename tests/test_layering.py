"""The layering is the product: import-linter contracts from pyproject.toml."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _lint(cwd: Path, config: str | None = None) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-c", "import sys; from importlinter.cli import lint_imports_command; "
           "sys.exit(lint_imports_command())"]
    if config:
        cmd += ["--config", config]
    env = {"PYTHONPATH": f"{ROOT}:{cwd}", "PATH": "/usr/bin:/bin", "HOME": str(Path.home())}
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, env=env)


def test_project_contracts_are_kept() -> None:
    res = _lint(ROOT)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "broken" in res.stdout and " 0 broken" in res.stdout


def test_contracts_catch_violations(tmp_path: Path) -> None:
    """The same contract types flag a vendor module that reaches into Inductor,
    including forms grimp cannot see (C extensions, attribute paths)."""
    pkg = tmp_path / "badvendor"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "direct.py").write_text("from torch._inductor.codegen.common import register_backend_for_device\n")
    (pkg / "hidden.py").write_text(textwrap.dedent("""\
        import torch
        def f():
            return torch._C._acc.create_empty_tensor([1], torch.float32)
        def g():
            return torch._inductor.config.max_autotune
    """))
    cfg = tmp_path / "lint.toml"
    cfg.write_text(textwrap.dedent("""\
        [tool.importlinter]
        root_packages = ["badvendor", "torch"]
        contract_types = ["no_source_reference: tests.support.layering_contract.NoSourceReferenceContract"]

        [[tool.importlinter.contracts]]
        name = "direct"
        type = "forbidden"
        source_modules = ["badvendor"]
        forbidden_modules = ["torch._inductor"]
        allow_indirect_imports = true

        [[tool.importlinter.contracts]]
        name = "hidden"
        type = "no_source_reference"
        source_modules = ["badvendor"]
        forbidden = ["torch._inductor", "torch._C._acc"]
    """))
    res = _lint(tmp_path, str(cfg))
    assert res.returncode != 0
    out = res.stdout
    assert "badvendor.direct -> torch._inductor" in out
    assert "badvendor.hidden:3 references torch._C._acc" in out
    assert "badvendor.hidden:5 references torch._inductor" in out
