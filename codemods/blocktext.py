"""The source text of each top-level block and of each method of a top-level class,
sliced from the file's bytes with line spans from Python's own (fast) ``ast`` parser.

The transforms skip blocks whose text names nothing they look for; getting that
text from libcst means generating code for the whole module once more. Statements
of the libcst and ``ast`` trees are paired in order (a libcst line ``a; b`` is two
``ast`` statements); when the pairing does not add up, there is no map and the
caller renders text itself.
"""

from __future__ import annotations

import ast
from collections.abc import Sequence

import libcst as cst

__all__ = ["block_texts"]


def _span(node: ast.stmt) -> tuple[int, int]:
    decorators = getattr(node, "decorator_list", None) or []
    start = min([node.lineno, *(d.lineno for d in decorators)])
    return start, node.end_lineno or node.lineno


def _pair(
    cst_body: Sequence[cst.BaseStatement], ast_body: Sequence[ast.stmt], lines: list[bytes], out: dict[int, bytes],
    depth: int,
) -> bool:
    i = 0
    for stmt in cst_body:
        if isinstance(stmt, cst.SimpleStatementLine):
            i += len(stmt.body)
            continue
        if i >= len(ast_body):
            return False
        node = ast_body[i]
        i += 1
        start, end = _span(node)
        out[id(stmt)] = b"".join(lines[start - 1:end])
        if depth == 0 and isinstance(stmt, cst.ClassDef) and isinstance(node, ast.ClassDef) \
                and isinstance(stmt.body, cst.IndentedBlock):
            if not _pair(stmt.body.body, node.body, lines, out, depth + 1):
                return False
    return i == len(ast_body)


def block_texts(module: cst.Module, source: bytes) -> dict[int, bytes] | None:
    """``id(block) -> source bytes`` for top-level compound statements and the
    compound statements directly in top-level classes; ``None`` if unavailable."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return None
    lines = source.splitlines(keepends=True)
    out: dict[int, bytes] = {}
    return out if _pair(module.body, tree.body, lines, out, 0) else None
