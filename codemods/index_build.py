"""Build the per-release API index (:mod:`spyre_codemods.api_index`) from release sources.

Input: one source tree per release holding ``torch/_inductor``, ``torch/_dynamo`` and ``torch/_functorch``
(an extracted wheel, never imported), or the release wheel itself, of which only the
``.py`` files of those packages are read. Output: one gzip JSON where every fact
carries the set of releases it holds in (a bit mask), so ten releases cost little
more than one.

    python -m spyre_codemods.index_build --src /path/to/trees 2.6.0 2.7.1 ...
    python -m spyre_codemods.index_build --fetch 2.15.0   # pip download, read, delete

The nox session ``api_index`` runs this for every supported release of the catalog.
"""

from __future__ import annotations

import argparse
import ast
import copy
import gzip
import hashlib
import json
import re
import sys
import tempfile
import zipfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from spyre_matrix.catalog import load_catalog
from spyre_matrix.source_tree import ModuleIndex, render_signature
from spyre_matrix.sources import download_wheel

from .api_index import INDEX_PATH, INDEXED_PACKAGES, SCHEMA, bodies_path

__all__ = ["index_release", "merge_releases", "write_index", "main"]

_DEFAULT_LIMIT = 40  # longest default value kept verbatim in a signature


def _unparse_default(node: ast.expr) -> str:
    text = ast.unparse(node)
    return text if len(text) <= _DEFAULT_LIMIT and "\n" not in text else "..."


def signature_text(args: ast.arguments) -> str:
    """Parameters as ``a, b=None, *, c=1, **kw`` (``/`` and ``*`` markers kept;
    defaults rendered when short, else ``...``)."""
    return ", ".join(render_signature(args, _unparse_default))


def _decorators(node: ast.FunctionDef | ast.AsyncFunctionDef) -> set[str]:
    names = set()
    for deco in node.decorator_list:
        target = deco.func if isinstance(deco, ast.Call) else deco
        if isinstance(target, ast.Name):
            names.add(target.id)
        elif isinstance(target, ast.Attribute):
            names.add(target.attr)
    return names


def _function_entry(node: ast.FunctionDef | ast.AsyncFunctionDef) -> str | None:
    """``f:<sig>`` (function/method), ``s:``/``c:`` static/class method, ``p`` property;
    ``None`` for a ``typing.overload`` stub."""
    decos = _decorators(node)
    if "overload" in decos:
        return None
    if decos & {"property", "cached_property"}:
        return "p"
    kind = "s" if "staticmethod" in decos else "c" if "classmethod" in decos else "f"
    return f"{kind}:{signature_text(node.args)}"


_DOTTED = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")


def _dotted(expr: ast.expr) -> str | None:
    """``a.b.C`` for a name chain (``Generic[T]`` -> ``Generic``), else ``None``."""
    expr = expr.value if isinstance(expr, ast.Subscript) else expr
    if not isinstance(expr, (ast.Name, ast.Attribute)):
        return None
    text = ast.unparse(expr)
    return text if _DOTTED.match(text) else None


def _absolute_base(dotted: str, module: str, bindings: dict[str, Any]) -> str:
    """A base-class expression as an absolute dotted name (through the module's imports)."""
    head, _, rest = dotted.partition(".")
    binding = bindings.get(head)
    if binding is None:
        return dotted  # a builtin (object, Exception) or unknown
    if hasattr(binding, "name") and hasattr(binding, "module"):  # from M import head
        base = f"{binding.module}.{binding.name}"
    elif hasattr(binding, "module"):  # import M as head
        base = binding.module
    else:
        base = f"{module}.{head}"
    return f"{base}.{rest}" if rest else base


def _class_entry(node: ast.ClassDef, module: str, bindings: dict[str, Any]) -> dict[str, Any]:
    methods: dict[str, str] = {}
    for stmt in node.body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            entry = _function_entry(stmt)
            if entry is not None:
                methods[stmt.name] = entry
    bases = [_absolute_base(d, module, bindings) for d in map(_dotted, node.bases) if d]
    return {"bases": bases, "methods": methods}


