"""Does ``from torch._inductor… import X`` still work on the target release, and if
not, where did ``X`` go? Answered from the per-release API index.

Order of preference for a name that no longer resolves:

1. the object it was bound to on the source release, when that still resolves
   (``Union`` re-exported by ``codecache`` on 2.6 is ``typing.Union``);
2. the one module of the target release that defines a name of that spelling and
   kind (class/function/value), when there is exactly one;
3. otherwise a TODO naming the release that removed it and the closest candidates.
"""

from __future__ import annotations

import ast
import difflib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from .api_index import ApiIndex, ReleaseApi, is_indexed
from .fileio import module_names
from .names import absolutize
from .releases import Release, parse_release

__all__ = ["ImportVerdict", "ImportResolver", "UnresolvedImport", "unresolved_imports"]


@dataclass(frozen=True)
class ImportVerdict:
    """What to do with one imported name: move it (``module``/``name`` set) or leave a TODO."""

    module: str | None
    name: str | None
    message: str
    #: the class (qualified) whose classmethod/staticmethod the function became: the
    #: import takes the class and uses become ``Class.name``
    method_of: str | None = None

    @property
    def moves(self) -> bool:
        return self.module is not None


def _kind(entry: str | None) -> str:
    """Coarse kind of an index entry: class, function or value."""
    if not entry:
        return "?"
    return {"c": "class", "f": "function", "s": "function"}.get(entry[0], "value")


class ImportResolver:
    """Checks imports of indexed modules against ``target`` (memoised per name)."""

    def __init__(self, index: ApiIndex, source: Release | str, target: Release | str) -> None:
        self.source = parse_release(source)
        self.target = parse_release(target)
        self.index = index
        self.to: ReleaseApi | None = index.view(self.target)
        self.frm: ReleaseApi | None = index.nearest_view(self.source)
        self._cache: dict[tuple[str, str], ImportVerdict | None] = {}

    @property
    def active(self) -> bool:
        """False when the target release is not indexed (nothing can be checked)."""
        return self.to is not None

    def check(self, module: str, name: str) -> ImportVerdict | None:
        """``None`` when ``from module import name`` resolves on the target (or cannot
        be judged); otherwise a move or a TODO."""
        key = (module, name)
        if key not in self._cache:
            self._cache[key] = self._check(module, name)
        return self._cache[key]

    def check_module(self, module: str) -> ImportVerdict | None:
        """Same for ``import module`` (a dotted module path)."""
        if self.to is None or not is_indexed(module) or self.to.has_module(module):
            return None
        parent, _, name = module.rpartition(".")
        if self.to.resolves(parent, name):
            return None
        return ImportVerdict(None, None, f"module {module} does not exist on torch {self.target}"
                                         f"{self._removed(parent, name)}{self._module_hint(module)}")

    def _check(self, module: str, name: str) -> ImportVerdict | None:
        to = self.to
        if to is None or not is_indexed(module) or to.resolves(module, name):
            return None
        origin = self.frm.origin(module, name) if self.frm is not None and self.frm.resolves(module, name) else None
        where = f"{module}.{name}"
        if origin is not None and origin[1] and origin != (module, name) and to.resolves(*origin) \
                and not (is_indexed(origin[0]) and not to.has_module(origin[0])):
            return ImportVerdict(origin[0], origin[1],
                                 f"{where} -> {origin[0]}.{origin[1]} (where it was bound on {self.frm_name})")
        kind = _kind(self.frm.names(origin[0]).get(origin[1])) if self.frm and origin and origin[1] else "?"
        homes = [h for h in to.homes(name) if kind == "?" or _kind(to.names(h).get(name)) == kind]
        if len(homes) == 1:
            return ImportVerdict(homes[0], name, f"{where} -> {homes[0]}.{name} (its only home on torch {self.target})")
        home = origin[0] if origin is not None and origin[1] == name else module
        owner = self._became_method(home, name) if kind == "function" else None
        if owner is not None:
            return ImportVerdict(None, None, f"{where}{self._removed(module, name)} is now the class's own method "
                                             f"{home}.{owner}.{name}: {owner} is imported, calls become "
                                             f"{owner}.{name}(...)", method_of=f"{home}.{owner}")
        candidates = self._candidates(module, name, homes)
        hint = f"; closest: {', '.join(candidates)}" if candidates else "; no candidate in the index"
        return ImportVerdict(None, None, f"{name} cannot be imported from {module} on torch {self.target}"
                                         f"{self._removed(module, name)}{hint}")

    def _became_method(self, module: str, name: str) -> str | None:
        """The one class defined in ``module`` on the target whose own classmethod or
        staticmethod ``name`` is (``gen_common_triton_imports`` -> ``TritonKernel``, 2.11)."""
        assert self.to is not None
        if not self.to.has_module(module):
            return None
        owners = []
        for cls, entry in self.to.names(module).items():
            if not entry.startswith("c"):
                continue
            hit = self.to.method(f"{module}.{cls}", name)
            if hit is not None and hit[0] == f"{module}.{cls}" and hit[1].kind in ("c", "s"):
                owners.append(cls)
        return owners[0] if len(owners) == 1 else None

    @property
    def frm_name(self) -> str:
        return f"torch {self.frm.minor}" if self.frm is not None else "the source release"

    def _removed(self, module: str, name: str) -> str:
        """`` (removed in 2.N)``: the first indexed release after the source lacking it."""
        if self.frm is None or not self.frm.resolves(module, name):
            return f" (not found on torch {self.frm.minor} either)" if self.frm is not None else ""
        for view in self.index.views_between(self.frm.minor, self.target):
            if not view.resolves(module, name):
                return f" (removed in {view.minor})"
        return ""

    def _candidates(self, module: str, name: str, homes: list[str], n: int = 3) -> list[str]:
        assert self.to is not None
        ranked = sorted(homes, key=lambda h: -difflib.SequenceMatcher(None, h, module).ratio())
        found = [f"{h}.{name}" for h in ranked[:n]]
        if self.to.has_module(module):
            found += [f"{module}.{c}" for c in self.to.close_names(module, name) if c != name]
        return found[:n]

    def _module_hint(self, module: str) -> str:
        assert self.to is not None
        last = module.rpartition(".")[2]
        similar = sorted(m for m in self.to.modules if m.rpartition(".")[2] == last)[:3]
        return f"; modules named {last}: {', '.join(similar)}" if similar else ""


