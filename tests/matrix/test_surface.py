"""Static surface extraction on tiny synthetic release trees with known renames, moves and signature changes."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from importlib import metadata
from pathlib import Path

import pytest
from packaging.version import Version

from spyre_matrix.catalog import load_catalog
from spyre_matrix.churn import diff_api
from spyre_matrix.extract import classify, extract_release, read_surface, surface_renames
from spyre_matrix.source_tree import SourceTree, parameter_names, render_signature
from spyre_surface import load_surface_spec

# (module, name, kind, params, alias "module:name"): the shape of surface/surface.toml
WRAPPER, SIZEVARS = "torch._inductor.codegen.wrapper", "torch._inductor.sizevars"
SYMBOLS = [
    (WRAPPER, "PythonWrapperCodegen", "class", None, f"{WRAPPER}:WrapperCodeGen"),
    (WRAPPER, "PythonWrapperCodegen.generate", "method", ["self", "node"], f"{WRAPPER}:WrapperCodeGen.generate"),
    (WRAPPER, "PythonWrapperCodegen.write_header", "method", ["self"], None),
    (SIZEVARS, "SizeVarAllocator.optimization_hint", "method", ["self", "expr"], f"{SIZEVARS}:SizeVarAllocator.size_hint"),
    (SIZEVARS, "SizeVarAllocator.guard_equals", "method", None, None),
    ("torch.utils._indented_buffer", "IndentedBuffer", "class", None, "torch._inductor.utils:IndentedBuffer"),
    ("torch._inductor.config", "patch", "attribute", None, None),
    ("torch._inductor.loop_body", "LoopBody", "class", None, None),
]


def _spec_toml() -> str:
    entries = []
    for module, name, kind, params, alias in SYMBOLS:
        lines = ["[[symbol]]", f'name = "{name}"', f'module = "{module}"', f'kind = "{kind}"', 'feature = "f"']
        if params is not None:
            lines.append(f"params = {params!r}".replace("'", '"'))
        if alias is not None:
            alias_module, alias_name = alias.split(":")
            lines.append(f'aliases = [{{ module = "{alias_module}", name = "{alias_name}" }}]')
        entries.append("\n".join(lines))
    return "\n\n".join(entries) + "\n"


CONFIG_MODULE = {
    "torch/utils/__init__.py": "",
    "torch/utils/_config_module.py": """
        class ConfigModule:
            def patch(self, arg1=None, arg2=None, **kwargs): ...
        def install_config_module(module): ...
    """,
    "torch/_inductor/config.py": """
        import sys
        from torch.utils._config_module import install_config_module
        debug = False
        install_config_module(sys.modules[__name__])
    """,
}

OLD = {
    "torch/__init__.py": "",
    "torch/version.py": "__version__ = '1.0.0+cpu'\n",
    "torch/_inductor/__init__.py": "",
    "torch/_inductor/codegen/__init__.py": "",
    "torch/_inductor/codegen/wrapper.py": """
        class WrapperCodeGen:
            def generate(self, node): ...
            def write_header(self): ...
            def helper(self, x): ...
            def _private(self): ...
    """,
    "torch/_inductor/utils.py": """
        class IndentedBuffer:
            def writeline(self, line): ...
    """,
    "torch/_inductor/sizevars.py": """
        class SizeVarAllocator:
            def size_hint(self, expr, *, fallback=None): ...
            def guard_equals(self, left, right): ...
    """,
    "torch/_inductor/ir.py": """
        class LoopBody:
            def __init__(self, fn, args): ...
    """,
    "torch/_inductor/loop_body.py": "from .ir import LoopBody  # re-export\n",
    **CONFIG_MODULE,
}

NEW = {
    "torch/__init__.py": "",
    "torch/version.py": "__version__ = '1.1.0'\n",
    "torch/_inductor/__init__.py": "",
    "torch/_inductor/codegen/__init__.py": "",
    "torch/_inductor/codegen/base.py": """
        class CodegenBase:
            def write_header(self): ...
    """,
    # Renamed class (no alias left), inherited write_header, generate gains a parameter
    # in front of `node` (a breaking signature change), a new public method.
    "torch/_inductor/codegen/wrapper.py": """
        from typing import overload
        from . import base

        class PythonWrapperCodegen(base.CodegenBase):
            def generate(self, kernel, node): ...
            def helper(self, x): ...
            def added_method(self): ...
            @overload
            def typed(self, x: int) -> int: ...
            def typed(self, x, y=None): ...
    """,
    "torch/utils/_indented_buffer.py": """
        class IndentedBuffer:
            def writeline(self, line): ...
    """,
    "torch/_inductor/utils.py": "from torch.utils._indented_buffer import IndentedBuffer\n",
    "torch/_inductor/sizevars.py": """
        class SizeVarAllocator:
            def optimization_hint(self, expr, fallback=None): ...
    """,
    "torch/_inductor/loop_body.py": """
        class LoopBody:
            def __init__(self, fn, args, var_ranges): ...
    """,
    **CONFIG_MODULE,
}


def write_tree(root: Path, files: dict[str, str]) -> SourceTree:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(textwrap.dedent(text).lstrip("\n"))
    return SourceTree(root)


@pytest.fixture
def spec(tmp_path: Path):
    path = tmp_path / "surface.toml"
    path.write_text(_spec_toml())
    return load_surface_spec(path)


@pytest.fixture
def trees(tmp_path: Path) -> tuple[SourceTree, SourceTree]:
    return write_tree(tmp_path / "old", OLD), write_tree(tmp_path / "new", NEW)


def _statuses(tree: SourceTree, spec) -> dict[str, tuple[str, bool]]:
    return {s.location.name: (c["status"], c["signature_changed"]) for s in spec if (c := classify(tree, s))}


def test_classification_per_release(trees, spec) -> None:
    old, new = trees
    assert _statuses(old, spec) == {
        "PythonWrapperCodegen": ("moved", False),  # only under its old name
        "PythonWrapperCodegen.generate": ("moved", False),
        "PythonWrapperCodegen.write_header": ("missing", False),  # no alias declared for the old class
        "SizeVarAllocator.optimization_hint": ("moved", False),
        "SizeVarAllocator.guard_equals": ("present", False),
        "IndentedBuffer": ("moved", False),
        "patch": ("present", False),  # installed by install_config_module
        "LoopBody": ("present", False),  # re-exported from ir
    }
    assert _statuses(new, spec) == {
        "PythonWrapperCodegen": ("present", False),
        "PythonWrapperCodegen.generate": ("present", True),  # (self, kernel, node) != (self, node, ...)
        "PythonWrapperCodegen.write_header": ("present", False),  # inherited from base.CodegenBase
        "SizeVarAllocator.optimization_hint": ("present", False),
        "SizeVarAllocator.guard_equals": ("missing", False),
        "IndentedBuffer": ("present", False),
        "patch": ("present", False),
        "LoopBody": ("present", False),
    }


def test_resolution_reports_where_a_symbol_is_defined(trees) -> None:
    old, new = trees
    assert new.resolve("torch._inductor.codegen.wrapper", "PythonWrapperCodegen.write_header").key == (
        "torch._inductor.codegen.base:CodegenBase.write_header")
    assert old.resolve("torch._inductor.loop_body", "LoopBody").key == "torch._inductor.ir:LoopBody"
    assert old.resolve("torch._inductor.config", "patch").key == "torch.utils._config_module:ConfigModule.patch"
    assert new.resolve("torch._inductor.codegen.wrapper", "base").kind == "module"
    assert new.resolve("torch._inductor.codegen.wrapper", "nothing") is None
    assert old.version == "1.0.0+cpu"


def test_overloads_are_not_the_runtime_signature(trees) -> None:
    _, new = trees
    typed = new.resolve("torch._inductor.codegen.wrapper", "PythonWrapperCodegen.typed")
    assert typed.signature == ("self", "x", "y=")


def test_touched_surface_churn_between_releases(trees, spec) -> None:
    old, new = trees
    before = extract_release("1.0.0", old, spec)["surface"]
    after = extract_release("1.1.0", new, spec)["surface"]
    assert "torch._inductor.codegen.wrapper:WrapperCodeGen._private" not in before  # private members are not API
    diff = diff_api(before, after, surface_renames(spec))
    assert dict(diff.moved) == {
        "torch._inductor.codegen.wrapper:WrapperCodeGen": "torch._inductor.codegen.wrapper:PythonWrapperCodegen",
        "torch._inductor.sizevars:SizeVarAllocator.size_hint": "torch._inductor.sizevars:SizeVarAllocator.optimization_hint",
        "torch._inductor.utils:IndentedBuffer": "torch.utils._indented_buffer:IndentedBuffer",
    }
    # Members that came along with a moved class are not churn (write_header is now
    # inherited, still callable); changed ones are.
    assert diff.removed == ("torch._inductor.sizevars:SizeVarAllocator.guard_equals",)
    assert [key for key, _, _ in diff.signature_changed] == [
        "torch._inductor.codegen.wrapper:WrapperCodeGen.generate",
        "torch._inductor.loop_body:LoopBody.__init__",
    ]
    assert "torch._inductor.codegen.wrapper:PythonWrapperCodegen.added_method" in diff.added
    assert "torch._inductor.codegen.wrapper:PythonWrapperCodegen.helper" not in diff.added


def test_whole_tree_measurements_against_previous(trees, spec) -> None:
    old, new = trees
    record = extract_release("1.1.0", new, spec, ("1.0.0", old))
    inductor = record["inductor"]
    py_files = [rel for rel in NEW if rel.startswith("torch/_inductor/")]
    assert inductor["files"] == len(py_files)
    vs = inductor["vs_previous"]
    assert vs["torch"] == "1.0.0"
    assert (vs["files_added"], vs["files_removed"]) == (1, 1)  # codegen/base.py added, ir.py removed
    assert vs["removed_lines"] >= 2 and vs["added_lines"] >= 3  # ir.py's two lines went, base.py's came
    assert record["build"] == "1.1.0"


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("def f(a, b=1, *args, c, d=2, **kw): ...", ("a", "b=", "*args", "c", "d=", "**kw")),
        ("def f(a, /, b, *, c): ...", ("a", "/", "b", "*", "c")),
        ("def f(): ...", ()),
    ],
)
def test_render_signature(source: str, expected: tuple[str, ...]) -> None:
    import ast

    assert render_signature(ast.parse(source).body[0].args) == expected


def test_parameter_names_drop_markers() -> None:
    assert parameter_names(("a", "/", "b=", "*", "c", "**kw")) == ("a", "b", "c", "**kw")


def test_installed_torch_is_located_without_importing_it() -> None:
    code = (
        "import sys; from spyre_matrix.source_tree import SourceTree;"
        "tree = SourceTree.installed(); assert 'torch' not in sys.modules, 'torch was imported';"
        "print(tree.version)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    # version.py may carry a local label the distribution metadata lacks (PyPI's 2.9.1 says 2.9.1+cu128).
    assert Version(out.stdout.strip()).release == Version(metadata.version("torch")).release


# -- committed surface data ------------------------------------------------------------------


def test_committed_surface_covers_catalog_and_current_spec() -> None:
    spec_keys = {symbol.key for symbol in load_surface_spec()}
    for release in load_catalog():
        record = read_surface(release.torch)
        assert record is not None, f"no compat_matrix/surface/{release.torch}.json: run `nox -s surface`"
        assert set(record["symbols"]) == spec_keys, (
            f"{release.torch}: surface data predates surface/surface.toml; run `nox -s surface` "
            "(or `python -m spyre_matrix surface` --src DIR with extracted sources)")


def test_committed_surface_matches_known_release_facts() -> None:
    def status(version: str, key: str) -> str:
        return read_surface(version)["symbols"][key]["status"]

    python_device = "torch.utils.backend_registration:_setup_privateuseone_for_python_backend"
    assert status("2.9.1", python_device) == "missing" and status("2.10.0", python_device) == "present"
    assert status("2.13.0", "torch.utils._indented_buffer:IndentedBuffer") == "moved"
    assert status("2.14.1", "torch.utils._indented_buffer:IndentedBuffer") == "present"
    register = read_surface("2.9.1")["symbols"]["torch._inductor.codegen.common:register_backend_for_device"]
    names = parameter_names(tuple(register["signature"]))
    assert names.index("device_fx_wrapper_codegen") < names.index("device_custom_pass")


def test_committed_surface_matches_a_fresh_extraction_of_the_installed_torch() -> None:
    tree = SourceTree.installed()
    version = Version(tree.version).public
    committed = read_surface(version)
    if committed is None:
        pytest.skip(f"installed torch {version} is not a catalog release")
    fresh = extract_release(version, tree, load_surface_spec())
    assert fresh["symbols"] == committed["symbols"]
    assert fresh["surface"] == committed["surface"]
    assert fresh["inductor"]["lines"] == committed["inductor"]["lines"]


# -- release sources -------------------------------------------------------------------------


def test_wheel_extraction_keeps_only_the_analysed_trees(tmp_path: Path) -> None:
    import zipfile

    from spyre_matrix.sources import MARKER, ensure_release

    wheels = tmp_path / "wheels"
    wheels.mkdir()
    with zipfile.ZipFile(wheels / "torch-9.9.9-cp311-cp311-linux_x86_64.whl", "w") as wheel:
        for name in ("torch/version.py", "torch/_inductor/ir.py", "torch/utils/x.py", "torch/lib/libtorch.so",
                     "torch/nn/modules.py", "torch-9.9.9.dist-info/METADATA"):
            wheel.writestr(name, "x = 1\n")
    dest = ensure_release("9.9.9", tmp_path / "src", wheels)
    extracted = sorted(p.relative_to(dest).as_posix() for p in dest.rglob("*") if p.is_file())
    assert extracted == [MARKER, "torch/_inductor/ir.py", "torch/utils/x.py", "torch/version.py"]
    assert list(wheels.iterdir()), "a wheel that was not downloaded here is left alone"
    # Already extracted (e.g. by another engineer): nothing is read or downloaded again.
    (wheels / "torch-9.9.9-cp311-cp311-linux_x86_64.whl").unlink()
    assert ensure_release("9.9.9", tmp_path / "src", wheels) == dest
