"""Mine the Inductor/Dynamo names Inductor's own device backends use, ranked by use.

    python tools/mine_backend_surface.py [--inductor DIR] [--json PATH] [--markdown PATH]

The in-tree backends of the torch wheel (``torch/_inductor/codegen/{cpp,triton,
halide,mps}*.py``, ``xpu/``, ``cuda/``) are the open corpus the stable API's tier 2
(``spyre_shims.compat.*``) is designed from. For each backend group this reads every
file with ``ast`` (never imports torch), resolves absolute and relative imports of
``torch._inductor`` / ``torch._dynamo`` and the attribute uses of imported modules
(``ir.ComputedBuffer``, ``config.triton``), and counts the references of each name.
Names are collapsed onto where they are defined using the per-release API index
(``from .common import IndentedBuffer`` counts as ``torch._inductor.utils.IndentedBuffer``).
A name a group defines itself is not counted for that group.

Output: per name, the groups using it and the number of references; ``--json`` writes
that table, ``--markdown`` a ranked table of the names used by at least two groups.
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from collections import Counter, defaultdict
from pathlib import Path

from spyre_codemods.api_index import load_index

#: backend group -> glob patterns under torch/_inductor/codegen
GROUPS: dict[str, tuple[str, ...]] = {
    "cpp": ("cpp*.py",),
    "triton": ("triton*.py",),
    "halide": ("halide*.py",),
    "mps": ("mps*.py",),
    "xpu": ("xpu/**/*.py",),
    "cuda": ("cuda/**/*.py",),
}
_PACKAGES = ("torch._inductor", "torch._dynamo")


def _internal(qualname: str) -> bool:
    return any(qualname == p or qualname.startswith(p + ".") for p in _PACKAGES)


def _module_of(path: Path, inductor: Path) -> tuple[str, bool]:
    rel = path.relative_to(inductor).with_suffix("")
    parts = ["torch", "_inductor", *rel.parts]
    is_package = parts[-1] == "__init__"
    if is_package:
        parts = parts[:-1]
    return ".".join(parts), is_package


def _absolute(module: str | None, level: int, current: str, is_package: bool) -> str:
    if level == 0:
        return module or ""
    base = current.split(".")
    if not is_package:
        base = base[:-1]
    base = base[: len(base) - (level - 1)]
    return ".".join(base + ([module] if module else []))


class _FileUses(ast.NodeVisitor):
    """Bindings of internal names/modules in one file, and their references."""

    def __init__(self, module: str, is_package: bool, modules: frozenset[str]) -> None:
        self.module, self.is_package, self.modules = module, is_package, modules
        self.bound: dict[str, str] = {}  # local name -> qualname (a module or module.name)
        self.uses: Counter[str] = Counter()

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if alias.asname and _internal(alias.name):
                self.bound[alias.asname] = alias.name

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        base = _absolute(node.module, node.level, self.module, self.is_package)
        if not _internal(base):
            return
        for alias in node.names:
            if alias.name != "*":
                self.bound[alias.asname or alias.name] = f"{base}.{alias.name}"

    def visit_Attribute(self, node: ast.Attribute) -> None:
        chain = []
        expr: ast.expr = node
        while isinstance(expr, ast.Attribute):
            chain.append(expr.attr)
            expr = expr.value
        if isinstance(expr, ast.Name):
            chain.reverse()
            root = self.bound.get(expr.id) if expr.id != "torch" else "torch"
            if root is not None:
                qual = root
                for part in chain:  # down to the first name that is not a module
                    if qual not in self.modules and qual != "torch" and qual != "torch._inductor" \
                            and qual != "torch._dynamo":
                        break
                    qual = f"{qual}.{part}"
                if _internal(qual) and qual not in self.modules:
                    self.uses[qual] += 1
                    return  # the chain is counted once, at its outermost internal name
        self.generic_visit(node)

    def visit_Name(self, node: ast.Name) -> None:
        qual = self.bound.get(node.id)
        if qual is not None and qual not in self.modules:
            self.uses[qual] += 1


def mine(inductor: Path, release: str) -> dict[str, dict[str, int]]:
    """qualname -> {group: references}."""
    view = load_index().view(release)
    if view is None:
        raise SystemExit(f"error: argument --release: {release} is not in the API index")
    modules = view.modules
    table: dict[str, dict[str, int]] = defaultdict(dict)
    for group, patterns in GROUPS.items():
        files = sorted({p for pattern in patterns for p in (inductor / "codegen").glob(pattern)})
        own = {_module_of(p, inductor)[0] for p in files}
        counts: Counter[str] = Counter()
        for path in files:
            module, is_package = _module_of(path, inductor)
            visitor = _FileUses(module, is_package, modules)
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for node in ast.walk(tree):  # bindings first: uses may precede a function-level import
                if isinstance(node, (ast.Import, ast.ImportFrom)):
                    visitor.visit(node)
            visitor.visit(tree)
            for qual, n in visitor.uses.items():
                owner, _, name = qual.rpartition(".")
                origin = view.origin(owner, name) if owner in modules else None
                if origin is not None and origin[1]:
                    qual = f"{origin[0]}.{origin[1]}"
                if qual.rpartition(".")[0] in own:
                    continue  # the group's own names
                counts[qual] += n
        for qual, n in counts.items():
            table[qual][group] = n
    return dict(table)


def markdown(table: dict[str, dict[str, int]], release: str) -> str:
    rows = sorted(((q, g) for q, g in table.items() if len(g) >= 2),
                  key=lambda item: (-len(item[1]), -sum(item[1].values()), item[0]))
    out = [f"Names used by at least two of Inductor's in-tree backends (torch {release}), "
           f"{len(rows)} of {len(table)}; generated by `python tools/mine_backend_surface.py`.", "",
           "| name | groups | references |", "|---|---|---|"]
    for qual, groups in rows:
        out.append(f"| `{qual}` | {', '.join(sorted(groups))} | {sum(groups.values())} |")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--inductor", type=Path, default=None,
                        help="a torch/_inductor folder (default: the installed torch's, found without importing it)")
    parser.add_argument("--release", default=None, help="its release (default: the installed torch's)")
    parser.add_argument("--json", type=Path, default=None, help="write the full table here")
    parser.add_argument("--markdown", type=Path, default=None, help="write the ranked table here")
    args = parser.parse_args(argv)
    inductor, release = args.inductor, args.release
    if inductor is None or release is None:
        import importlib.metadata
        import importlib.util

        spec = importlib.util.find_spec("torch")
        if spec is None or spec.origin is None:
            print("error: argument --inductor: torch is not installed (accepted: a torch/_inductor folder)",
                  file=sys.stderr)
            return 2
        inductor = inductor or Path(spec.origin).parent / "_inductor"
        release = release or importlib.metadata.version("torch").split("+")[0]
    if not (inductor / "codegen").is_dir():
        print(f"error: argument --inductor: {inductor} has no codegen/ folder (accepted: a torch/_inductor folder)",
              file=sys.stderr)
        return 2
    for path in (args.json, args.markdown):
        if path is not None and not path.parent.is_dir():
            print(f"error: output {path}: folder {path.parent} does not exist", file=sys.stderr)
            return 2
    table = mine(inductor, release)
    if args.json:
        data = {"release": release, "groups": list(GROUPS), "names": dict(sorted(table.items()))}
        args.json.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    text = markdown(table, release)
    if args.markdown:
        args.markdown.write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
