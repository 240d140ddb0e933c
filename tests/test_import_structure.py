"""Imports point one way: no circles among the project's modules, and no imports
of project modules hidden inside functions except the documented lazy loading.

A function-local import is how a circle hides from a reader (and from the
static graph until the function runs), so each one left is listed below with
the reason it has to wait.
"""

from __future__ import annotations

import ast
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parents[1]
#: Import name -> folder (pyproject's package-dir).
PACKAGES = {"spyre_shims": "shims", "spyre_adapter": "spyre_adapter", "spyre_codemods": "codemods",
            "spyre_matrix": "compat_matrix", "spyre_surface": "surface"}

#: (file, function) -> why the import waits until the call. Nothing else may import
#: a project module inside a function.
DEFERRED: dict[tuple[str, str], str] = {
    # `import torch` stays light: the device half registers at torch's import, the
    # compiler half (scheduler, emulator, sympy) loads on the first compile.
    ("spyre_adapter/__init__.py", "register"): "the package root imports nothing, so the CLI parses before torch",
    ("spyre_adapter/backend/session.py", "card"): "the session is made with the device half; its card (the "
                                                "emulator) on first use",
    ("spyre_adapter/backend/session.py", "programs"): "the session is made with the device half; its program "
                                                    "cache (scheduler, sympy) on first use",
    ("spyre_adapter/backend/report.py", "write_trace"): "the report is imported with the device at torch's import; "
                                                        "the trace writer needs the emulator's timing model",
    ("spyre_adapter/backend/device.py", "register"): "the c10d backend registers only where torch was built "
                                                    "with torch.distributed",
    # Optional dependency: transformers is the [hf] extra.
    ("spyre_adapter/zoo/command.py", "_command_hf"): "transformers (the [hf] extra) loads only for hf: models",
    # A worker process configures logging and warnings before torch and op_db load.
    ("spyre_adapter/opinfo/worker.py", "run"): "the sweep worker sets up its process before importing torch",
    ("spyre_adapter/zoo/sweep/item.py", "run_item"): "the family sweep's worker sets up logging before torch and "
                                                   "transformers load",
    ("spyre_adapter/zoo/sweep/item.py", "_eager_decodes"): "as run_item (the worker's process setup comes first)",
    ("spyre_adapter/zoo/sweep/item.py", "_fallback_names"): "as run_item (the worker's process setup comes first)",
    # Each speed measurement runs in a fresh child process; the parent only spawns them.
    ("spyre_adapter/bench/speed.py", "_block"): "models load in the measuring child process, not the parent",
    ("spyre_adapter/bench/speed.py", "_tiny"): "models load in the measuring child process, not the parent",
    ("spyre_adapter/bench/speed.py", "_hf"): "transformers models load in the measuring child process only",
}


def _graph() -> grimp.ImportGraph:
    # Imports under `if TYPE_CHECKING:` serve annotations only and never run.
    return grimp.build_graph(*PACKAGES, include_external_packages=False, exclude_type_checking_imports=True,
                             cache_dir=None)


def test_no_import_circles() -> None:
    graph = _graph()
    circles = []
    for importer in sorted(graph.modules):
        for imported in sorted(graph.find_modules_directly_imported_by(importer)):
            back = graph.find_shortest_chain(importer=imported, imported=importer)
            if back:
                circles.append(" -> ".join((importer, *back)))
    assert not circles, "import circles:\n" + "\n".join(circles)


def test_the_circle_check_sees_a_circle() -> None:
    graph = _graph()
    graph.add_import(importer="spyre_shims.index", imported="spyre_shims.kernel_ir")
    assert graph.find_shortest_chain(importer="spyre_shims.kernel_ir", imported="spyre_shims.index")
    assert graph.find_shortest_chain(importer="spyre_shims.index", imported="spyre_shims.kernel_ir")


def _module_constants(tree: ast.Module) -> dict[str, str]:
    out = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            out.update({t.id: node.value.value for t in node.targets if isinstance(t, ast.Name)})
    return out


def _local_imports(path: Path) -> list[tuple[str, int, str]]:
    """(function, line, module) of each project import inside a function: import
    statements, and ``import_module``/``__import__`` of a literal name (or of a
    module-level string constant)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    constants = _module_constants(tree)
    found: list[tuple[str, int, str]] = []

    def project(name: str) -> bool:
        return name.split(".")[0] in PACKAGES

    def visit(node: ast.AST, function: str | None) -> None:
        for child in ast.iter_child_nodes(node):
            inner = child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else function
            if function is not None:
                if isinstance(child, ast.Import):
                    found.extend((function, child.lineno, a.name) for a in child.names if project(a.name))
                elif isinstance(child, ast.ImportFrom) and (child.level or project(child.module or "")):
                    found.append((function, child.lineno, "." * child.level + (child.module or "")))
                elif isinstance(child, ast.Call) and child.args:
                    callee = child.func.attr if isinstance(child.func, ast.Attribute) else getattr(child.func, "id", "")
                    arg = child.args[0]
                    name = arg.value if isinstance(arg, ast.Constant) else constants.get(getattr(arg, "id", ""))
                    if callee in ("import_module", "__import__") and isinstance(name, str) and project(name):
                        found.append((function, child.lineno, name))
            visit(child, inner)

    visit(tree, None)
    return found


def test_function_local_project_imports_are_only_the_documented_lazy_ones() -> None:
    seen: dict[tuple[str, str], list[str]] = {}
    for folder in PACKAGES.values():
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            for function, line, module in _local_imports(path):
                seen.setdefault((rel, function), []).append(f"{rel}:{line} {function}(): {module}")
    unexpected = [hit for key, hits in sorted(seen.items()) if key not in DEFERRED for hit in hits]
    assert not unexpected, ("imports of project modules inside functions (move them to the top, or document why "
                            "they must wait in DEFERRED):\n" + "\n".join(unexpected))
    stale = sorted(set(DEFERRED) - set(seen))
    assert not stale, f"DEFERRED lists imports that are gone: {stale}"


def test_the_local_import_scan_finds_each_form(tmp_path: Path) -> None:
    src = tmp_path / "m.py"
    src.write_text("import importlib\nLATER = 'spyre_adapter.backend.compiler'\n"
                   "def f():\n    from . import x\n    import spyre_shims.index\n"
                   "    importlib.import_module(LATER)\n    __import__('spyre_codemods')\n    import json\n")
    assert [m for _, _, m in _local_imports(src)] == [".", "spyre_shims.index", "spyre_adapter.backend.compiler",
                                                      "spyre_codemods"]
