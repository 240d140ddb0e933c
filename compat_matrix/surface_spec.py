"""The shims' torch-internal surface as declared in ``shims/_torch/surface.toml`` (read-only here)."""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spyre_compat.paths import SURFACE_SPEC


@dataclass(frozen=True)
class Location:
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

    @property
    def key(self) -> str:
        return self.location.key

    @property
    def candidates(self) -> tuple[Location, ...]:
        return (self.location, *self.aliases)


def _symbol(entry: Mapping[str, Any]) -> SurfaceSymbol:
    params = entry.get("params")
    return SurfaceSymbol(
        location=Location(entry["module"], entry["name"]),
        kind=entry["kind"],
        feature=entry.get("feature", ""),
        required=bool(entry.get("required", True)),
        params=tuple(params) if params is not None else None,
        aliases=tuple(Location(a["module"], a["name"]) for a in entry.get("aliases", [])),
    )


def load_surface_spec(path: Path | None = None) -> tuple[SurfaceSymbol, ...]:
    with open(path or SURFACE_SPEC, "rb") as handle:
        data = tomllib.load(handle)
    return tuple(_symbol(entry) for entry in data.get("symbol", []))


def tracked_modules(spec: tuple[SurfaceSymbol, ...]) -> list[str]:
    """Every module the shims touch in any release (primary and alias locations)."""
    return sorted({loc.module for symbol in spec for loc in symbol.candidates})


def renames(spec: tuple[SurfaceSymbol, ...]) -> dict[Location, Location]:
    """Known old -> new locations (aliases) so churn reports them as moves, not remove+add."""
    return {alias: symbol.location for symbol in spec for alias in symbol.aliases}
