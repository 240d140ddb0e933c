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


class _Binder(cst.CSTVisitor):
    """Names bound directly in one scope (nested scopes contribute only their own name)."""

    def __init__(self, package: str | None) -> None:
        super().__init__()
        self.package = package
        self.other: set[str] = set()
        self.imports: dict[str, set[str | None]] = {}
        self.declared: set[str] = set()  # global/nonlocal: give up on these names

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        self.other.add(node.name.value)
        return False

    def visit_ClassDef(self, node: cst.ClassDef) -> bool:
        self.other.add(node.name.value)
        return False

    def visit_Lambda(self, node: cst.Lambda) -> bool:
        return False

    def visit_Import(self, node: cst.Import) -> bool:
        for local, qual in _import_locals(node, self.package):
            self.imports.setdefault(local, set()).add(qual)
        return False

    def visit_ImportFrom(self, node: cst.ImportFrom) -> bool:
        return self.visit_Import(node)  # type: ignore[arg-type]

    def visit_AssignTarget(self, node: cst.AssignTarget) -> None:
        self.other.update(_target_names(node.target))

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        self.other.update(_target_names(node.target))

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        self.other.update(_target_names(node.target))

    def visit_For(self, node: cst.For) -> None:
        self.other.update(_target_names(node.target))

    def visit_AsName(self, node: cst.AsName) -> None:
        self.other.update(_target_names(node.name))  # type: ignore[arg-type]

    def visit_NamedExpr(self, node: cst.NamedExpr) -> None:
        self.other.update(_target_names(node.target))

    def visit_Global(self, node: cst.Global) -> None:
        self.declared.update(n.name.value for n in node.names)

    def visit_Nonlocal(self, node: cst.Nonlocal) -> None:
        self.declared.update(n.name.value for n in node.names)

    def visit_Del(self, node: cst.Del) -> None:
        self.declared.update(_target_names(node.target))  # type: ignore[arg-type]


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
        for stmt in body:
            stmt.visit(binder)
        return binder

    def _scope(self, node: cst.FunctionDef | cst.ClassDef | cst.Lambda) -> _Binder:
        key = id(node)
        if key not in self._scopes:
            if isinstance(node, cst.Lambda):
                self._scopes[key] = self._scan([node.body], _params(node))
            else:
                body = node.body.body if isinstance(node.body, cst.IndentedBlock) else [node.body]
                self._scopes[key] = self._scan(body, _params(node) if isinstance(node, cst.FunctionDef) else ())
        return self._scopes[key]

    def origin(self, name: str, ancestors: Iterable[cst.CSTNode]) -> str | None | object:
        """Absolute qualified name ``name`` is imported as where it is used (its
        ``ancestors``, innermost first), ``None`` when it is not an import, or
        ``UNKNOWN`` when only a full scope analysis can tell."""
        previous: cst.CSTNode | None = None
        for ancestor in ancestors:
            if isinstance(ancestor, _SCOPES):
                if previous is not None and previous is not ancestor.body:
                    previous = ancestor
                    continue  # decorators, bases, defaults: evaluated in the enclosing scope
                scope = self._scope(ancestor)
                if name in scope.other or name in scope.declared:
                    return UNKNOWN
                if name in scope.imports:  # a function-level import: the binding that applies here
                    return self._single(scope.imports[name])
            previous = ancestor
        top = self.top
        if name in top.declared or "*" in top.imports:
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
