"""Griffe extension: read the stable API's Sphinx-flavoured docstrings as Markdown.

* ``#:`` comments above a module or class attribute become its docstring (the
  Sphinx autodoc convention the sources use);
* roles such as ``:class:`~spyre_shims.errors.ShimError``` and ``:meth:`load```
  become autorefs links when they name a public object of the package, and inline
  code otherwise (torch, sympy, private helpers).
"""

from __future__ import annotations

import re
from typing import Any

import griffe

ROLE = re.compile(r":(?:py:)?(class|func|meth|mod|data|attr|exc|obj):`(~?)([\w.]+)`")
CALLABLE_ROLES = {"func", "meth"}


def _comment_docstring(attr: griffe.Attribute) -> str | None:
    if not attr.lineno or attr.filepath not in attr.lines_collection:
        return None
    lines = attr.lines_collection[attr.filepath]
    found: list[str] = []
    index = attr.lineno - 2  # the line above the assignment (lineno is 1-based)
    while index >= 0 and lines[index].strip().startswith("#:"):
        found.insert(0, lines[index].strip()[2:].strip())
        index -= 1
    return " ".join(found) or None


def _public_path(obj: griffe.Object | griffe.Alias) -> bool:
    current: Any = obj
    while current is not None:
        if not current.is_public:
            return False
        current = current.parent
    return True


def _resolve(scope: griffe.Object, target: str) -> str | None:
    """The full path of ``target`` as seen from ``scope``, if it is a public object here."""
    package = scope.package
    candidates = [target]
    current: Any = scope
    while current is not None:
        candidates.append(f"{current.path}.{target}")
        current = current.parent
    for path in candidates:
        if not path.startswith(package.path):
            continue
        try:
            obj = package.modules_collection[path]
        except (KeyError, ValueError, griffe.AliasResolutionError, griffe.CyclicAliasError):
            continue
        if obj is not None and _public_path(obj):
            return str(obj.path)
    return None


class SphinxToMarkdown(griffe.Extension):
    """See the module docstring."""

    def on_attribute_instance(self, *, node: Any, attr: griffe.Attribute, agent: Any, **kwargs: Any) -> None:
        if attr.docstring is None:
            text = _comment_docstring(attr)
            if text:
                attr.docstring = griffe.Docstring(text, lineno=attr.lineno, parent=attr)

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        self._convert(pkg, set())

    def _convert(self, obj: griffe.Object, seen: set[str]) -> None:
        if obj.path in seen:
            return
        seen.add(obj.path)
        if obj.docstring is not None:
            obj.docstring.value = ROLE.sub(lambda m: self._link(obj, m), obj.docstring.value)
        for member in obj.members.values():
            if not member.is_alias:
                self._convert(member, seen)  # type: ignore[arg-type]

    @staticmethod
    def _link(scope: griffe.Object, match: re.Match[str]) -> str:
        role, short, target = match.groups()
        shown = target.rsplit(".", 1)[-1] if short else target
        if role in CALLABLE_ROLES:
            shown += "()"
        scope_for_lookup = scope if scope.is_class or scope.is_module else scope.parent or scope
        path = _resolve(scope_for_lookup, target)
        return f"[`{shown}`][{path}]" if path else f"`{shown}`"
