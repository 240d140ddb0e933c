"""The old-style vendor backend fixture, upgraded end to end, and the installed
``torch/_inductor`` tree as a real-world corpus."""

from __future__ import annotations

import ast
import importlib.util
import shutil
from pathlib import Path

import libcst as cst
import pytest
import torch

from spyre_codemods.driver import Job, process_file, run
from spyre_codemods.guards import IMPORT_ERRORS
from spyre_codemods.releases import parse_release
from spyre_codemods.rule_table import RULES

from .joined_notes import join_notes

FIXTURES = Path(__file__).parent / "fixtures"
LEGACY = FIXTURES / "legacy_backend.py"
INDUCTOR = Path(torch.__file__).parent / "_inductor"
INSTALLED = ".".join(torch.__version__.split("+")[0].split(".")[:2])


def _upgraded(tmp_path: Path, target: str) -> str:
    path = tmp_path / "legacy_backend.py"
    shutil.copyfile(LEGACY, path)
    result = process_file(path, Job("upgrade", "2.4", target, mode="write"))
    assert result.status == "changed", result.error
    return path.read_text(encoding="utf-8")


def _unguarded_imports(source: str) -> list[tuple[str, str | None]]:
    """(module, name) for each torch import outside try/except and `if` blocks."""
    found: list[tuple[str, str | None]] = []

    def visit(stmts: list[ast.stmt]) -> None:
        for stmt in stmts:
            if isinstance(stmt, ast.ImportFrom) and stmt.module and stmt.level == 0:
                found.extend((stmt.module, alias.name) for alias in stmt.names)
            elif isinstance(stmt, ast.Import):
                found.extend((alias.name, None) for alias in stmt.names)
            elif isinstance(stmt, (ast.ClassDef, ast.FunctionDef)):
                visit(stmt.body)
            # ast.Try / ast.If bodies are compat blocks: written for other releases

    visit(ast.parse(source).body)
    return [(m, n) for m, n in found if m == "torch" or m.startswith("torch.")]


def _top_level_names(path: str) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(Path(path).read_text(encoding="utf-8"))):
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
    return names


def test_fixture_upgrades_to_the_installed_release_exactly(tmp_path: Path) -> None:
    expected = (FIXTURES / "legacy_backend.expected_2_13.py.txt").read_text(encoding="utf-8")
    assert _upgraded(tmp_path, "2.13") == expected


def test_fixture_upgraded_imports_resolve_in_installed_torch(tmp_path: Path) -> None:
    imports = _unguarded_imports(_upgraded(tmp_path, INSTALLED))
    assert len(imports) >= 10
    unresolved = []
    for module, name in imports:
        spec = importlib.util.find_spec(module)
        if spec is None or spec.origin is None:
            unresolved.append(module)
        elif name is not None and name not in _top_level_names(spec.origin) and not (
            spec.submodule_search_locations is not None and importlib.util.find_spec(f"{module}.{name}")
        ):
            unresolved.append(f"{module}.{name}")
    assert not unresolved, f"upgraded imports missing from torch {torch.__version__}: {unresolved}"


def test_fixture_original_imports_do_not_all_resolve() -> None:
    # the check above can fail: the 2.4-era spelling is gone from the installed torch
    imports = dict(_unguarded_imports(LEGACY.read_text(encoding="utf-8")))
    wrapper = importlib.util.find_spec("torch._inductor.codegen.wrapper")
    assert imports["torch._inductor.codegen.wrapper"] == "WrapperCodeGen"
    assert wrapper is not None and wrapper.origin is not None
    assert "WrapperCodeGen" not in _top_level_names(wrapper.origin)


def test_fixture_upgrades_to_2_15_style(tmp_path: Path) -> None:
    expected = (FIXTURES / "legacy_backend.expected_2_15.py.txt").read_text(encoding="utf-8")
    assert _upgraded(tmp_path, "2.15") == expected


def test_npu_style_fixture_upgrades_to_the_hand_written_2_15_output(tmp_path: Path) -> None:
    # signatures in their own layout and the file's line length, Union merged into the
    # grouped typing import, one note per function (or module) naming the other uses
    path = tmp_path / "npu_style_backend.py"
    shutil.copyfile(FIXTURES / "npu_style_backend.py", path)
    result = process_file(path, Job("upgrade", "2.6", "2.15", mode="write"))
    assert result.status == "changed", result.error
    assert path.read_text(encoding="utf-8") == (
        FIXTURES / "npu_style_backend.expected_2_15.py.txt").read_text(encoding="utf-8")
    assert result.notes == 9 and sum(1 for f in result.findings if f.kind in ("todo", "advisory")) == 14
    assert process_file(path, Job("upgrade", "2.6", "2.15", mode="check")).status == "unchanged"