def _name_entry(binding: Any) -> str:
    """One module-level binding: ``c`` class, ``f:``/``s:``/``c:`` function, ``a`` value,
    ``a=<dotted>`` alias of another name, ``i:<module>.<name>`` from-import, ``m:<module>``."""
    if isinstance(binding, ast.ClassDef):
        return "c"
    if isinstance(binding, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return _function_entry(binding) or "f:"
    if hasattr(binding, "name") and hasattr(binding, "module"):
        return f"i:{binding.module}.{binding.name}"
    if hasattr(binding, "module"):
        return f"m:{binding.module}"
    dotted = _dotted(binding) if isinstance(binding, ast.expr) else None
    return f"a={dotted}" if dotted else "a"


class _NoAnnotations(ast.NodeTransformer):
    """Type hints do not change what code does (releases rewrite them wholesale)."""

    def visit_arg(self, node: ast.arg) -> ast.arg:
        node.annotation = None
        return node

    def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.FunctionDef:
        node.returns = None
        self.generic_visit(node)
        return node

    def visit_AnnAssign(self, node: ast.AnnAssign) -> ast.AST:
        if node.value is None:
            return ast.Pass()
        return ast.Assign(targets=[node.target], value=self.visit(node.value), lineno=0)


def body_fingerprint(node: ast.FunctionDef | ast.AsyncFunctionDef) -> str:
    """What a function does, as a short hash: its body's AST without the docstring,
    type hints, comments and layout (a release that only reformats keeps it)."""
    body = node.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
            and isinstance(body[0].value.value, str):
        body = body[1:]
    stripped = [_NoAnnotations().visit(copy.deepcopy(stmt)) for stmt in body]
    text = "\n".join(ast.dump(stmt) for stmt in stripped)
    return hashlib.blake2b(text.encode("utf-8"), digest_size=4).hexdigest()


def _bodies(bindings: dict[str, Any]) -> dict[str, str]:
    """Fingerprints of the module's own functions (``name``) and methods (``Class.name``)."""
    out: dict[str, str] = {}
    for n, b in bindings.items():
        if isinstance(b, (ast.FunctionDef, ast.AsyncFunctionDef)):
            out[n] = body_fingerprint(b)
        elif isinstance(b, ast.ClassDef):
            for stmt in b.body:
                if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    out[f"{n}.{stmt.name}"] = body_fingerprint(stmt)
    return out


def index_module(name: str, source: str, is_package: bool) -> dict[str, Any]:
    """Every name a module binds at its top level (imports included: they resolve at
    runtime too), its classes' bases and methods, their bodies' fingerprints, and its
    star imports."""
    mod = ModuleIndex.build(name, source, is_package)
    names = {n: _name_entry(b) for n, b in mod.bindings.items()}
    classes = {
        n: _class_entry(b, name, mod.bindings) for n, b in mod.bindings.items() if isinstance(b, ast.ClassDef)
    }
    return {"names": names, "classes": classes, "bodies": _bodies(mod.bindings), "star": sorted(set(mod.star_imports))}


def _module_name(relpath: str) -> tuple[str, bool]:
    parts = relpath[: -len(".py")].split("/")
    is_package = parts[-1] == "__init__"
    return ".".join(parts[:-1] if is_package else parts), is_package


def _wanted(relpath: str) -> bool:
    return relpath.endswith(".py") and any(relpath.startswith(p.replace(".", "/") + "/") for p in INDEXED_PACKAGES)


def _sources_in_tree(root: Path) -> Iterator[tuple[str, str]]:
    for package in INDEXED_PACKAGES:
        base = root.joinpath(*package.split("."))
        for path in sorted(base.rglob("*.py")):
            yield path.relative_to(root).as_posix(), path.read_text(encoding="utf-8", errors="replace")


def _sources_in_wheel(wheel: Path) -> Iterator[tuple[str, str]]:
    with zipfile.ZipFile(wheel) as archive:
        for member in sorted(archive.namelist()):
            if _wanted(member):
                yield member, archive.read(member).decode("utf-8", errors="replace")


def index_release(sources: Iterable[tuple[str, str]]) -> dict[str, dict[str, Any]]:
    """Module name -> :func:`index_module` for every ``(relative path, text)`` given."""
    modules: dict[str, dict[str, Any]] = {}
    for relpath, text in sources:
        name, is_package = _module_name(relpath)
        try:
            modules[name] = index_module(name, text, is_package)
        except SyntaxError:  # a file newer than this interpreter's grammar: present, contents unknown
            modules[name] = {"names": {}, "classes": {}, "bodies": {}, "star": [], "unparsed": True}
    return modules


def _add(table: dict[str, list[list[Any]]], key: str, value: Any, bit: int) -> None:
    """Record ``value`` for ``key`` in release ``bit`` (equal values share one mask)."""
    entries = table.setdefault(key, [])
    for entry in entries:
        if entry[0] == value:
            entry[1] |= bit
            return
    entries.append([value, bit])


def merge_releases(per_release: dict[str, dict[str, dict[str, Any]]]) -> dict[str, Any]:
    """Fold per-release module tables into the committed form: each fact once, with the
    bit mask of the releases (in ``releases`` order) where it holds."""
    releases = list(per_release)
    modules: dict[str, Any] = {}
    bodies: dict[str, Any] = {}
    for i, release in enumerate(releases):
        bit = 1 << i
        for name, info in per_release[release].items():
            mod = modules.setdefault(name, {"in": 0, "names": {}, "classes": {}, "star": []})
            mod["in"] |= bit
            for key, entry in info["names"].items():
                _add(mod["names"], key, entry, bit)
            for key, fingerprint in info.get("bodies", {}).items():
                _add(bodies.setdefault(name, {}), key, fingerprint, bit)
            for cls, cinfo in info["classes"].items():
                target = mod["classes"].setdefault(cls, {"bases": [], "methods": {}})
                found = next((e for e in target["bases"] if e[0] == cinfo["bases"]), None)
                if found:
                    found[1] |= bit
                else:
                    target["bases"].append([cinfo["bases"], bit])
                for meth, sig in cinfo["methods"].items():
                    _add(target["methods"], meth, sig, bit)
            if info["star"]:
                found = next((e for e in mod["star"] if e[0] == info["star"]), None)
                if found:
                    found[1] |= bit
                else:
                    mod["star"].append([info["star"], bit])
    return {"schema": SCHEMA, "packages": list(INDEXED_PACKAGES), "releases": releases,
            "modules": dict(sorted(modules.items())), "bodies": dict(sorted(bodies.items()))}


def write_index(data: dict[str, Any], path: Path) -> None:
    """Deterministic gzip JSON (no timestamp in the gzip header: reruns are byte-identical).
    The bodies' fingerprints go to a file of their own beside it (:func:`bodies_path`),
    read only by the checks that need them."""
    data = dict(data)
    bodies = data.pop("bodies", None)
    _write_json(data, path)
    if bodies is not None:
        _write_json({"schema": SCHEMA, "releases": data["releases"], "bodies": bodies}, bodies_path(path))


def _write_json(data: dict[str, Any], path: Path) -> None:
    raw = json.dumps(data, sort_keys=True, separators=(",", ":")).encode("utf-8")
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as fh, gzip.GzipFile(fileobj=fh, mode="wb", mtime=0, filename="") as gz:
        gz.write(raw)


def _release_sources(version: str, src: Path | None, fetch: bool, wheels: Path) -> Iterator[tuple[str, str]]:
    tree = src / version if src is not None else None
    if tree is not None and (tree / "torch" / "_inductor").is_dir():
        yield from _sources_in_tree(tree)
        return
    if not fetch:
        raise SystemExit(f"error: no torch/_inductor under {tree}; pass --fetch to download torch {version}")
    wheel = download_wheel(version, wheels)  # pip download of exactly that wheel
    try:
        yield from _sources_in_wheel(wheel)
    finally:
        wheel.unlink()  # ~1 GB each (CUDA builds): only the index is kept


def main(argv: list[str] | None = None) -> int:
    """Command line of the index builder (see the module docstring)."""
    parser = argparse.ArgumentParser(prog="python -m spyre_codemods.index_build", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("releases", nargs="*", metavar="X.Y.Z",
                        help="releases to index (default: every supported release of the catalog)")
    parser.add_argument("--src", type=Path, help="directory of extracted trees, <src>/<release>/torch/...")
    parser.add_argument("--fetch", action="store_true", help="pip download a release missing from --src")
    parser.add_argument("--out", type=Path, default=INDEX_PATH, help=f"output (default {INDEX_PATH})")
    args = parser.parse_args(argv)
    releases = args.releases
    if not releases:
        releases = [r.torch for r in load_catalog().supported]
    per_release: dict[str, dict[str, dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory(prefix="api-index-wheels-") as wheels:
        for version in releases:
            per_release[version] = index_release(_release_sources(version, args.src, args.fetch, Path(wheels)))
            print(f"{version}: {len(per_release[version])} modules", file=sys.stderr)
    write_index(merge_releases(per_release), args.out)
    print(f"wrote {args.out} ({args.out.stat().st_size // 1024} KiB)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
