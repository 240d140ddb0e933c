"""Idempotence, as a property: vendor-style files generated from the shapes real backends
have (grouped imports, overrides of Inductor methods in every signature layout, functions
with several uses of a changed API, nested decorated defs, module-level registration) are
upgraded twice; the second run changes nothing, the result compiles, no line ends in
whitespace and no statement carries two notes on one subject."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import libcst as cst
import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st
from libcst.codemod import CodemodContext

from spyre_codemods.driver import Job, run
from spyre_codemods.releases import parse_release
from spyre_codemods.upgrade import UpgradeCommand

from .test_codemod_fixture_backend import INDUCTOR, INSTALLED

IMPORTS = [
    "from typing import Optional\n",
    "from typing import (\n    Any,\n    Optional,\n)\n",
    "from torch._inductor.codecache import Union\n",
    "from torch._inductor.codegen.triton import (\n    TritonKernel,\n    OpsHandler,\n)\n",
    "from torch._inductor.codegen.wrapper import PythonWrapperCodegen\n",
    "from torch._inductor.runtime.triton_heuristics import CachingAutotuner\n",
    "from torch._inductor.codegen.common import OpOverrides, register_backend_for_device\n",
]
# the statements below use these names: always imported, so every statement is a use
HEADER = ("import torch\nfrom torch._inductor.virtualized import V\n"
          "from torch._inductor.decomposition import decompositions, register_decomposition\n"
          "from torch._inductor.lowering import lowerings, make_fallback, register_lowering\n")

STATEMENTS = [
    "n = V.graph.sizevars.size_hint(x)",
    "n = V.graph.sizevars.size_hint(x, fallback=8)",
    "sizes = V.graph.sizevars.size_hints([x, y])",
    "V.graph.sizevars.guard_equals(x, y)",
    "k = V.graph.sizevars.evaluate_static_shape(x)",
    "h = V.graph.sizevars.symbolic_hint(x)",
    "vals = dict(V.graph.sizevars.var_to_val)",
    "decompositions.pop(x, None)",
    "make_fallback(x)",
    "y = lowerings.get(x)",
    "y = x + 1",
    "",
]

SIGNATURES = [
    ("PythonWrapperCodegen", "    @staticmethod\n    def create(is_subgraph, subgraph_name, parent_wrapper):\n"),
    ("PythonWrapperCodegen", "    @staticmethod\n    def create(\n            is_subgraph: bool, subgraph_name: str, "
                             "parent_wrapper\n    ):\n"),
    ("PythonWrapperCodegen", "    def define_kernel(\n            self,\n            kernel_name: str,\n"
                             "            kernel_body: str,\n            metadata=None,\n            gpu=True,\n    ):\n"),
    ("CachingAutotuner", "    def _precompile_config(self, cfg, warm_cache_only: bool):\n"),
    ("CachingAutotuner", "    def precompile(self, warm_cache_only=False):\n"),
    ("TritonKernel", "    def codegen_kernel(self, Name=None):\n"),
    ("OpOverrides", "    @staticmethod\n    def to_dtype(x, dtype, src_dtype=None):\n"),
]


@st.composite
def functions(draw: st.DrawFn, name: str) -> str:
    body = draw(st.lists(st.sampled_from(STATEMENTS), min_size=1, max_size=5))
    lines = [f"    {s}" if s else "" for s in body]
    if draw(st.booleans()):  # a nested, decorated def
        lines += ["", "    @register_decomposition([torch.ops.aten.expm1])", "    def inner(x):",
                  f"        {draw(st.sampled_from([s for s in STATEMENTS if s]))}", "        return x"]
    lines.append("    return x")
    return f"def {name}(x, y):\n" + "\n".join(lines) + "\n"


@st.composite
def classes(draw: st.DrawFn, name: str) -> str:
    base, signature = draw(st.sampled_from(SIGNATURES))
    statements = draw(st.lists(st.sampled_from([s for s in STATEMENTS if s]), max_size=3))
    body = "".join(f"        {s}\n" for s in statements) + "        return None\n"
    return f"class {name}({base}):\n{signature}{body}"


@st.composite
def vendor_files(draw: st.DrawFn) -> str:
    imports = draw(st.lists(st.sampled_from(IMPORTS), min_size=1, max_size=5, unique=True))
    blocks = [draw(st.one_of(functions(f"f{i}"), classes(f"C{i}"))) for i in range(draw(st.integers(1, 4)))]
    module_level = draw(st.lists(st.sampled_from([s for s in STATEMENTS if s]), max_size=3))
    tail = "".join(f"{s}\n" for s in module_level)
    return HEADER + "".join(imports) + "\n\n" + "\n\n".join(blocks) + ("\n\n" + tail if tail else "")


def _upgrade(code: str, source: str, target: str) -> str:
    return UpgradeCommand(CodemodContext(), source, target).transform_module(cst.parse_module(code)).code


_TODO = re.compile(r"^\s*# TODO\(spyre-adapter upgrade\): (.*)$")


def _notes_by_statement(code: str) -> list[list[str]]:
    """The notes above each statement (consecutive TODO lines), by subject."""
    groups: list[list[str]] = [[]]
    for line in code.splitlines():
        match = _TODO.match(line)
        if match:
            groups[-1].append(match.group(1).partition(": ")[0])
        elif groups[-1]:
            groups.append([])
    return groups


# two notes of one function whose uses interleave: the first note's offsets must count
# the line the second adds (found by hand when this went wrong on a real backend)
INTERLEAVED = HEADER + "\n\ndef f(x, y):\n    make_fallback(x)\n    n = V.graph.sizevars.size_hint(x)\n" \
    "    make_fallback(y)\n    return n\n"


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(vendor_files(), st.sampled_from([("2.6", "2.15"), ("2.11", "2.12"), ("2.9", "2.13")]))
@example(INTERLEAVED, ("2.6", "2.15"))
def test_a_second_upgrade_changes_nothing(code: str, window: tuple[str, str]) -> None:
    source, target = window
    assume(parse_release(source) <= parse_release(target))
    once = _upgrade(code, source, target)
    compile(once, "<upgraded>", "exec")
    assert _upgrade(once, source, target) == once
    assert not [line for line in once.splitlines() if line != line.rstrip()]
    assert all(len(notes) == len(set(notes)) for notes in _notes_by_statement(once))


FIXTURES = Path(__file__).parent / "fixtures"


@pytest.mark.parametrize(("tree", "source", "target"), [
    ("vendor26", "2.6", "2.15"),
    ("vendor26", "2.6", "2.12"),
    ("vendor_backend", "2.6", "2.15"),
    ("legacy_backend.py", "2.4", "2.13"),
    ("legacy_backend.py", "2.4", "2.15"),
    ("backend_2_11.py", "2.11", "2.15"),
    ("npu_style_backend.py", "2.6", "2.15"),
])
def test_write_then_check_finds_nothing_on_every_fixture(tmp_path: Path, tree: str, source: str, target: str) -> None:
    copy = tmp_path / tree
    (shutil.copytree if (FIXTURES / tree).is_dir() else shutil.copyfile)(FIXTURES / tree, copy)
    written = run([copy], Job("upgrade", source, target, mode="write"))
    assert written.changed and not written.errors
    again = run([copy], Job("upgrade", source, target, mode="check"))
    assert not again.changed and not again.errors
    assert again.summary()["notes"] == written.summary()["notes"]  # recognised, not added


@pytest.mark.slow
def test_write_then_check_finds_nothing_on_the_installed_inductors_codegen(tmp_path: Path) -> None:
    # Inductor's own codegen package (the installed release) upgraded to 2.15
    copy = tmp_path / "torch" / "_inductor"
    shutil.copytree(INDUCTOR, copy, ignore=shutil.ignore_patterns("__pycache__", "*.so", "*.pyi"))
    codegen = copy / "codegen"
    written = run([codegen], Job("upgrade", INSTALLED, "2.15", mode="write"), jobs=2)
    assert not written.errors and written.changed
    again = run([codegen], Job("upgrade", INSTALLED, "2.15", mode="check"), jobs=2)
    assert not again.changed and not again.errors
