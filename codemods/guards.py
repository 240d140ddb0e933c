"""Which parts of a file are compatibility shims that the codemods must not touch.

Vendors keep code working across releases with two idioms:

* ``try: <new spelling> except ImportError/AttributeError/TypeError: <old spelling>``
* ``if <torch version test or hasattr(...)>: <new> else: <old>`` (also ``a if cond else b``)

Rewriting the old spelling inside either destroys the shim (both branches end up
identical and the old-release path breaks), so every transform asks
:class:`GuardFinder` before editing a node and leaves guarded code alone.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

import libcst as cst

__all__ = ["COMPAT_EXCEPTIONS", "GuardFinder", "is_version_test", "catches_compat_error"]

#: Exceptions whose handler marks a try block as a release-compatibility shim.
COMPAT_EXCEPTIONS = frozenset(
    {"ImportError", "ModuleNotFoundError", "AttributeError", "TypeError", "NameError"}
)
#: Catch-alls count only around imports: `try: import x except Exception:` is a shim,
#: `try: work() except Exception: log()` is ordinary error handling.
_CATCH_ALL = frozenset({"Exception", "BaseException"})

# Identifiers and strings that make an `if` test a release check: torch.__version__,
# packaging's Version/parse, sys.version_info, TORCH_GE_2_9-style flags, hasattr probes.
_VERSION_WORD = re.compile(
    r"(?i)(version|hasattr|getattr|(^|_)(ge|gt|lt|le|eq)_?\d|torch_(ge|gt|lt|le|eq|at_least|older|newer)"
    r"|torch_?\d|minor|major|_since_)"
)


def _words(node: cst.CSTNode) -> list[str]:
    """Names, attribute names and string contents that appear in an expression."""
    found: list[str] = []

    class _Collect(cst.CSTVisitor):
        def visit_Name(self, n: cst.Name) -> None:
            found.append(n.value)

        def visit_SimpleString(self, n: cst.SimpleString) -> None:
            found.append(n.value.strip("\"'"))

    node.visit(_Collect())
    return found


def is_version_test(test: cst.BaseExpression) -> bool:
    """True when a condition reads like a torch release or feature probe."""
    return any(_VERSION_WORD.search(word) for word in _words(test))


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


def _has_import(node: cst.CSTNode) -> bool:
    class _Find(cst.CSTVisitor):
        found = False

        def visit_Import(self, n: cst.Import) -> None:
            self.found = True

        def visit_ImportFrom(self, n: cst.ImportFrom) -> None:
            self.found = True

    finder = _Find()
    node.visit(finder)
    return finder.found


def catches_compat_error(node: cst.Try) -> bool:
    """True when a handler catches an import/attribute/signature failure (or a
    catch-all around imports)."""
    names = {name for handler in node.handlers for name in _exception_names(handler.type)}
    if names & COMPAT_EXCEPTIONS:
        return True
    return bool(names & _CATCH_ALL) and _has_import(node.body)


class GuardFinder:
    """Answers "is this node inside a compat block?" for one file.

    ``ancestors`` yields the parents of a node of the *original* tree, innermost
    first; verdicts for each ``try``/``if`` are memoised because many candidate
    nodes share the same enclosing blocks.
    """

    def __init__(self, ancestors: Callable[[cst.CSTNode], Iterable[cst.CSTNode]]) -> None:
        self._ancestors = ancestors
        self._verdicts: dict[int, str | None] = {}

    def _verdict(self, node: cst.CSTNode) -> str | None:
        key = id(node)
        if key not in self._verdicts:
            verdict = None
            if isinstance(node, cst.Try) and catches_compat_error(node):
                verdict = "try/except compatibility block"
            elif isinstance(node, (cst.If, cst.IfExp)) and is_version_test(node.test):
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
