"""Safe parsing of the ``py`` literals of workload files, e.g.
``(Ellipsis, None, slice(None, 64, None))``: Python literals plus ``Ellipsis``,
``None`` and ``slice(...)``. Never ``eval``: anything else is rejected."""

from __future__ import annotations

import ast
from typing import Any

_NAMES = {"None": None, "Ellipsis": Ellipsis, "True": True, "False": False}


def parse_literal(text: str) -> Any:
    """The value of ``text``; raises ValueError on anything but the allowed forms."""
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as exc:
        raise ValueError(f"not a literal: {text!r}") from exc
    return _value(tree.body, text)


def _value(node: ast.AST, text: str) -> Any:
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name) and node.id in _NAMES:
        return _NAMES[node.id]
    if isinstance(node, ast.Tuple):
        return tuple(_value(e, text) for e in node.elts)
    if isinstance(node, ast.List):
        return [_value(e, text) for e in node.elts]
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        v = _value(node.operand, text)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return -v if isinstance(node.op, ast.USub) else v
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "slice"
            and not node.keywords and len(node.args) <= 3):
        parts = [_value(a, text) for a in node.args]
        if all(p is None or (isinstance(p, int) and not isinstance(p, bool)) for p in parts):
            return slice(*parts)
    raise ValueError(f"unsupported literal {ast.unparse(node)!r} in {text!r}")
