"""The example backend (examples/minimal_backend) and what the docs publish.

The example registers its own device, and PrivateUse1 can be renamed once per
process, so it runs in a fresh interpreter with ``TORCH_DEVICE_BACKEND_AUTOLOAD=0``.
Python blocks of the README's backend section and of the docs pages run the same
way, and the emulator guide's field tables are checked against a real report, so
what the docs show is what works.
"""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.support.layering_contract import violations_in

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "minimal_backend"
BACKEND_FILE = EXAMPLE / "minimal_backend.py"
GUIDES = sorted((ROOT / "docs").glob("**/*.md"))
FENCE = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
INCLUDE = re.compile(r'^--8<-- "([^"]+)"$', re.M)  # pymdownx.snippets, as mkdocs.yml configures it
LEGACY = ROOT / "docs" / "snippets" / "legacy_backend.py"


def _isolated_env(tmp_path: Path, *, autoload: bool = False) -> dict[str, str]:
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")}
    env.pop("PYTEST_XDIST_WORKER", None)
    env["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "1" if autoload else "0"
    return env


def _forbidden_references() -> list[str]:
    """What the project's own layering contract forbids outside shims/, plus the
    shims' private package and the Spyre backend."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    forbidden = {f for c in config if c["type"] == "no_source_reference" for f in c["forbidden"]}
    return sorted(forbidden | {"spyre_shims._torch", "spyre_adapter"})


def _imported_modules(source: str) -> set[str]:
    out: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
            out.update(f"{node.module}.{a.name}" for a in node.names if node.module == "spyre_shims")
    return out


def test_example_backend_uses_only_the_public_stable_api() -> None:
    source = BACKEND_FILE.read_text()
    forbidden = _forbidden_references()
    assert violations_in(source, forbidden) == []
    modules = _imported_modules(source)
    shims = sorted(m for m in modules if m.startswith("spyre_shims"))
    assert shims and all(not part.startswith("_") for m in shims for part in m.split(".")), shims
    tops = {m.split(".")[0] for m in modules}
    assert tops <= {"__future__", "collections", "sympy", "torch", "spyre_shims"}, tops
    # The same check flags a backend that reaches past the stable API.
    bad = "import torch\nfrom spyre_shims._torch import bridge\nx = torch._inductor.config\n"
    assert {line for line, _ in violations_in(bad, forbidden)} == {2, 3}


def test_example_backend_is_one_short_file() -> None:
    code = [line for line in BACKEND_FILE.read_text().splitlines() if line.strip()]
    assert len(code) <= 60, f"{len(code)} non-blank lines: the example must stay readable in one page"


def test_example_backend_passes_its_own_tests(tmp_path: Path) -> None:
    res = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", str(EXAMPLE)],
        cwd=EXAMPLE, env=_isolated_env(tmp_path), capture_output=True, text=True, timeout=900,
    )
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-2000:]
    counts = re.search(r"(\d+) passed", res.stdout)
    assert counts and int(counts.group(1)) >= 7 and " failed" not in res.stdout, res.stdout[-2000:]


def _readme_backend_snippet() -> str:
    text = (ROOT / "README.md").read_text()
    section = text.split("## Writing a backend on the stable API", 1)[1]
    match = FENCE.search(section)
    assert match, "README: no python block in 'Writing a backend on the stable API'"
    return match.group(1)


def test_readme_backend_snippet_compiles_and_runs(tmp_path: Path) -> None:
    driver = (
        "import torch\n"
        "x = torch.randn(8, 33)\n"
        "y = torch.compile(lambda a: torch.softmax(a, -1) @ a.t())(x.to('mydev'))\n"
        "torch.testing.assert_close(y.cpu(), torch.softmax(x, -1) @ x.t())\n"
        "print('ok', y.device)\n"
    )
    script = tmp_path / "readme_snippet.py"
    script.write_text(_readme_backend_snippet() + "\n" + driver)
    res = subprocess.run([sys.executable, str(script)], env=_isolated_env(tmp_path), capture_output=True,
                         text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    assert res.stdout.strip().endswith("ok mydev:0")


def _doc_pages_with_python() -> list[Path]:
    return [p for p in GUIDES if FENCE.search(p.read_text())]


@pytest.mark.parametrize("page", _doc_pages_with_python(), ids=lambda p: str(p.relative_to(ROOT)))
def test_docs_python_blocks_run(page: Path, tmp_path: Path) -> None:
    """Every ```python block of a docs page (with its snippet includes), in order, as one
    script; ```py blocks are shown, not run (code for one other torch release). A page
    that registers its own device runs without the spyre autoload; others get "spyre"."""
    blocks = (m.group(1) for m in FENCE.finditer(page.read_text()))
    code = "\n".join(INCLUDE.sub(lambda m: (ROOT / m.group(1)).read_text(), block) for block in blocks)
    script = tmp_path / "page.py"
    script.write_text(code)
    own_device = "register_host_device(" in code or "minimal_backend" in code
    env = _isolated_env(tmp_path, autoload=not own_device)
    env["PYTHONPATH"] = os.pathsep.join([str(EXAMPLE), env.get("PYTHONPATH", "")])
    res = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=600)
    assert res.returncode == 0, f"{page}:\n{res.stderr[-3000:]}"


def _documented_fields(text: str, table: str) -> set[str]:
    """The backticked names in the first column of the table after ``<!-- fields: table -->``."""
    section = text.split(f"<!-- fields: {table} -->", 1)[1].strip().split("\n\n", 1)[0]
    rows = [line for line in section.splitlines()[2:] if line.startswith("|")]
    return {name for row in rows for name in re.findall(r"`(\w+)`", row.split("|")[1])}


def test_emulator_report_guide_matches_the_report_and_trace(tmp_path: Path) -> None:
    """Every JSON field and trace lane the guide documents exists, and nothing is undocumented."""
    report, trace = tmp_path / "r.json", tmp_path / "t.json"
    res = subprocess.run([sys.executable, "-m", "spyre_adapter.cli", "run", "--model", "mlp", "--json", str(report),
                          "--trace", str(trace)], env=_isolated_env(tmp_path, autoload=True), capture_output=True,
                         text=True, timeout=600)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    guide = (ROOT / "docs" / "guides" / "emulator-report.md").read_text()
    data = json.loads(report.read_text())
    kernels = data["kernels"]
    assert _documented_fields(guide, "top") == set(data)
    assert _documented_fields(guide, "device") == set(data["device"])
    assert _documented_fields(guide, "kernel") == set().union(*(k.keys() for k in kernels))
    for kind in ("matmul", "loop"):
        plans = [k["plan"] for k in kernels if k["kind"] == kind]
        assert plans, f"the mlp model has no {kind} kernel any more: pick another model here"
        seen = set().union(*(d.keys() for d in plans))
        assert seen == _documented_fields(guide, f"plan-{kind}")
    events = json.loads(trace.read_text())["traceEvents"]
    lanes = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e["name"] == "thread_name"}
    processes = {e["pid"]: e["args"]["name"] for e in events if e["name"] == "process_name"}
    assert processes[0] == "kernels" and all(processes[p] == f"core {p - 1}" for p in processes if p)
    trace_section = guide.split("## The trace", 1)[1]
    layout = {(int(tid), lane) for tid, lane in re.findall(r"\| (\d) `(\w+)` \| `", trace_section)}
    assert {(tid, name) for (_, tid), name in lanes.items()} == layout
    documented = {lane: set(re.findall(r"`(\w+)(?: <buffer>)?`", row)) for lane, row in
                  re.findall(r"\| \d `(\w+)` \|([^\n]*)", trace_section)}
    for e in events:
        if e["ph"] == "X" and e["pid"] > 0:
            assert e["name"].split()[0] in documented[lanes[e["pid"], e["tid"]]], e
        elif e["ph"] == "X":
            assert e["cat"] == "kernel"


def test_migrated_legacy_backend_runs_on_the_installed_torch(tmp_path: Path) -> None:
    """The upgrade guide's example: `migrate` output imports only the stable API and
    registers the backend with Inductor through spyre_shims.compat."""
    legacy = tmp_path / LEGACY.name
    legacy.write_text(LEGACY.read_text())
    res = subprocess.run([sys.executable, "-m", "spyre_codemods", "migrate", "--from", "2.8", "--write",
                          "--no-progress", str(legacy)], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    migrated = legacy.read_text()
    assert "torch._inductor" not in migrated and "from spyre_shims.compat import" in migrated
    check = textwrap.dedent("""
        import inspect
        from torch._inductor.codegen import common
        from spyre_shims.errors import UnsupportedTorchError

        has_pass = "device_custom_pass" in inspect.signature(common.register_backend_for_device).parameters
        try:
            exec(compile(open(PATH).read(), PATH, "exec"), {"__name__": "legacy"})
        except UnsupportedTorchError as err:  # custom_pass before torch 2.8
            assert not has_pass and "custom_pass" in str(err), err
            print("refused")
        else:
            assert has_pass
            assert common.get_scheduling_for_device("mydev").__name__ == "MyScheduling"
            print("registered")
    """).replace("PATH", repr(str(legacy)))
    res = subprocess.run([sys.executable, "-c", "import torch\n" + check], env=_isolated_env(tmp_path),
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    assert res.stdout.strip() in ("registered", "refused")


def test_docs_site_builds_without_warnings(tmp_path: Path) -> None:
    """`mkdocs build --strict` (what `nox -s docs` runs): any warning, a broken link, a
    reference to a missing object or a failing generator fails the build."""
    pytest.importorskip("mkdocs")
    pytest.importorskip("material")
    pytest.importorskip("mkdocstrings_handlers.python")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    res = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-4000:]
    assert "WARNING" not in res.stderr
    for page in ("compatibility", "reference/spyre_shims.compat", "guides/upgrade-torch"):
        assert (tmp_path / "site" / page / "index.html").is_file()
    upgrade = (tmp_path / "site" / "guides" / "upgrade-torch" / "index.html").read_text()
    assert "optimization_hint" in upgrade and "<!-- generated:" not in upgrade
