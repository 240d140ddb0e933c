"""The stable API's tier 2 as data: ``compat_api.toml`` and ``compat_table.json``, and their reader.

``compat_api.toml`` declares each ``spyre_shims.compat.<module>`` name and where
Inductor keeps it; ``compat_table.json`` is generated from the per-release API
index (``python -m spyre_codemods.compat_table --write``) and says, release by
release, where each name resolves, what kind of object it is and, for functions,
its signature. Three readers on both sides of the torch boundary use them: the
shims resolve names with the table, ``migrate`` maps internal names onto stable
ones with the declaration, and the tests check one against the other. Standard
library only.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef,import-not-found,unused-ignore]

__all__ = ["DECLARATION_PATH", "TABLE_PATH", "StableName", "StableModule", "NoEquivalent", "CompatApi",
           "load_compat_api", "load_compat_table"]

DECLARATION_PATH = Path(__file__).with_name("compat_api.toml")
TABLE_PATH = Path(__file__).with_name("compat_table.json")
#: the stable package the modules live in
PACKAGE = "spyre_shims.compat"


@dataclass(frozen=True)
class StableName:
    """A re-exported name: ``spyre_shims.compat.<module>.<name>``."""

    module: str
    name: str
    #: dotted qualnames Inductor has used for it, newest first
    locations: tuple[str, ...]
    #: PEP 440 specifier of the releases where the stable API implements it itself
    shim: str | None = None

    @property
    def stable(self) -> str:
        return f"{PACKAGE}.{self.module}.{self.name}"


@dataclass(frozen=True)
class StableModule:
    """One ``spyre_shims.compat.<name>`` module: an extension point."""

    name: str
    doc: str
    names: dict[str, StableName]
    #: stable functions the module defines itself
    functions: tuple[str, ...] = ()
    #: internal qualname -> the stable function replacing it
    replaces: dict[str, str] = field(default_factory=dict)

    @property
    def exported(self) -> list[str]:
        """The module's ``__all__``: re-exports, then stable functions."""
        return [*self.names, *self.functions]


@dataclass(frozen=True)
class NoEquivalent:
    """An internal name deliberately left out of the stable API."""

    qualname: str
    reason: str
    instead: str


@dataclass(frozen=True)
class CompatApi:
    """The whole declaration."""

    modules: dict[str, StableModule]
    no_equivalent: dict[str, NoEquivalent]
    categories: dict[str, str]
    advice: dict[str, str]

    @functools.cached_property
    def _by_internal(self) -> dict[str, tuple[str, str]]:
        found: dict[str, tuple[str, str]] = {}
        for module in self.modules.values():
            for name in module.names.values():
                for qualname in name.locations:
                    found.setdefault(qualname, (module.name, name.name))
            for qualname, function in module.replaces.items():
                found.setdefault(qualname, (module.name, function))
        return found

    def stable_for(self, qualname: str) -> tuple[str, str] | None:
        """``(module, name)`` of the stable equivalent of an internal qualname."""
        return self._by_internal.get(qualname)

    def internal_names(self) -> frozenset[str]:
        return frozenset(self._by_internal)

    def category(self, qualname: str) -> str:
        """The extension point a use of ``qualname`` falls under (longest matching prefix)."""
        best, found = -1, "other"
        for prefix, category in self.categories.items():
            if (qualname == prefix or qualname.startswith(prefix + ".")) and len(prefix) > best:
                best, found = len(prefix), category
        return found


def _locations(module: str, name: str, value: Any) -> StableName:
    if isinstance(value, str):
        return StableName(module, name, (value,))
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        return StableName(module, name, tuple(value))
    if isinstance(value, dict) and isinstance(value.get("at"), str):
        shim = value.get("shim")
        return StableName(module, name, (value["at"],), str(shim) if shim is not None else None)
    raise ValueError(f"{DECLARATION_PATH.name}: module.{module}.names.{name}: expected a qualname, a list of "
                     f"qualnames or {{at = ..., shim = ...}}, got {value!r}")


@functools.cache
def load_compat_api(path: Path = DECLARATION_PATH) -> CompatApi:
    """The committed declaration (read once)."""
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    modules: dict[str, StableModule] = {}
    for mod, spec in data["module"].items():
        names = {n: _locations(mod, n, v) for n, v in spec.get("names", {}).items()}
        modules[mod] = StableModule(mod, spec.get("doc", ""), names, tuple(spec.get("functions", ())),
                                    dict(spec.get("replaces", {})))
    no_eq = {q: NoEquivalent(q, v["reason"], v["instead"]) for q, v in data.get("no_equivalent", {}).items()}
    return CompatApi(modules, no_eq, dict(data.get("categories", {})), dict(data.get("advice", {})))


@functools.cache
def load_compat_table(path: Path = TABLE_PATH) -> dict[str, Any]:
    """The generated per-release resolution table (read once)."""
    with path.open(encoding="utf-8") as fh:
        table: dict[str, Any] = json.load(fh)
    return table
