"""Per-release surface extraction: what the shims' torch-internal surface looks like in one release.

Input: a release's source tree (never imported). Output: the JSON committed as
``compat_matrix/surface/<version>.json``, from which the report is rendered.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from spyre_surface import SurfaceSymbol, renames

from spyre_matrix.churn import diff_api, tree_diff, tree_stats
from spyre_matrix.paths import SURFACE_DIR
from spyre_matrix.source_tree import SourceTree, parameter_names

SURFACE_SCHEMA = 1
INDUCTOR = "torch._inductor"
STATUSES = ("present", "moved", "missing")


def classify(tree: SourceTree, symbol: SurfaceSymbol) -> dict[str, Any]:
    """present (expected place) / moved (only under an alias) / missing, plus signature check."""
    for location in symbol.candidates:
        definition = tree.resolve(location.module, location.name)
        if definition is None:
            continue
        signature = definition.signature
        changed = False
        if symbol.params is not None:
            names = parameter_names(signature) if signature is not None else ()
            changed = names[: len(symbol.params)] != symbol.params
        return {
            "status": "present" if location == symbol.location else "moved",
            "found": location.key,
            "defined": definition.key,
            "kind": definition.kind,
            "signature": list(signature) if signature is not None else None,
            "signature_changed": changed,
        }
    return {"status": "missing", "found": None, "defined": None, "kind": None,
            "signature": None, "signature_changed": False}


def touched_surface(tree: SourceTree, spec: Iterable[SurfaceSymbol], symbols: dict[str, Any]) -> dict[str, str]:
    """The API the shims touch in this release: "module:qualname" -> descriptor.

    Every surface symbol where it was found, plus every public member of each
    class the shims touch (the class itself, or the owner of a touched method),
    since a vendor subclass inherits all of it.
    """
    out: dict[str, str] = {}
    for symbol in spec:
        found = symbols[symbol.key]["found"]
        if found is None:
            continue
        module, _, qualname = found.partition(":")
        out[found] = tree.describe(module, qualname) or "attr"
        owner = {"method": qualname.rpartition(".")[0], "class": qualname}.get(symbol.kind, "")
        if owner and tree.describe(module, owner) == "class":
            out[f"{module}:{owner}"] = "class"
            out.update({f"{module}:{q}": d for q, d in tree.members(module, owner).items()})
    return dict(sorted(out.items()))


def whole_api(tree: SourceTree, package: str = INDUCTOR) -> dict[str, str]:
    """Public API of every module in ``package`` (for release-to-release counts only)."""
    return {
        f"{module}:{qualname}": descriptor
        for module in tree.modules_under(package)
        for qualname, descriptor in tree.api(module).items()
    }


def _package_dir(tree: SourceTree, package: str) -> Path:
    return tree.root.joinpath(*package.split("."))


def extract_release(
    version: str,
    tree: SourceTree,
    spec: tuple[SurfaceSymbol, ...],
    previous: tuple[str, SourceTree] | None = None,
) -> dict[str, Any]:
    """The committed per-release surface record.

    ``previous`` (version, tree) adds the measurements that need both trees
    (line diff and whole-Inductor API diff); surface churn is recomputed from
    the committed ``surface`` maps at report time.
    """
    symbols = {symbol.key: classify(tree, symbol) for symbol in spec}
    inductor_dir = _package_dir(tree, INDUCTOR)
    stats = tree_stats(inductor_dir)
    record: dict[str, Any] = {
        "schema": SURFACE_SCHEMA,
        "torch": version,
        "build": tree.version,
        "symbols": symbols,
        "surface": touched_surface(tree, spec, symbols),
        "inductor": {"files": stats.files, "lines": stats.lines, "vs_previous": None},
    }
    if previous is not None:
        prev_version, prev_tree = previous
        lines = tree_diff(_package_dir(prev_tree, INDUCTOR), inductor_dir)
        api = diff_api(whole_api(prev_tree), whole_api(tree), surface_renames(spec))
        record["inductor"]["vs_previous"] = {
            "torch": prev_version,
            "added_lines": lines.added_lines,
            "removed_lines": lines.removed_lines,
            "files_added": lines.files_added,
            "files_removed": lines.files_removed,
            "files_changed": lines.files_changed,
            "api": api.counts(),
        }
    return record


def surface_renames(spec: tuple[SurfaceSymbol, ...]) -> dict[str, str]:
    """Known old key -> new key (the shims' aliases), for :func:`spyre_matrix.churn.diff_api`."""
    return {old.key: new.key for old, new in renames(spec).items()}


# -- committed JSON --------------------------------------------------------------------


def surface_path(version: str, directory: Path = SURFACE_DIR) -> Path:
    return directory / f"{version}.json"


def write_surface(record: dict[str, Any], directory: Path = SURFACE_DIR) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = surface_path(record["torch"], directory)
    # sort_keys + fixed indent: re-extraction of the same tree gives the same bytes.
    path.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return path


def read_surface(version: str, directory: Path = SURFACE_DIR) -> dict[str, Any] | None:
    path = surface_path(version, directory)
    if not path.is_file():
        return None
    return json.loads(path.read_text(encoding="utf-8"))
