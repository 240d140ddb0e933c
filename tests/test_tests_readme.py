"""Every module of the project has a test: a file named for it in the mirrored
test folder, or a row of tests/README.md naming the files that cover it - and
those files reach the module through their imports (checked on the import graph,
so a row cannot name a file that never loads the module)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parents[1]
#: import name -> (source folder, test folder)
PACKAGES = {"spyre_adapter": ("spyre_adapter", "tests/adapter"), "spyre_shims": ("shims", "tests/shims"),
            "spyre_codemods": ("codemods", "tests/codemods"), "spyre_matrix": ("compat_matrix", "tests/matrix"),
            "spyre_surface": ("surface", "tests/matrix")}
ROW = re.compile(r"^\| `([\w.]+)` \| (.+?) \|(.*)\|$")


def modules() -> dict[str, Path]:
    """Every module of the packages (package ``__init__``s of sub-packages included) -> the
    test file named for it."""
    out = {}
    for pkg, (folder, tests) in PACKAGES.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            parts = list(path.relative_to(ROOT / folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            if not parts or parts[-1] == "__main__":
                continue
            where = Path(tests, *parts[:-1]) if pkg == "spyre_adapter" else Path(tests)
            out[".".join([pkg, *parts])] = ROOT / where / f"test_{parts[-1].lstrip('_')}.py"
    return out


def readme_rows() -> dict[str, tuple[list[Path], str]]:
    """Module -> (the test files that cover it, what they do that loads it when it loads lazily)."""
    rows = {}
    for line in (ROOT / "tests" / "README.md").read_text().splitlines():
        m = ROW.match(line)
        if m:
            how = re.findall(r"`(.+?)`", m.group(3))
            rows[m.group(1)] = ([ROOT / f for f in re.findall(r"`(tests/[\w/]+\.py)`", m.group(2))],
                                how[0] if how else "")
    return rows


def _imported(test: Path) -> set[str]:
    """Project modules a test file imports (anywhere in it)."""
    found = set()
    for node in ast.walk(ast.parse(test.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names)
    return {m for m in found if m.split(".")[0] in PACKAGES}


def test_every_module_has_a_named_test_or_a_readme_row() -> None:
    rows = readme_rows()
    missing = [m for m, named in modules().items() if not named.exists() and m not in rows]
    assert not missing, "modules with no test named for them and no row in tests/README.md:\n" + "\n".join(missing)
    stale = sorted(set(rows) - set(modules()))
    assert not stale, f"tests/README.md names modules that are gone: {stale}"


def test_each_readme_row_names_files_that_reach_the_module() -> None:
    graph = grimp.build_graph(*PACKAGES, exclude_type_checking_imports=True, cache_dir=None)
    bad = []
    for module, (files, how) in readme_rows().items():
        if not files or not all(f.is_file() for f in files):
            bad.append(f"{module}: names no existing test file")
            continue
        imported = set().union(*(_imported(f) for f in files)) & set(graph.modules)
        if any(i == module or graph.chain_exists(importer=i, imported=module) for i in imported):
            continue
        # Loaded lazily (a command dispatched by name, the compiler half on the first
        # compile, a worker process): the row says what the file does, and it does it.
        if not how or not any(how in f.read_text() for f in files):
            bad.append(f"{module}: none of {[str(f.relative_to(ROOT)) for f in files]} imports it, even indirectly"
                       + (f", nor does {how!r}" if how else "; say in the row what loads it"))
    assert not bad, "\n".join(bad)
