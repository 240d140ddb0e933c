"""Mine the Inductor/Dynamo/AOTAutograd names the torch wheel's own backends use, ranked by use.

    python tools/mine_backend_surface.py [--corpus inductor|dynamo] [--inductor DIR] [--json PATH] [--markdown PATH]

Two open corpora of the torch wheel are what the stable API's tier 2
(``spyre_shims.compat.*``) is designed from:

- ``inductor`` (default): Inductor's in-tree device backends
  (``torch/_inductor/codegen/{cpp,triton,halide,mps}*.py``, ``xpu/``, ``cuda/``);
- ``dynamo``: Dynamo's in-tree compiler backends (``torch/_dynamo/backends/*.py``:
  the ``common`` and ``registry`` helpers, ``cudagraphs``, ``tvm``, ``onnxrt``,
  ``debugging``, ``distributed``, ``inductor``, ``torchxla``, ``tensorrt``), the shape
  an out-of-tree Dynamo backend has.

For each backend group this reads every file with ``ast`` (never imports torch),
resolves absolute and relative imports of ``torch._inductor`` / ``torch._dynamo`` /
``torch._functorch`` and the attribute uses of imported modules (``ir.ComputedBuffer``,
``config.triton``), and counts the references of each name. ``functorch.compile`` (the
wheel's public face of AOTAutograd) is read too: a name imported from it counts as the
``torch._functorch`` name it re-exports.
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
#: Dynamo backend group -> glob patterns under torch/_dynamo/backends
DYNAMO_GROUPS: dict[str, tuple[str, ...]] = {
    "common": ("common.py",),
    "registry": ("registry.py",),
    "cudagraphs": ("cudagraphs.py",),
    "tvm": ("tvm.py",),
    "onnxrt": ("onnxrt.py",),
    "debugging": ("debugging.py",),
    "distributed": ("distributed.py",),
    "inductor": ("inductor.py",),
    "torchxla": ("torchxla.py",),
    "tensorrt": ("tensorrt.py",),
}
#: corpus -> (folder under torch/, its groups)
CORPORA: dict[str, tuple[str, dict[str, tuple[str, ...]]]] = {
    "inductor": ("_inductor/codegen", GROUPS),
    "dynamo": ("_dynamo/backends", DYNAMO_GROUPS),
}
_PACKAGES = ("torch._inductor", "torch._dynamo", "torch._functorch")


def _internal(qualname: str) -> bool:
    return any(qualname == p or qualname.startswith(p + ".") for p in _PACKAGES)


def _module_of(path: Path, torch_dir: Path) -> tuple[str, bool]:
    rel = path.relative_to(torch_dir).with_suffix("")
    parts = ["torch", *rel.parts]
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


def reexports(init: Path) -> dict[str, str]:
    """``{name: internal qualname}`` a package ``__init__`` re-exports from the internal
    packages (``functorch/compile/__init__.py``: ``make_boxed_func`` ->
    ``torch._functorch.aot_autograd.make_boxed_func``); empty when there is no such file."""
    if not init.is_file():
        return {}
    found: dict[str, str] = {}
    for node in ast.parse(init.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and _internal(node.module):
            for alias in node.names:
                found[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return found


class _FileUses(ast.NodeVisitor):
    """Bindings of internal names/modules in one file, and their references."""

    def __init__(self, module: str, is_package: bool, modules: frozenset[str],
                 public: dict[str, dict[str, str]] | None = None) -> None:
        self.module, self.is_package, self.modules = module, is_package, modules
        #: public package -> {name: internal qualname it re-exports} (``functorch.compile``)
        self.public = public or {}
        self.bound: dict[str, str] = {}  # local name -> qualname (a module or module.name)
        self.uses: Counter[str] = Counter()

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if alias.asname and _internal(alias.name):
                self.bound[alias.asname] = alias.name

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        base = _absolute(node.module, node.level, self.module, self.is_package)
        if base in self.public:
            for alias in node.names:
                if alias.name in self.public[base]:
                    self.bound[alias.asname or alias.name] = self.public[base][alias.name]
            return
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
                    if qual not in self.modules and qual != "torch" and qual not in _PACKAGES:
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


def mine(inductor: Path, release: str, corpus: str = "inductor") -> dict[str, dict[str, int]]:
    """qualname -> {group: references}, for the backends of ``corpus`` (``inductor`` is the
    ``torch/_inductor`` folder; the other corpora are found beside it)."""
    view = load_index().view(release)
    if view is None:
        raise SystemExit(f"error: argument --release: {release} is not in the API index")
    modules = view.modules
    torch_dir = inductor.parent
    public = {"functorch.compile": reexports(torch_dir.parent / "functorch" / "compile" / "__init__.py")}
    folder, groups = CORPORA[corpus]
    table: dict[str, dict[str, int]] = defaultdict(dict)
    for group, patterns in groups.items():
        files = sorted({p for pattern in patterns for p in (torch_dir / folder).glob(pattern)})
        own = {_module_of(p, torch_dir)[0] for p in files}
        counts: Counter[str] = Counter()
        for path in files:
            module, is_package = _module_of(path, torch_dir)
            visitor = _FileUses(module, is_package, modules, public)
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


def markdown(table: dict[str, dict[str, int]], release: str, corpus: str = "inductor") -> str:
    rows = sorted(((q, g) for q, g in table.items() if len(g) >= 2),
                  key=lambda item: (-len(item[1]), -sum(item[1].values()), item[0]))
    whose = "Inductor's in-tree device backends" if corpus == "inductor" else "Dynamo's in-tree compiler backends"
    out = [f"Names used by at least two of {whose} (torch {release}), "
           f"{len(rows)} of {len(table)}; generated by `python tools/mine_backend_surface.py`.", "",
           "| name | groups | references |", "|---|---|---|"]
    for qual, groups in rows:
        out.append(f"| `{qual}` | {', '.join(sorted(groups))} | {sum(groups.values())} |")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", choices=sorted(CORPORA), default="inductor",
                        help="inductor: the device backends under torch/_inductor/codegen (default); "
                             "dynamo: the compiler backends under torch/_dynamo/backends")
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
    table = mine(inductor, release, args.corpus)
    if args.json:
        data = {"release": release, "corpus": args.corpus, "groups": list(CORPORA[args.corpus][1]),
                "names": dict(sorted(table.items()))}
        args.json.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    text = markdown(table, release, args.corpus)
    if args.markdown:
        args.markdown.write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
