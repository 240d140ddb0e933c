"""What a vendor on the stable API has to change per release: lines in vendor code that are release-specific.

Git history cannot show it yet (one commit serves every release), so it is
measured on the tree: a vendor line is release-specific when it reaches into
torch internals (``torch._inductor`` / ``_dynamo`` / ``_functorch``) or branches on
``torch.__version__``. For ``spyre_adapter`` this must be 0 on every release.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from spyre_matrix.paths import VENDOR_DIRS

INTERNAL_PACKAGES = ("torch._inductor", "torch._dynamo", "torch._functorch")
METHOD = (
    "lines in spyre_adapter/ and examples/ that import or reference torch._inductor/_dynamo/_functorch "
    "or compare torch.__version__ (ast scan); one commit serves every release, so the count applies to each"
)


@dataclass(frozen=True)
class VendorLine:
    path: str
    line: int
    reason: str


def _internal(module: str) -> bool:
    return any(module == p or module.startswith(p + ".") for p in INTERNAL_PACKAGES)


def _dotted(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        head = _dotted(node.value)
        return f"{head}.{node.attr}" if head else None
    return None


def _mentions_torch_version(node: ast.AST) -> bool:
    return any(_dotted(n) == "torch.__version__" for n in ast.walk(node) if isinstance(n, ast.Attribute))


def scan_source(source: str, path: str) -> list[VendorLine]:
    found: dict[int, str] = {}
    for node in ast.walk(ast.parse(source, filename=path)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if _internal(alias.name):
                    found.setdefault(node.lineno, f"import {alias.name}")
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names = [f"{node.module}.{a.name}" for a in node.names]
            if _internal(node.module) or any(_internal(n) for n in names):
                found.setdefault(node.lineno, f"from {node.module} import")
        elif isinstance(node, ast.Attribute):
            dotted = _dotted(node)
            if dotted and _internal(dotted):
                found.setdefault(node.lineno, f"uses {dotted}")
        elif isinstance(node, ast.Compare) and _mentions_torch_version(node):
            found.setdefault(node.lineno, "compares torch.__version__")
    return [VendorLine(path, line, reason) for line, reason in sorted(found.items())]


def scan_vendor(directories: Iterable[Path] = VENDOR_DIRS) -> list[VendorLine]:
    """Release-specific lines in the vendor trees (missing trees are simply empty),
    each named by its path from the tree's parent (``spyre_adapter/x.py``)."""
    out: list[VendorLine] = []
    for directory in directories:
        for path in sorted(directory.rglob("*.py")) if directory.is_dir() else []:
            out += scan_source(path.read_text(encoding="utf-8"), path.relative_to(directory.parent).as_posix())
    return out
