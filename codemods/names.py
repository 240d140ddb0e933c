"""Small helpers between dotted names and libcst nodes (no torch, no metadata)."""

from __future__ import annotations

import libcst as cst

__all__ = [
    "absolutize",
    "dotted",
    "dotted_expr",
    "import_from_module",
    "module_reference",
    "INTERNAL_PREFIXES",
    "is_internal",
]

#: Packages whose contents are torch internals (the stable API exists to hide them).
INTERNAL_PREFIXES: tuple[str, ...] = ("torch._inductor", "torch._dynamo", "torch._functorch")


def is_internal(qualname: str) -> bool:
    """True for ``torch._inductor``/``torch._dynamo``/``torch._functorch`` and below."""
    return any(qualname == p or qualname.startswith(p + ".") for p in INTERNAL_PREFIXES)


def absolutize(qualname: str, package: str | None) -> str | None:
    """Turn libcst's relative qualified names (``..ir.LoopBody``) into absolute ones.

    ``package`` is the package of the file being rewritten (``torch._inductor.codegen``
    for ``torch/_inductor/codegen/simd.py``); ``None`` when the file is not in a
    package, in which case relative names cannot be resolved and ``None`` is returned.
    """
    if not qualname.startswith("."):
        return qualname
    level = len(qualname) - len(qualname.lstrip("."))
    rest = qualname[level:]
    if not package:
        return None
    parts = package.split(".")
    if level - 1 > len(parts) - 1:
        return None
    base = parts[: len(parts) - (level - 1)]
    return ".".join(base + ([rest] if rest else []))


def dotted(expr: cst.BaseExpression | None) -> str | None:
    """``a.b.c`` for a Name/Attribute chain, ``None`` for anything else."""
    if isinstance(expr, cst.Name):
        return expr.value
    if isinstance(expr, cst.Attribute):
        head = dotted(expr.value)
        return None if head is None else f"{head}.{expr.attr.value}"
    return None


def dotted_expr(text: str) -> cst.Name | cst.Attribute:
    """Build a Name/Attribute chain from ``"a.b.c"``."""
    head, *rest = text.split(".")
    node: cst.Name | cst.Attribute = cst.Name(head)
    for part in rest:
        node = cst.Attribute(value=node, attr=cst.Name(part))
    return node


def import_from_module(node: cst.ImportFrom, package: str | None) -> str | None:
    """Absolute module an ``ImportFrom`` reads from (``None`` if unresolvable)."""
    name = dotted(node.module) if node.module is not None else ""
    if name is None:
        return None
    level = len(node.relative)
    if level == 0:
        return name
    return absolutize("." * level + name, package)


def module_reference(
    module: str, level: int, package: str | None
) -> tuple[list[cst.Dot], cst.Name | cst.Attribute | None]:
    """The ``relative``/``module`` fields for ``from <module> import ...``.

    Keeps the original statement's style: a relative import stays relative when
    the new module lives under the same anchor package, otherwise it is absolute.
    """
    if level and package:
        parts = package.split(".")
        anchor = ".".join(parts[: len(parts) - (level - 1)])
        if module == anchor:
            return [cst.Dot() for _ in range(level)], None
        if module.startswith(anchor + "."):
            return [cst.Dot() for _ in range(level)], dotted_expr(module[len(anchor) + 1:])
    return [], dotted_expr(module)