def test_fixture_compat_blocks_survive_and_second_run_is_a_no_op(tmp_path: Path) -> None:
    text = _upgraded(tmp_path, "2.15")
    original = LEGACY.read_text(encoding="utf-8")
    # the compat blocks keep their code; what they hold for old releases is marked with a TODO
    code_only = "".join(line for line in join_notes(text).splitlines(keepends=True)
                        if "# TODO(spyre-adapter" not in line)
    for first, last in (("try:  # only builds with the C++ wrapper have it", "CppWrapperCpu = None\n"),
                        ("if torch.__version__ >= \"2.5\":", "from torch._inductor.ir import LoopBodyBlock\n"),
                        ("if hasattr(V.graph.sizevars, \"guard_int\"):", "evaluate_static_shape(sizes[0])\n")):
        start = original.index(first)
        block = original[start:original.index(last, start) + len(last)]
        assert block.count("\n") >= 3 and block in code_only
    assert join_notes(text).count("left alone inside a version-guarded block") == 2
    again = process_file(tmp_path / "legacy_backend.py", Job("upgrade", "2.4", "2.15", mode="write"))
    assert again.status == "unchanged"
    # the compat blocks, the advisories and the subclass contract (now under the base's new
    # name) are still reported, their TODOs recognised and not repeated
    assert {f.kind for f in again.findings} == {"skipped", "advisory", "todo"}
    assert [f.rule for f in again.findings if f.kind == "todo"] == ["wrapper-create-factory"]
    assert (tmp_path / "legacy_backend.py").read_text(encoding="utf-8") == text


def test_fixture_migrates_onto_the_stable_api(tmp_path: Path) -> None:
    path = tmp_path / "legacy_backend.py"
    shutil.copyfile(LEGACY, path)
    result = process_file(path, Job("migrate", "2.4", mode="write"))
    assert result.status == "changed", result.error
    text = path.read_text(encoding="utf-8")
    compile(text, str(path), "exec")
    internal = [(m, n) for m, n in _unguarded_imports(text) if m.startswith(("torch._inductor", "torch._dynamo"))]
    assert internal == []  # V (for V.graph.*) now has a stable home too: spyre_shims.compat.graph.V
    assert "from spyre_shims.compat.graph import V" in text
    for name in ("PythonWrapperCodegen", "LoopBody", "BaseScheduling", "IndentedBuffer", "DeviceInterface",
                 "DeviceOpOverrides", "register_backend_for_device", "size_hint", "check_equals",
                 "free_unbacked_symbols"):
        assert name in text
    assert "cpp_wrapper=CppWrapperCpu" in text
    todos = [f for f in result.findings if f.kind == "todo"]
    assert len(todos) == text.count("# TODO(spyre-adapter migrate):") == 2  # the try block, the if block
    assert process_file(path, Job("migrate", "2.4", mode="write")).status == "unchanged"


@pytest.mark.slow
def test_installed_inductor_tree_round_trips_byte_identical() -> None:
    files = sorted(INDUCTOR.rglob("*.py"))
    assert len(files) > 100
    for path in files:
        data = path.read_bytes()
        assert cst.parse_module(data).bytes == data, path


@pytest.mark.slow
def test_installed_inductor_tree_needs_no_upgrade_to_its_own_release() -> None:
    """Inductor's own code needs no rule whose old spelling its release no longer
    accepts; in a deprecation window (2.11 kept ``size_hint`` next to the new
    ``optimization_hint``) it may still use the old one, and only such rules fire."""
    # the rules only (--rule for each): the index checks are measured by the benchmark
    report = run([INDUCTOR], Job("upgrade", "2.4", INSTALLED, tuple(r.id for r in RULES), mode="check"), jobs=2)
    assert not report.errors, [(f.path, f.error) for f in report.errors]
    installed = parse_release(INSTALLED)
    required = {r.id for r in RULES if not r.old_works_in(installed)}
    fired = {(f.path, x.rule) for f in report.changed for x in f.findings if x.kind == "rewrite"}
    assert not {(path, rule) for path, rule in fired if rule in required}, sorted(fired)
    assert len(report.files) > 100


def test_compat_exceptions_cover_the_import_idioms() -> None:
    assert {"ImportError", "ModuleNotFoundError"} <= IMPORT_ERRORS


def test_a_deprecation_window_keeps_the_old_spelling_working_until_removal() -> None:
    hint = next(r for r in RULES if r.id == "sizevars-optimization-hint")
    assert hint.old_works_in(parse_release("2.11")) and not hint.old_works_in(parse_release("2.12"))
    moved = next(r for r in RULES if r.id == "static-triton-launcher")  # no window: gone at `since`
    assert moved.old_works_in(parse_release("2.10")) and not moved.old_works_in(parse_release("2.11"))
    loop_body = next(r for r in RULES if r.id == "loop-body-module")  # re-exported: works everywhere
    assert loop_body.old_works_in(parse_release("2.15"))
