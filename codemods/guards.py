"""Which parts of a file are compatibility shims that the codemods must not touch.

Vendors keep code working across releases with a few idioms, and each is a test of
*torch itself*:

* ``try: <torch import> except ImportError/ModuleNotFoundError: <fallback>``, or
  ``except AttributeError`` around a torch import or a torch attribute;
* ``if <torch version test>: <new> else: <old>`` (also ``a if cond else b``): the test
  reads ``torch.__version__`` (directly, through ``packaging``, or through a flag the
  file computes from it, e.g. ``TORCH_GE_2_9``), or probes a torch object with
  ``hasattr``/``getattr``, or a torch module with ``importlib.util.find_spec``.

Rewriting the old spelling inside one destroys the shim (both branches end up
identical and the old-release path breaks), so the transforms leave such code alone.
Anything else is ordinary code: ``hasattr(expr, "free_symbols")`` on a sympy object
or ``except (TypeError, ValueError)`` around a float conversion guards nothing.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

import libcst as cst

__all__ = ["IMPORT_ERRORS", "GuardFinder", "is_version_test", "catches_compat_error", "version_flags"]

#: Exceptions that mark a try block as a release-compatibility shim (when its body
#: touches torch).
IMPORT_ERRORS = frozenset({"ImportError", "ModuleNotFoundError"})
_ATTRIBUTE_ERRORS = frozenset({"AttributeError"})
#: Catch-alls count only around torch imports.
_CATCH_ALL = frozenset({"Exception", "BaseException"})
#: A flag named like a torch release test (imported from elsewhere, so its value
#: cannot be seen): TORCH_GE_2_9, IS_TORCH_2_6, torch_version_at_least...
_FLAG_NAME = re.compile(r"(?i)torch_?(v(ersion)?_?)?(ge|gt|lt|le|eq|at_least|older|newer|before|after)"
                        r"|torch_?(v(ersion)?_?)?\d|^_?torch_version")
_PROBES = frozenset({"hasattr", "getattr"})

#: Decides whether an expression names torch or something imported from it.
TorchTest = Callable[[cst.BaseExpression], bool]


def _root_name(node: cst.BaseExpression) -> cst.Name | None:
    while isinstance(node, (cst.Attribute, cst.Subscript, cst.Call)):
        node = node.value if isinstance(node, (cst.Attribute, cst.Subscript)) else node.func
    return node if isinstance(node, cst.Name) else None


def _by_name(expr: cst.BaseExpression) -> bool:
    """Fallback torch test without scope analysis: the chain starts at ``torch``."""
    root = _root_name(expr)
    return root is not None and root.value == "torch"


class _TestScan(cst.CSTVisitor):
    """Looks for a torch version read, a torch probe, or a version flag in a test."""

    def __init__(self, is_torch: TorchTest, flags: frozenset[str]) -> None:
        super().__init__()
        self.is_torch = is_torch
        self.flags = flags
        self.found = False

    def visit_Attribute(self, node: cst.Attribute) -> bool:
        if node.attr.value == "__version__" and self.is_torch(node.value):
            self.found = True
        return not self.found

    def visit_Name(self, node: cst.Name) -> None:
        if node.value in self.flags or _FLAG_NAME.search(node.value):
            self.found = True

    def visit_Call(self, node: cst.Call) -> bool:
        func = node.func
        name = func.value if isinstance(func, cst.Name) else func.attr.value if isinstance(func, cst.Attribute) else ""
        if name in _PROBES and node.args and self.is_torch(node.args[0].value):
            self.found = True
        elif name == "find_spec" and node.args:
            first = node.args[0].value
            if isinstance(first, cst.SimpleString) and first.evaluated_value.startswith("torch"):
                self.found = True
        return not self.found


def is_version_test(
    test: cst.BaseExpression, is_torch: TorchTest = _by_name, flags: Iterable[str] = ()
) -> bool:
    """True when a condition tests torch itself: its version, a ``hasattr``/``getattr``
    probe of a torch object, or a flag computed from torch's version."""
    scan = _TestScan(is_torch, frozenset(flags))
    test.visit(scan)
    return scan.found


