"""The file's own ``ast`` (Python's fast parser) beside the libcst tree: line spans of
each top-level block and of each method of a top-level class, and their source text.

The transforms skip blocks whose text names nothing they look for; getting that text
from libcst means generating code for the whole module once more, while slicing the
file's bytes by ``ast`` line spans costs next to nothing. Statements of the two trees
are paired in order (a libcst line ``a; b`` is two ``ast`` statements); when the
pairing does not add up, :func:`source_map` returns ``None`` and callers render text
themselves.
"""

from __future__ import annotations

import ast
from collections.abc import Sequence
from dataclasses import dataclass, field

import libcst as cst

__all__ = ["SourceMap", "source_map"]


@dataclass
class SourceMap:
    """``ast`` tree, source lines and the line span (first line, last line) of each
    statement at the top level or directly in a top-level class (by node id)."""

    tree: ast.Module
    lines: list[bytes]
    spans: dict[int, tuple[int, int]] = field(default_factory=dict)

    def text(self, span: tuple[int, int]) -> bytes:
        return b"".join(self.lines[span[0] - 1:span[1]])


def _span(node: ast.stmt) -> tuple[int, int]:
    decorators = getattr(node, "decorator_list", None) or []
    start = min([node.lineno, *(d.lineno for d in decorators)])
    return start, node.end_lineno or node.lineno


def _pair(cst_body: Sequence[cst.BaseStatement], ast_body: Sequence[ast.stmt], out: SourceMap, depth: int) -> bool:
    i = 0
    for stmt in cst_body:
        if isinstance(stmt, cst.SimpleStatementLine):
            count = len(stmt.body)
            if i + count > len(ast_body):
                return False
            out.spans[id(stmt)] = (ast_body[i].lineno, ast_body[i + count - 1].end_lineno or ast_body[i].lineno)
            i += count
            continue
        if i >= len(ast_body):
            return False
        node = ast_body[i]
        i += 1
        out.spans[id(stmt)] = _span(node)
        if depth == 0 and isinstance(stmt, cst.ClassDef) and isinstance(node, ast.ClassDef) \
                and isinstance(stmt.body, cst.IndentedBlock):
            if not _pair(stmt.body.body, node.body, out, depth + 1):
                return False
    return i == len(ast_body)


def source_map(module: cst.Module, source: bytes) -> SourceMap | None:
    """The map for ``module`` parsed from ``source`` (``None`` if the trees do not pair)."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return None
    out = SourceMap(tree, source.splitlines(keepends=True))
    return out if _pair(module.body, tree.body, out, 0) else None
