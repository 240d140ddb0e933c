"""Where an internal Inductor/Dynamo name lands on the stable API, for ``migrate``.

The declaration (``surface/compat_api.toml``) names the internal places of each
``spyre_shims.compat.<module>`` name; vendor code often imports a name from a
module that only re-exports it (``from torch._inductor.codegen.common import
IndentedBuffer``), so the per-release API index follows re-exports to the place
the name is defined before the look-up; the other way round, a name imported from
where it is defined (``from torch._dynamo.decorators import disable``) finds the
stable name declared at a module that re-exports it (``torch._dynamo.disable``).
A stable name is only offered when the generated table shows it resolving on ``--to``.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from spyre_surface.compat_api import PACKAGE, CompatApi, load_compat_api, load_compat_table

from .api_index import ReleaseApi, load_index
from .releases import Release, parse_release

__all__ = ["StableTarget", "StableNames"]


@dataclass(frozen=True)
class StableTarget:
    """``from <module> import <name>``."""

    module: str
    name: str

    @property
    def short_module(self) -> str:
        return self.module.rpartition(".")[2]


class StableNames:
    """Internal qualname -> stable target, for code written against ``source``."""

    def __init__(self, source: Release | str | None, target: Release | str | None) -> None:
        index = load_index()
        self.api: CompatApi = load_compat_api()
        newest = index.releases[-1]
        self._views: list[ReleaseApi] = []
        for release in ([parse_release(source)] if source else []) + [newest]:
            view = index.nearest_view(release)
            if view is not None and view not in self._views:
                self._views.append(view)
        self._target = f"{parse_release(target or newest)}"
        self._table = load_compat_table()["modules"]

    def _resolves_on_target(self, module: str, name: str) -> bool:
        entry = self._table.get(module, {}).get(name)
        if entry is None:  # a stable function the module defines itself
            return name in self.api.modules[module].functions
        return self._target not in entry.get("missing", ())

    def _declared(self, qualname: str) -> StableTarget | None:
        found = self.api.stable_for(qualname)
        if found is None or not self._resolves_on_target(*found):
            return None
        return StableTarget(f"{PACKAGE}.{found[0]}", found[1])

    @functools.lru_cache(maxsize=4096)
    def canonical(self, qualname: str) -> str:
        """Where ``qualname`` is defined (re-exports followed) on the source release."""
        module, _, name = qualname.rpartition(".")
        for view in self._views:
            if view.has_module(qualname):
                return qualname
            if module and view.has_module(module):
                origin = view.origin(module, name)
                if origin is not None:
                    return f"{origin[0]}.{origin[1]}" if origin[1] else origin[0]
        return qualname

    @functools.cached_property
    def _by_definition(self) -> dict[str, str]:
        """Where each declared location is defined -> that declared location."""
        found: dict[str, str] = {}
        for qualname in sorted(self.api.internal_names()):
            found.setdefault(self.canonical(qualname), qualname)
        return found

    @functools.lru_cache(maxsize=4096)
    def target(self, qualname: str) -> StableTarget | None:
        """The stable name for an internal qualname (``None``: no equivalent)."""
        canonical = self.canonical(qualname)
        declared = self._by_definition.get(canonical)
        return (self._declared(qualname) or self._declared(canonical)
                or (self._declared(declared) if declared is not None else None))

    def is_module(self, qualname: str) -> bool:
        return any(view.has_module(qualname) for view in self._views)

    def category(self, qualname: str) -> str:
        return self.api.category(qualname)

    def advice(self, qualname: str) -> str:
        """Why there is no stable name, and what to use instead (for the TODO)."""
        for q in (qualname, self.canonical(qualname)):
            entry = self.api.no_equivalent.get(q)
            if entry is not None:
                return f"{entry.reason}; instead: {entry.instead}"
        category = self.category(qualname)
        if category in self.api.advice:
            return self.api.advice[category]
        if category in self.api.modules:
            return (f"not in {PACKAGE}.{category} (Inductor-internal, no stable name): "
                    f"keep it vendor-owned behind one module of yours")
        return "no stable-API equivalent: keep it vendor-owned behind one module of yours"