@dataclass(frozen=True)
class UnresolvedImport:
    """One ``from <indexed module> import name`` (or ``import <module>``) in a file that
    does not resolve on a release; ``marked``: a TODO of the codemods sits right above it."""

    path: str
    line: int
    module: str
    name: str | None
    marked: bool


def _todo_above(lines: list[str], line: int) -> bool:
    """Is there a ``# TODO(spyre-adapter ...`` comment in the comment block above ``line``?"""
    i = line - 2
    while i >= 0 and lines[i].lstrip().startswith("#"):
        if "TODO(spyre-adapter" in lines[i]:
            return True
        i -= 1
    return False


def unresolved_imports(files: Iterable[str | Path], release: Release | str, index: ApiIndex) -> list[UnresolvedImport]:
    """Every import of an indexed module in ``files`` that does not resolve on
    ``release`` (relative imports resolve against each file's package on disk)."""
    view = index.view(release)
    if view is None:
        raise ValueError(f"torch {release} is not in the API index")
    found: list[UnresolvedImport] = []
    for file in files:
        source = Path(file).read_text(encoding="utf-8-sig")
        lines = source.splitlines()
        _, package = module_names(Path(file))
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.ImportFrom):
                module = absolutize("." * node.level + (node.module or ""), package) if node.level else node.module
                if module is None or not is_indexed(module):
                    continue
                for alias in node.names:
                    missing = (not view.has_module(module)) if alias.name == "*" else not view.resolves(module, alias.name)
                    if missing:
                        found.append(UnresolvedImport(str(file), node.lineno, module, alias.name,
                                                      _todo_above(lines, node.lineno)))
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if is_indexed(alias.name) and not view.resolves_qualname(alias.name):
                        found.append(UnresolvedImport(str(file), node.lineno, alias.name, None,
                                                      _todo_above(lines, node.lineno)))
    return found