def version_flags(module: cst.Module, is_torch: TorchTest = _by_name) -> frozenset[str]:
    """Module-level names assigned from a torch version test (``TORCH_GE_2_9 = ...``)."""
    flags: set[str] = set()
    for stmt in module.body:
        if not isinstance(stmt, cst.SimpleStatementLine):
            continue
        for small in stmt.body:
            if isinstance(small, cst.Assign) and len(small.targets) == 1 \
                    and isinstance(small.targets[0].target, cst.Name) and is_version_test(small.value, is_torch, flags):
                flags.add(small.targets[0].target.value)
            elif isinstance(small, cst.AnnAssign) and isinstance(small.target, cst.Name) \
                    and small.value is not None and is_version_test(small.value, is_torch, flags):
                flags.add(small.target.value)
    return frozenset(flags)


def _exception_names(expr: cst.BaseExpression | None) -> list[str]:
    if expr is None:  # bare `except:`
        return ["BaseException"]
    if isinstance(expr, cst.Tuple):
        return [n for el in expr.elements for n in _exception_names(el.value)]
    if isinstance(expr, cst.Name):
        return [expr.value]
    if isinstance(expr, cst.Attribute):
        return [expr.attr.value]
    return []


class _BodyScan(cst.CSTVisitor):
    """Does a try body import from torch, or touch a torch attribute?"""

    def __init__(self, is_torch: TorchTest, package: str | None) -> None:
        super().__init__()
        self.is_torch = is_torch
        self.package = package or ""
        self.imports_torch = False
        self.touches_torch = False

    def visit_Import(self, node: cst.Import) -> bool:
        if any(_dotted_head(a.name) == "torch" for a in node.names):
            self.imports_torch = True
        return False

    def visit_ImportFrom(self, node: cst.ImportFrom) -> bool:
        if node.relative:
            self.imports_torch |= self.package == "torch" or self.package.startswith("torch.")
        elif node.module is not None and _dotted_head(node.module) == "torch":
            self.imports_torch = True
        return False

    def visit_Attribute(self, node: cst.Attribute) -> bool:
        if not self.touches_torch and self.is_torch(node):
            self.touches_torch = True
        return False  # the outermost chain decides


def _dotted_head(node: cst.BaseExpression) -> str:
    root = _root_name(node)
    return root.value if root is not None else ""


def catches_compat_error(node: cst.Try, is_torch: TorchTest = _by_name, package: str | None = None) -> bool:
    """True when the try block is a torch-compatibility shim: a handler catches an
    import failure around a torch import, an ``AttributeError`` around a torch import
    or attribute, or anything around a torch import."""
    names = {name for handler in node.handlers for name in _exception_names(handler.type)}
    if not names & (IMPORT_ERRORS | _ATTRIBUTE_ERRORS | _CATCH_ALL):
        return False
    scan = _BodyScan(is_torch, package)
    node.body.visit(scan)
    if scan.imports_torch:
        return True
    return bool(names & _ATTRIBUTE_ERRORS) and scan.touches_torch


class GuardFinder:
    """Answers "is this node inside a compat block?" for one file.

    ``ancestors`` yields the parents of a node of the *original* tree, innermost
    first; ``is_torch`` tells whether an expression names torch or something imported
    from it; ``flags`` are the file's version flags. Verdicts for each ``try``/``if``
    are memoised because many candidate nodes share the same enclosing blocks.
    """

    def __init__(
        self,
        ancestors: Callable[[cst.CSTNode], Iterable[cst.CSTNode]],
        is_torch: TorchTest = _by_name,
        flags: Callable[[], frozenset[str]] = frozenset,
        package: str | None = None,
    ) -> None:
        self._ancestors = ancestors
        self._is_torch = is_torch
        self._flags = flags
        self._package = package
        self._verdicts: dict[int, str | None] = {}

    def _verdict(self, node: cst.CSTNode) -> str | None:
        key = id(node)
        if key not in self._verdicts:
            verdict = None
            if isinstance(node, cst.Try) and catches_compat_error(node, self._is_torch, self._package):
                verdict = "try/except compatibility block"
            elif isinstance(node, (cst.If, cst.IfExp)) and is_version_test(node.test, self._is_torch, self._flags()):
                verdict = "version-guarded block"
            self._verdicts[key] = verdict
        return self._verdicts[key]

    def block(self, node: cst.CSTNode) -> tuple[cst.CSTNode, str] | None:
        """The nearest compat block around ``node`` and its description."""
        for current in self._ancestors(node):
            if isinstance(current, (cst.Try, cst.If, cst.IfExp)):
                verdict = self._verdict(current)
                if verdict is not None:
                    return current, verdict
        return None

    def guard(self, node: cst.CSTNode) -> str | None:
        """Describe the compat block around ``node`` (``None`` when there is none)."""
        found = self.block(node)
        return None if found is None else found[1]
