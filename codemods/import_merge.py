"""Names an upgrade moves into a module the file already imports from join that import.

``from torch._inductor.codecache import Union`` becomes ``Union`` in the file's own
``from typing import Optional`` (-> ``from typing import Optional, Union``) instead of a
line of its own. The names go where the author would put them: in sorted order when the
list is sorted, else at the end, with the list's own separators (one per line stays one
per line, a trailing comma stays).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import libcst as cst

from .names import dotted

__all__ = ["top_level_from_modules", "merge_names", "MergeImports"]


def top_level_from_modules(module: cst.Module) -> frozenset[str]:
    """Modules of the module-level ``from M import a, b`` statements (absolute, no ``*``)."""
    found = set()
    for stmt in module.body:
        if isinstance(stmt, cst.SimpleStatementLine):
            for small in stmt.body:
                if isinstance(small, cst.ImportFrom) and not small.relative and small.module is not None \
                        and not isinstance(small.names, cst.ImportStar):
                    found.add(dotted(small.module) or "")
    return frozenset(found - {""})


def _key(alias: cst.ImportAlias) -> str:
    return (dotted(alias.name) or "").lower()


def merge_names(node: cst.ImportFrom, aliases: Sequence[cst.ImportAlias]) -> cst.ImportFrom:
    """``node`` with ``aliases`` added (those it already has are skipped)."""
    assert not isinstance(node.names, cst.ImportStar)
    old = list(node.names)
    have = {(dotted(a.name), a.asname.name.value if a.asname and isinstance(a.asname.name, cst.Name) else None)
            for a in old}
    fresh = [a for a in aliases if (dotted(a.name), a.asname.name.value if a.asname
                                    and isinstance(a.asname.name, cst.Name) else None) not in have]
    if not fresh:
        return node
    trailing = old[-1].comma if isinstance(old[-1].comma, cst.Comma) else None
    sep = next((a.comma for a in reversed(old[:-1]) if isinstance(a.comma, cst.Comma)), None)
    if sep is None:  # one name: one per line if the parenthesis opens a line
        opening = node.lpar.whitespace_after if node.lpar is not None else None
        sep = cst.Comma(whitespace_after=opening if isinstance(opening, cst.ParenthesizedWhitespace)
                        else cst.SimpleWhitespace(" "))
    names = list(old)
    in_order = [_key(a) for a in old] == sorted(_key(a) for a in old)
    for alias in fresh:
        at = next((i for i, a in enumerate(names) if _key(a) > _key(alias)), len(names)) if in_order else len(names)
        names.insert(at, alias)
    fresh_ids = {id(a) for a in fresh}
    out = []
    for i, alias in enumerate(names):
        if i == len(names) - 1:
            out.append(alias.with_changes(comma=trailing if trailing is not None else cst.MaybeSentinel.DEFAULT))
        elif id(alias) in fresh_ids or not isinstance(alias.comma, cst.Comma) or alias.comma is trailing:
            out.append(alias.with_changes(comma=sep))  # a new name, or the old last one
        else:
            out.append(alias)
    return node.with_changes(names=out)


class MergeImports(cst.CSTTransformer):
    """Add ``pending`` (module -> aliases) to the first module-level ``from module import``
    of each module; ``left`` keeps what found no such statement."""

    def __init__(self, pending: Mapping[str, Sequence[cst.ImportAlias]]) -> None:
        super().__init__()
        self.left = {m: list(a) for m, a in pending.items()}

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return False

    def visit_ClassDef(self, node: cst.ClassDef) -> bool:
        return False

    def visit_If(self, node: cst.If) -> bool:
        return False  # an import in a block may be a compat branch

    def visit_Try(self, node: cst.Try) -> bool:
        return False

    def leave_ImportFrom(self, original_node: cst.ImportFrom, updated_node: cst.ImportFrom) -> cst.ImportFrom:
        module = dotted(original_node.module) if original_node.module is not None else None
        if original_node.relative or module not in self.left or isinstance(original_node.names, cst.ImportStar):
            return updated_node
        return merge_names(updated_node, self.left.pop(module))
