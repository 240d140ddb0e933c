"""Rewriting ``from X import a, b as c`` when some of its names move elsewhere.

Both transforms need the same surgery: names that stay in the module are renamed
in place, names that move are split into new ``from <new module> import ...``
statements placed right after the original (so comments and ordering survive).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import libcst as cst

from .names import dotted, import_from_module, module_reference

__all__ = ["AliasTarget", "dedupe_aliases", "imported_locals", "iter_import_statements", "split_import_from",
           "statement_lines"]


@dataclass(frozen=True)
class AliasTarget:
    """Where one imported name should come from after the rewrite."""

    module: str
    name: str
    asname: str | None


def _alias(name: str, asname: str | None, like: cst.ImportAlias | None = None) -> cst.ImportAlias:
    new_asname = None
    if asname and asname != name:
        # keep the original `as` spacing when there was one
        new_asname = like.asname.with_changes(name=cst.Name(asname)) if like is not None and like.asname \
            else cst.AsName(name=cst.Name(asname))
    if like is None:
        return cst.ImportAlias(name=cst.Name(name), asname=new_asname)
    return like.with_changes(name=cst.Name(name), asname=new_asname)


def _fix_commas(
    aliases: list[cst.ImportAlias], trailing: cst.Comma | cst.MaybeSentinel | None
) -> list[cst.ImportAlias]:
    """Give the last alias ``trailing`` as its comma (``None``: no comma, which is
    required without parentheses)."""
    if aliases:
        aliases[-1] = aliases[-1].with_changes(comma=trailing if trailing is not None else cst.MaybeSentinel.DEFAULT)
    return aliases


def dedupe_aliases(node: cst.ImportFrom) -> cst.ImportFrom:
    """``node`` without a repeated name (a rewrite may import one that is already there)."""
    if isinstance(node.names, cst.ImportStar):
        return node
    seen: set[tuple[str, str | None]] = set()
    kept = []
    for alias in node.names:
        key = (cst.Module(body=[]).code_for_node(alias.name),
               alias.asname.name.value if alias.asname and isinstance(alias.asname.name, cst.Name) else None)
        if key not in seen:
            seen.add(key)
            kept.append(alias)
    if len(kept) == len(node.names):
        return node
    trailing = node.names[-1].comma if node.lpar is not None else None
    return node.with_changes(names=_fix_commas(kept, trailing))


def split_import_from(
    node: cst.ImportFrom,
    module: str,
    targets: list[AliasTarget | None],
    package: str | None,
) -> tuple[cst.ImportFrom | None, list[cst.ImportFrom]]:
    """Apply ``targets`` (one per alias, ``None`` = unchanged) to ``node``.

    ``module`` is the absolute module ``node`` imports from. Returns the statement
    to keep in place (``None`` if every name moved) and the new statements.
    """
    assert not isinstance(node.names, cst.ImportStar)
    names = list(node.names)
    level = len(node.relative)
    moved_modules = {t.module for t in targets if t is not None and t.module != module}
    if len(moved_modules) == 1 and all(t is not None for t in targets):
        # The whole statement moves to one module: keep it, formatting and all.
        (new_module,) = moved_modules
        if all(t is not None and t.module == new_module for t in targets):
            relative, mod = module_reference(new_module, level, package)
            renamed = [_alias(t.name, t.asname, a) for a, t in zip(names, targets) if t is not None]
            return node.with_changes(module=mod, relative=relative, names=renamed), []
    kept: list[cst.ImportAlias] = []
    moved: dict[str, list[cst.ImportAlias]] = {}
    for alias, target in zip(names, targets):
        if target is None:
            kept.append(alias)
        elif target.module == module:
            kept.append(_alias(target.name, target.asname, alias))
        else:
            moved.setdefault(target.module, []).append(_alias(target.name, target.asname))
    new_nodes = []
    for new_module, aliases in moved.items():
        relative, mod = module_reference(new_module, level, package)
        new_nodes.append(cst.ImportFrom(module=mod, relative=relative, names=_fix_commas(aliases, None)))
    if not kept:
        return None, new_nodes
    # In parentheses the last name keeps the original last name's comma, which holds
    # the line break before `)`.
    trailing = names[-1].comma if node.lpar is not None else None
    return node.with_changes(names=_fix_commas(kept, trailing)), new_nodes


def statement_lines(
    original: cst.SimpleStatementLine,
    kept_body: list[cst.BaseSmallStatement],
    extra: list[cst.BaseSmallStatement],
) -> cst.SimpleStatementLine | cst.FlattenSentinel[cst.SimpleStatementLine] | cst.RemovalSentinel:
    """The line(s) that replace ``original`` once its small statements changed.

    The first resulting line inherits ``original``'s leading comments and trailing
    comment; each extra statement gets its own line after it.
    """
    if kept_body:
        # A statement that kept its place must not end with `;` once extras move out.
        kept_body = [*kept_body[:-1], kept_body[-1].with_changes(semicolon=cst.MaybeSentinel.DEFAULT)]
    lines: list[cst.SimpleStatementLine] = []
    if kept_body:
        lines.append(original.with_changes(body=kept_body))
    for stmt in extra:
        if not lines:
            lines.append(original.with_changes(body=[stmt]))
        else:
            lines.append(cst.SimpleStatementLine(body=[stmt]))
    if not lines:
        return cst.RemovalSentinel.REMOVE
    if len(lines) == 1:
        return lines[0]
    return cst.FlattenSentinel(lines)


def iter_import_statements(node: cst.CSTNode) -> Iterator[cst.Import | cst.ImportFrom]:
    """Every import statement in a module, found by walking statement bodies only
    (expressions are never entered, so this is far cheaper than a full visit)."""
    if isinstance(node, (cst.Import, cst.ImportFrom)):
        yield node
        return
    if isinstance(node, cst.SimpleStatementLine):
        for small in node.body:
            if isinstance(small, (cst.Import, cst.ImportFrom)):
                yield small
        return
    for field in ("body", "handlers", "orelse", "finalbody", "cases"):
        child = getattr(node, field, None)
        if child is None:
            continue
        if isinstance(child, cst.CSTNode):
            yield from iter_import_statements(child)
        elif isinstance(child, (list, tuple)):
            for item in child:
                if isinstance(item, cst.CSTNode):
                    yield from iter_import_statements(item)


def imported_locals(module: cst.Module, package: str | None) -> dict[str, set[str]]:
    """Local name -> absolute qualified names it may be bound to by an import
    anywhere in the file. A conservative pre-check only: the transforms still ask
    libcst's scope analysis before changing anything."""
    bound: dict[str, set[str]] = {}
    for stmt in iter_import_statements(module):
        if isinstance(stmt, cst.Import):
            for alias in stmt.names:
                name = dotted(alias.name) or ""
                if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
                    bound.setdefault(alias.asname.name.value, set()).add(name)
                else:
                    head = name.partition(".")[0]
                    bound.setdefault(head, set()).add(head)
        elif not isinstance(stmt.names, cst.ImportStar):
            module_name = import_from_module(stmt, package)
            if module_name is None:
                continue
            for alias in stmt.names:
                name = dotted(alias.name) or ""
                local = alias.asname.name.value if alias.asname and isinstance(alias.asname.name, cst.Name) else name
                bound.setdefault(local, set()).add(f"{module_name}.{name}")
    return bound
