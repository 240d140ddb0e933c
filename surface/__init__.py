"""spyre_surface: the torch-internal surface the shims rely on, as data, and its one reader.

``surface.toml`` (shipped beside this module) lists every torch-internal symbol
the shims use: where the newest release keeps it, what else it was called, and
which stable-API feature needs it. Two readers need it on opposite sides of the
torch boundary: the runtime probe (:mod:`spyre_shims.probe`, with torch
imported) and the static matrix report (``spyre_matrix``, which never imports
torch and runs where torch is not installed). So the reader lives here, in a
package that imports nothing but the standard library.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef,import-not-found,unused-ignore]

__all__ = ["SPEC_PATH", "SurfaceSpecError", "Location", "SurfaceSymbol", "load_entries", "load_surface_spec",
           "tracked_modules", "renames"]

#: The committed declaration (package data).
SPEC_PATH = Path(__file__).with_name("surface.toml")

_KINDS = frozenset({"function", "class", "method", "attribute", "module"})


class SurfaceSpecError(ValueError):
    """A surface file that cannot be read or has a malformed entry (names the file and the entry)."""


@dataclass(frozen=True)
class Location:
    """A place in torch: a module and a qualified name inside it."""

    module: str
    name: str  # qualname inside the module ("Class.method" for methods)

    @property
    def key(self) -> str:
        return f"{self.module}:{self.name}"

    @classmethod
    def parse(cls, key: str) -> Location:
        module, _, name = key.partition(":")
        return cls(module, name)


@dataclass(frozen=True)
class SurfaceSymbol:
    """One torch-internal symbol the shims rely on."""

    location: Location  # where the newest release keeps it
    kind: str
    feature: str
    required: bool
    params: tuple[str, ...] | None  # expected leading parameter names
    aliases: tuple[Location, ...]  # where other releases keep it
    #: Per alias, the leading parameters it is expected to have there (an older
    #: signature the shims adapt to); ``None``: the same as ``params``.
    alias_params: tuple[tuple[str, ...] | None, ...] = ()

    @property
    def key(self) -> str:
        return self.location.key

    @property
    def candidates(self) -> tuple[Location, ...]:
        return (self.location, *self.aliases)

    def places(self) -> tuple[tuple[Location, tuple[str, ...] | None], ...]:
        """Every place to look, newest first, with the parameters expected there."""
        alias_params = self.alias_params or (None,) * len(self.aliases)
        return ((self.location, self.params),
                *((loc, params if params is not None else self.params) for loc, params in zip(self.aliases, alias_params)))


def _names(value: Any, what: str) -> tuple[str, ...] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"{what} must be a list of names")
    return tuple(value)


def _location(entry: Any, what: str) -> Location:
    if not isinstance(entry, Mapping) or not isinstance(entry.get("module"), str) or not isinstance(entry.get("name"), str):
        raise ValueError(f"{what} needs a module and a name")
    return Location(entry["module"], entry["name"])


def _symbol(entry: Any) -> SurfaceSymbol:
    location = _location(entry, "an entry")
    kind = entry.get("kind")
    if kind not in _KINDS:
        raise ValueError(f"kind {kind!r} is not one of {', '.join(sorted(_KINDS))}")
    aliases = entry.get("aliases", [])
    if not isinstance(aliases, list):
        raise ValueError("aliases must be a list of {module, name, params?}")
    return SurfaceSymbol(
        location=location,
        kind=kind,
        feature=str(entry.get("feature", "")),
        required=bool(entry.get("required", True)),
        params=_names(entry.get("params"), "params"),
        aliases=tuple(_location(a, "an alias") for a in aliases),
        alias_params=tuple(_names(a.get("params"), "an alias's params") for a in aliases),
    )


def _read(path: Path) -> list[Any]:
    try:
        with open(path, "rb") as handle:
            data = tomllib.load(handle)
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise SurfaceSpecError(f"{path}: cannot be read as TOML ({exc})") from None
    entries = data.get("symbol", [])
    if not isinstance(entries, list):
        raise SurfaceSpecError(f"{path}: expected [[symbol]] tables")
    return entries


def load_surface_spec(path: Path | None = None) -> tuple[SurfaceSymbol, ...]:
    """The declared symbols (default: the committed :data:`SPEC_PATH`). Raises
    :class:`SurfaceSpecError` naming the file and the entry for a malformed one."""
    path = path or SPEC_PATH
    out = []
    for n, entry in enumerate(_read(path)):
        try:
            out.append(_symbol(entry))
        except ValueError as exc:
            name = entry.get("name", "?") if isinstance(entry, Mapping) else "?"
            raise SurfaceSpecError(f"{path}: symbol {n} ({name}): {exc}") from None
    return tuple(out)


def load_entries(path: Path | None = None) -> list[dict[str, Any]]:
    """The declared symbols as plain tables, defaults filled in (``required``,
    ``params``, each alias's ``params``): what ``spyre_shims.probe.load_surface``
    returns."""
    return [{
        "name": s.location.name, "module": s.location.module, "kind": s.kind, "feature": s.feature,
        "required": s.required, "params": list(s.params) if s.params is not None else None,
        "aliases": [{"module": loc.module, "name": loc.name, "params": list(p) if p is not None else None}
                    for loc, p in s.places()[1:]],
    } for s in load_surface_spec(path)]


def tracked_modules(spec: tuple[SurfaceSymbol, ...]) -> list[str]:
    """Every module the shims touch in any release (primary and alias locations)."""
    return sorted({loc.module for symbol in spec for loc in symbol.candidates})


def renames(spec: tuple[SurfaceSymbol, ...]) -> dict[Location, Location]:
    """Known old -> new locations (aliases) so churn reports them as moves, not remove+add."""
    return {alias: symbol.location for symbol in spec for alias in symbol.aliases}
