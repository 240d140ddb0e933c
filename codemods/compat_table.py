"""Generate ``surface/compat_table.json``: where each ``spyre_shims.compat.*`` name resolves, per release.

    python -m spyre_codemods.compat_table            exit 1 when the committed table is stale
    python -m spyre_codemods.compat_table --write    regenerate it

The declaration (``surface/compat_api.toml``) lists the places Inductor has kept each
stable name; the per-release API index (built from the release wheels) says which
of them exists in each release, where it is really defined (re-exports followed),
what kind of object it is and, for functions, its signature. A name none of whose
places exists in a release, and that no shim covers there, is a ``missing`` entry:
the tests fail on it, so a stable name cannot silently stop resolving on a release.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from packaging.specifiers import SpecifierSet
from packaging.version import Version
from spyre_surface.compat_api import TABLE_PATH, StableName, load_compat_api

from .api_index import ApiIndex, ReleaseApi, is_indexed, load_index

__all__ = ["build_table", "resolve_in", "main"]

_KINDS = {"c": "class", "f": "function", "s": "function", "m": "module"}
#: the adapters module holding the stable API's own implementations (``shim`` entries)
SHIM_MODULE = "spyre_shims._torch.adapters.compat_shims"


def resolve_in(view: ReleaseApi, qualname: str) -> tuple[str, str, str | None] | None:
    """``(defining location "module:name", kind, signature)`` of ``qualname`` in one
    release, following re-exports; ``None`` when it does not exist there."""
    if view.has_module(qualname):
        return f"{qualname}:", "module", None
    module, _, name = qualname.rpartition(".")
    if not is_indexed(module):
        # outside torch._inductor/_dynamo (torch.utils._sympy ...): the index cannot tell;
        # the per-name test resolves it on every release of the matrix
        return f"{module}:{name}", "unindexed", None
    if not view.has_module(module) or not view.resolves(module, name):
        return None
    origin = view.origin(module, name)
    if origin is None:
        return None
    where, attr = origin
    if not attr:
        return f"{where}:", "module", None
    if not is_indexed(where):
        return f"{where}:{attr}", "unindexed", None  # defined outside the index (e.g. torch.utils)
    entry = view.names(where).get(attr, "")
    kind = _KINDS.get(entry[:1], "value") if entry[:2] in ("c", "f:", "s:", "c:", "m:") or entry == "c" else "value"
    if entry == "c":
        kind = "class"
    signature = entry[2:] if entry[:2] in ("f:", "s:", "c:") else None
    return f"{where}:{attr}", kind, signature


def _entry(index: ApiIndex, name: StableName) -> dict[str, Any]:
    where: dict[str, list[str]] = {}
    kinds: dict[str, list[str]] = {}
    signatures: dict[str, list[str]] = {}
    missing: list[str] = []
    shim = SpecifierSet(name.shim) if name.shim else None
    for release in index.release_names:
        minor = ".".join(release.split(".")[:2])
        view = index.view(release)
        assert view is not None
        if shim is not None and shim.contains(Version(release)):
            where.setdefault(f"{SHIM_MODULE}:{name.name}", []).append(minor)
            kinds.setdefault("class", []).append(minor)
            continue
        # indexed places first: the index knows whether they exist in this release
        ordered = sorted(name.locations, key=lambda q: not is_indexed(q.rpartition(".")[0]))
        found = next((r for q in ordered if (r := resolve_in(view, q)) is not None), None)
        if found is None:
            missing.append(minor)
            continue
        location, kind, signature = found
        where.setdefault(location, []).append(minor)
        kinds.setdefault(kind, []).append(minor)
        if signature is not None:
            signatures.setdefault(signature, []).append(minor)
    out: dict[str, Any] = {"where": where, "kind": kinds}
    if signatures:
        out["signatures"] = signatures
    if missing:
        out["missing"] = missing
    return out


def build_table(index: ApiIndex | None = None) -> dict[str, Any]:
    """The table, from the declaration and the index."""
    index = index or load_index()
    api = load_compat_api()
    releases = [".".join(r.split(".")[:2]) for r in index.release_names]
    modules = {m.name: {n.name: _entry(index, n) for n in m.names.values()} for m in api.modules.values()}
    return {"generated_by": "python -m spyre_codemods.compat_table --write", "releases": releases,
            "modules": modules}


def dumps(table: dict[str, Any]) -> str:
    return json.dumps(table, indent=1, sort_keys=True) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m spyre_codemods.compat_table", description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help=f"regenerate {TABLE_PATH.name}")
    args = parser.parse_args(argv)
    text = dumps(build_table())
    if args.write:
        TABLE_PATH.write_text(text, encoding="utf-8")
        print(f"wrote {TABLE_PATH}")
        return 0
    current = TABLE_PATH.read_text(encoding="utf-8") if TABLE_PATH.exists() else ""
    if current != text:
        print(f"{TABLE_PATH} is stale: run python -m spyre_codemods.compat_table --write", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
