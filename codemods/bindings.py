"""A cheap answer to "which import does this name come from?" for the common case.

libcst's ScopeProvider answers it exactly but analyses the whole module first (about
a second on a large Inductor file). Most look-ups are simple: the name is bound at
module level by imports of one qualified name, and no enclosing function or class
rebinds it. :class:`ModuleBindings` answers those from two shallow scans and says
"don't know" (``UNKNOWN``) for everything else, so the caller falls back to the
ScopeProvider.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import libcst as cst

from .names import dotted, import_from_module

__all__ = ["UNKNOWN", "ModuleBindings"]

UNKNOWN = object()
_SCOPES = (cst.FunctionDef, cst.ClassDef, cst.Lambda)
_BLOCK_FIELDS = ("body", "handlers", "orelse", "finalbody", "cases")
_COMPREHENSIONS = (cst.ListComp, cst.SetComp, cst.DictComp, cst.GeneratorExp)


def _comprehension_targets(node: cst.ListComp | cst.SetComp | cst.DictComp | cst.GeneratorExp) -> set[str]:
    names: set[str] = set()
    comp: cst.CompFor | None = node.for_in
    while comp is not None:
        names.update(_target_names(comp.target))
        comp = comp.inner_for_in
    return names


def _target_names(node: cst.BaseExpression | cst.BaseAssignTargetExpression | None) -> Iterator[str]:
    if isinstance(node, cst.Name):
        yield node.value
    elif isinstance(node, (cst.Tuple, cst.List)):
        for element in node.elements:
            yield from _target_names(element.value)
    elif isinstance(node, cst.StarredElement):
        yield from _target_names(node.value)


def _import_locals(stmt: cst.Import | cst.ImportFrom, package: str | None) -> Iterator[tuple[str, str | None]]:
    """``(local name, absolute qualified name or None)`` for each name an import binds."""
    if isinstance(stmt, cst.Import):
        for alias in stmt.names:
            name = dotted(alias.name) or ""
            if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
                yield alias.asname.name.value, name
            else:
                yield name.partition(".")[0], name.partition(".")[0]
        return
    if isinstance(stmt.names, cst.ImportStar):
        yield "*", None
        return
    module = import_from_module(stmt, package)
    for alias in stmt.names:
        name = dotted(alias.name) or ""
        local = alias.asname.name.value if alias.asname and isinstance(alias.asname.name, cst.Name) else name
        yield local, f"{module}.{name}" if module is not None else None


class _Binder:
    """Names bound directly in one scope, from its statements only: expressions are not
    walked (a walrus binding a module-level import's name is not seen), nested scopes
    contribute only their own name."""

    def __init__(self, package: str | None) -> None:
        self.package = package
        self.other: set[str] = set()
        self.imports: dict[str, set[str | None]] = {}
        self.declared: set[str] = set()  # global/nonlocal/del: give up on these names

    def scan(self, body: Iterable[cst.CSTNode]) -> None:
        for stmt in body:
            if isinstance(stmt, cst.SimpleStatementLine):
                for small in stmt.body:
                    self._small(small)
            elif isinstance(stmt, (cst.FunctionDef, cst.ClassDef)):
                self.other.add(stmt.name.value)
            else:
                self._compound(stmt)

    def _small(self, small: cst.BaseSmallStatement) -> None:
        if isinstance(small, (cst.Import, cst.ImportFrom)):
            for local, qual in _import_locals(small, self.package):
                self.imports.setdefault(local, set()).add(qual)
        elif isinstance(small, cst.Assign):
            for target in small.targets:
                self.other.update(_target_names(target.target))
        elif isinstance(small, (cst.AnnAssign, cst.AugAssign)):
            self.other.update(_target_names(small.target))
        elif isinstance(small, (cst.Global, cst.Nonlocal)):
            self.declared.update(n.name.value for n in small.names)
        elif isinstance(small, cst.Del):
            self.declared.update(_target_names(small.target))  # type: ignore[arg-type]

    def _compound(self, stmt: cst.CSTNode) -> None:
        if isinstance(stmt, cst.For):
            self.other.update(_target_names(stmt.target))
        elif isinstance(stmt, cst.With):
            for item in stmt.items:
                if item.asname is not None:
                    self.other.update(_target_names(item.asname.name))  # type: ignore[arg-type]
        elif isinstance(stmt, (cst.ExceptHandler, cst.ExceptStarHandler)) and stmt.name is not None:
            self.other.update(_target_names(stmt.name.name))  # type: ignore[arg-type]
        elif isinstance(stmt, cst.Match):
            self.declared.add("*")  # capture patterns bind names: let the scope analysis decide
        for name in _BLOCK_FIELDS:
            child = getattr(stmt, name, None)
            if isinstance(child, cst.IndentedBlock):
                self.scan(child.body)
            elif isinstance(child, cst.SimpleStatementSuite):  # `if x: a = 1`
                for small in child.body:
                    self._small(small)
            elif isinstance(child, (cst.If, cst.Else, cst.Finally)):
                self._compound(child)
            elif isinstance(child, (list, tuple)):
                for item in child:
                    self._compound(item)


def _params(node: cst.FunctionDef | cst.Lambda) -> Iterable[str]:
    p = node.params
    for param in (*p.posonly_params, *p.params, *p.kwonly_params):
        yield param.name.value
    for star in (p.star_arg, p.star_kwarg):
        if isinstance(star, cst.Param):
            yield star.name.value


class ModuleBindings:
    """Fast origin look-ups for one module (``package`` resolves relative imports)."""

    def __init__(self, module: cst.Module, package: str | None) -> None:
        self.package = package
        self.top = self._scan(module.body, params=())
        self._scopes: dict[int, _Binder] = {}

    def _scan(self, body: Iterable[cst.CSTNode], params: Iterable[str]) -> _Binder:
        binder = _Binder(self.package)
        binder.other.update(params)
        binder.scan(body)
        return binder

    def _scope(self, node: cst.FunctionDef | cst.ClassDef | cst.Lambda) -> _Binder:
        key = id(node)
        if key not in self._scopes:
            if isinstance(node, cst.Lambda):
                self._scopes[key] = self._scan([], _params(node))
            else:
                binder = _Binder(self.package)
                binder.other.update(_params(node) if isinstance(node, cst.FunctionDef) else ())
                binder._compound(node)  # its body (one-line bodies included)
                self._scopes[key] = binder
        return self._scopes[key]

    def origin(self, name: str, ancestors: Iterable[cst.CSTNode]) -> str | None | object:
        """Absolute qualified name ``name`` is imported as where it is used (its
        ``ancestors``, innermost first), ``None`` when it is not an import, or
        ``UNKNOWN`` when only a full scope analysis can tell."""
        previous: cst.CSTNode | None = None
        for ancestor in ancestors:
            if isinstance(ancestor, _COMPREHENSIONS) and name in _comprehension_targets(ancestor):
                return UNKNOWN
            if isinstance(ancestor, _SCOPES):
                if previous is not None and previous is not ancestor.body:
                    previous = ancestor
                    continue  # decorators, bases, defaults: evaluated in the enclosing scope
                scope = self._scope(ancestor)
                if name in scope.other or name in scope.declared or "*" in scope.declared:
                    return UNKNOWN
                if name in scope.imports:  # a function-level import: the binding that applies here
                    return self._single(scope.imports[name])
            previous = ancestor
        top = self.top
        if name in top.declared or "*" in top.declared or "*" in top.imports:
            return UNKNOWN
        quals = top.imports.get(name)
        if not quals:
            return None
        return UNKNOWN if name in top.other else self._single(quals)

    @staticmethod
    def _single(quals: set[str | None]) -> str | object:
        if len(quals) != 1 or None in quals:
            return UNKNOWN
        (qual,) = quals
        return qual
