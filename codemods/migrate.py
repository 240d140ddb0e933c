"""The migrate codemod: direct ``torch._inductor``/``torch._dynamo`` use -> ``spyre_shims.compat``.

Two passes over one parse:

1. uses — class/function references, ``<sizevars>.size_hint(...)``-style calls,
   ``node.get_unbacked_symbol_uses()``, ``config.patch(...)`` and the register
   functions' arguments are rewritten to the compat spelling;
2. imports — with the uses settled (metadata recomputed on the rewritten tree,
   no re-parse), each internal import becomes a compat import, disappears when
   pass 1 consumed its last use, or keeps its place with a TODO saying why.

Compat blocks (``try/except ImportError``, version checks) are never edited; they
get a TODO naming the compat import that replaces them.
"""

from __future__ import annotations

import functools

import libcst as cst
from libcst.codemod import CodemodContext
from libcst.codemod.visitors import AddImportsVisitor
from libcst.metadata import Assignment, ImportAssignment

from .base import RewriteCommand
from .compat_targets import (
    COMPAT_ALIAS,
    COMPAT_MODULE,
    CONFIG_PATCH,
    FREE_SYMBOLS,
    KEYWORD_RENAMES,
    SIZEVARS_METHODS,
    SYMBOLS,
    VIRTUALIZED_V,
    SizevarsMethod,
    register_backend_positional,
)
from .imports import AliasTarget, split_import_from, statement_lines
from .names import dotted, import_from_module, is_internal
from .releases import Release, parse_release
from .stable_names import StableNames, StableTarget

__all__ = ["MigrateCommand"]

_TAG = "TODO(spyre-adapter migrate)"
_REGISTER_BACKEND = "torch._inductor.codegen.common.register_backend_for_device"
_NO_SPACE = cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace(""))


#: last names worth a qualified-name look-up
_SYMBOL_WORDS = frozenset(q.rpartition(".")[2] for q in SYMBOLS)
_CALLEE_WORDS = frozenset({*KEYWORD_RENAMES, CONFIG_PATCH[0].rpartition(".")[2]})


def _last_name(expr: cst.BaseExpression) -> str | None:
    if isinstance(expr, cst.Name):
        return expr.value
    if isinstance(expr, cst.Attribute):
        return expr.attr.value
    return None


@functools.lru_cache(maxsize=8)
def _stable_names(source: str | None, target: str | None) -> StableNames:
    return StableNames(source, target)


def _kwarg(name: str, value: cst.BaseExpression) -> cst.Arg:
    return cst.Arg(keyword=cst.Name(name), value=value, equal=_NO_SPACE)


class MigrateCommand(RewriteCommand):
    """Move vendor code from torch internals onto the stable ``spyre_shims.compat`` API.

    ``source`` is the torch release the code was written for; it is only needed to
    map ``register_backend_for_device``'s 5th+ positional arguments (their order
    changed in 2.9). Without it such calls keep the internal function and get a TODO.
    """

    DESCRIPTION = "Migrate direct torch._inductor/_dynamo usage onto spyre_shims.compat."
    TODO_TAG = _TAG

    def __init__(self, context: CodemodContext, source: str | None = None, target: str | None = None) -> None:
        super().__init__(context)
        self.source: Release | None = parse_release(source) if source else None
        #: internal name -> stable name, for code written for ``source``, resolving on ``target``
        self.stable = _stable_names(source, target)
        #: original Attribute nodes rewritten onto a stable name (their outer chain is settled)
        self._settled: set[int] = set()
        #: local names whose uses pass 1 rewrote away (their import may go)
        self.consumed: set[str] = set()
        #: internal modules reached through ``import torch`` whose uses were rewritten
        self.consumed_modules: set[str] = set()
        #: internal qualnames that must stay internal in this file (ambiguous calls)
        self.blocked: set[str] = set()
        self._foreign: set[str] | None = None
        self._register_scanned = False

    # ---- lazily computed facts about the file -----------------------------------
    @property
    def foreign_names(self) -> set[str]:
        """Names the file binds to something other than a compat-mapped import:
        a compat name equal to one of these must be qualified (``spyre_compat.x``)."""
        if self._foreign is None:
            self._foreign = self._names_bound_elsewhere()
        return self._foreign

    def _names_bound_elsewhere(self) -> set[str]:
        names: set[str] = set()
        self.scope_of(self.module)  # resolves the scope map
        assert self._scopes is not None
        scopes = {s for s in self._scopes.values() if s is not None}
        for scope in scopes:
            for assignment in scope.assignments:
                if isinstance(assignment, ImportAssignment):
                    quals = {q.name for q in assignment.get_qualified_names_for(assignment.name)}
                    if any(SYMBOLS.get(q) == assignment.name for q in quals) or any(
                        q == f"{COMPAT_MODULE}.{assignment.name}" or q.startswith(f"{COMPAT_MODULE}.")
                        or ((t := self.stable_target(q)) is not None and t.name == assignment.name) for q in quals
                    ):
                        continue
                names.add(assignment.name)
        return names

    def _block_ambiguous_register_calls(self) -> None:
        """Once per file, before the first register_backend_for_device call is
        rewritten: if any call's positional arguments cannot be mapped, none is."""
        if self._register_scanned:
            return
        self._register_scanned = True
        owner = self

        class _Calls(cst.CSTVisitor):
            def visit_Call(self, call: cst.Call) -> None:
                if owner.imported_qualname(call.func) != _REGISTER_BACKEND:
                    return
                if any(a.star for a in call.args):
                    owner.blocked.add(_REGISTER_BACKEND)
                    return
                extra = sum(1 for a in call.args if a.keyword is None) - 3
                if extra > 0 and register_backend_positional(owner.source, extra) is None:
                    owner.blocked.add(_REGISTER_BACKEND)

        self.module.visit(_Calls())

    def transform_module_impl(self, tree: cst.Module) -> cst.Module:
        tree = tree.visit(self)
        imports = _ImportPass(self.context, self)
        tree = imports.run_pass(tree)
        self.findings.extend(imports.findings)
        return tree

    # ---- compat names ---------------------------------------------------------
    def compat_expr(self, name: str) -> cst.BaseExpression:
        """``name`` (imported from the compat module), or ``spyre_compat.name`` on a clash."""
        if name in self.foreign_names:
            AddImportsVisitor.add_needed_import(self.context, COMPAT_MODULE.rpartition(".")[0],
                                                COMPAT_MODULE.rpartition(".")[2], asname=COMPAT_ALIAS)
            return cst.Attribute(value=cst.Name(COMPAT_ALIAS), attr=cst.Name(name))
        AddImportsVisitor.add_needed_import(self.context, COMPAT_MODULE, name)
        return cst.Name(name)

    def stable_target(self, qualname: str) -> StableTarget | None:
        """The stable name replacing an internal qualname (the flat names first)."""
        compat = SYMBOLS.get(qualname)
        if compat is not None:
            return StableTarget(COMPAT_MODULE, compat)
        return self.stable.target(qualname)

    def stable_expr(self, target: StableTarget) -> cst.BaseExpression:
        """``name`` imported from its stable module, or ``spyre_compat_<module>.name`` on a clash."""
        if target.module == COMPAT_MODULE:
            return self.compat_expr(target.name)
        if target.name in self.foreign_names:
            alias = f"{COMPAT_ALIAS}_{target.short_module}"
            AddImportsVisitor.add_needed_import(self.context, COMPAT_MODULE, target.short_module, asname=alias)
            return cst.Attribute(value=cst.Name(alias), attr=cst.Name(target.name))
        AddImportsVisitor.add_needed_import(self.context, target.module, target.name)
        return cst.Name(target.name)

    def _consume(self, node: cst.BaseExpression) -> None:
        root = self.root_name(node)
        if root is None:
            return
        self.consumed.add(root.value)
        qualname = self.imported_qualname(node)
        if qualname is not None:
            self.consumed_modules.add(qualname.rpartition(".")[0])
            self.consumed_modules.add(qualname)

    def _skip_if_guarded(self, node: cst.CSTNode, rule: str, what: str) -> bool:
        guard = self.guard(node)
        if guard is not None:
            self.skipped(node, rule, what, guard)
        return guard is not None

    # ---- references to classes and functions ----------------------------------
    def leave_Name(self, original_node: cst.Name, updated_node: cst.Name) -> cst.Name:
        if self.in_import or original_node.value not in _SYMBOL_WORDS:
            return updated_node
        qualname = self.imported_qualname(original_node)
        compat = SYMBOLS.get(qualname or "")
        if compat is None or qualname in self.blocked or original_node.value == compat:
            return updated_node
        found = self.import_binding(original_node)
        if found is None or not isinstance(found[0].node, cst.ImportFrom):
            return updated_node
        if found[1].asname is not None:
            return updated_node  # imported under an alias: the alias stays
        if compat in self.foreign_names or not self.references_unguarded(found[0].node, original_node.value):
            return updated_node
        self.record(original_node, "compat-symbol", "rewrite", f"{original_node.value} -> {compat}",
                    self.stable.category(qualname or ""))
        return updated_node.with_changes(value=compat)

    def leave_Attribute(self, original_node: cst.Attribute, updated_node: cst.Attribute) -> cst.BaseExpression:
        if self.in_import:
            return updated_node
        qualname = self.imported_qualname(original_node)
        if qualname is None:
            return updated_node
        compat = SYMBOLS.get(qualname)
        if compat is not None and qualname not in self.blocked:
            if self._skip_if_guarded(original_node, "compat-symbol", self.text(original_node)):
                return updated_node
            self._consume(original_node)
            self._settled.add(id(original_node))
            self.record(original_node, "compat-symbol", "rewrite", f"{self.text(original_node)} -> {compat}",
                        self.stable.category(qualname))
            return self.compat_expr(compat)
        if is_internal(qualname):
            return self._chain_link(original_node, updated_node, qualname)
        return updated_node

    def _chain_link(self, original: cst.Attribute, updated: cst.Attribute, qualname: str) -> cst.BaseExpression:
        """``a.b.c`` reaching an internal: settled at its first link past the modules
        (``torch._inductor.virtualized.V``, ``ir.ComputedBuffer``, ``torch._inductor.config``)."""
        value = original.value
        if id(value) in self._settled:
            self._settled.add(id(original))  # an inner link was rewritten: nothing left to do
            return updated
        value_q = self.imported_qualname(value)
        if value_q is None or not (value_q == "torch" or self.stable.is_module(value_q)):
            return updated
        if isinstance(value, cst.Name) and value_q != "torch" and self.stable_target(value_q) is not None:
            self._settled.add(id(original))  # a module alias served by the stable API: its import moves
            return updated
        parent = self.parent(original)
        if isinstance(parent, cst.Attribute) and self.imported_qualname(parent) == CONFIG_PATCH[0]:
            self._settled.add(id(original))  # config.patch(...) is rewritten with its call (leave_Call)
            return updated
        target = self.stable_target(qualname)
        if target is None and self.stable.is_module(qualname):
            return updated  # still walking down the modules
        self._settled.add(id(original))
        category = self.stable.category(qualname)
        if self.guard(original) is not None:
            return updated
        if target is None or qualname in self.blocked:
            self.todo(original, "no-equivalent", f"{qualname} [{category}]: {self.stable.advice(qualname)}",
                      category=category)
            return updated
        if qualname == CONFIG_PATCH[0]:
            return updated  # rewritten with its call (leave_Call)
        self._consume(original)
        self.record(original, "stable-name", "rewrite", f"{self.text(original)} -> {target.module}.{target.name}",
                    category)
        return self.stable_expr(target)

    def _is_outermost_internal(self, node: cst.Attribute) -> bool:
        parent = self.parent(node)
        if isinstance(parent, cst.Attribute) and parent.value is node:
            return False
        if isinstance(parent, cst.Call) and parent.func is node:
            return self.imported_qualname(node) != CONFIG_PATCH[0]  # rewritten by leave_Call
        return True

    # ---- call patterns --------------------------------------------------------
    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.BaseExpression:
        func = original_node.func
        if isinstance(func, cst.Attribute):
            method = func.attr.value
            spec = SIZEVARS_METHODS.get(method)
            if spec is not None and self.receiver_matches(func.value, "sizevars"):
                return self._sizevars_call(original_node, updated_node, spec)
            if self._is_unbacked_query(original_node):
                return self._free_symbols_call(original_node, updated_node)
        if _last_name(func) not in _CALLEE_WORDS:
            return updated_node
        qualname = self.imported_qualname(func)
        if qualname == CONFIG_PATCH[0]:
            return self._config_patch(original_node, updated_node)
        compat = SYMBOLS.get(qualname or "")
        if compat in KEYWORD_RENAMES:
            if qualname == _REGISTER_BACKEND:
                self._block_ambiguous_register_calls()
            if qualname not in self.blocked:
                return self._remap_arguments(original_node, updated_node, compat)
        return updated_node

    def _is_current_graph_sizevars(self, receiver: cst.BaseExpression) -> bool:
        return (
            isinstance(receiver, cst.Attribute)
            and isinstance(receiver.value, cst.Attribute)
            and receiver.value.attr.value == "graph"
            and self.imported_qualname(receiver.value.value) == VIRTUALIZED_V
        )

    def _sizevars_call(self, original: cst.Call, updated: cst.Call, spec: SizevarsMethod) -> cst.BaseExpression:
        assert isinstance(original.func, cst.Attribute) and isinstance(updated.func, cst.Attribute)
        method = original.func.attr.value
        rule = f"sizevars-{spec.compat}"
        if self._skip_if_guarded(original, rule, f".{method}(...)"):
            return updated
        if spec.returns_value_compat_lacks and not isinstance(self.parent(original), cst.Expr):
            self.todo(original, rule, f".{method}() returned the left operand; {spec.compat}() returns None: "
                                      f"call {spec.compat}(a, b) and use a", category="sizevars")
            return updated
        positional = [a for a in updated.args if a.keyword is None and not a.star]
        if any(a.star for a in updated.args) or len(positional) > spec.positional + len(spec.extra_positional):
            self.todo(original, rule, f"map .{method}(...) to {spec.compat}() by hand", category="sizevars")
            return updated
        args = list(positional[: spec.positional])
        args += [a.with_changes(keyword=cst.Name(name), equal=_NO_SPACE)
                 for a, name in zip(positional[spec.positional:], spec.extra_positional)]
        args += [a for a in updated.args if a.keyword is not None]
        receiver = original.func.value
        if self._is_current_graph_sizevars(receiver):
            self._consume(receiver)
        else:
            args.append(_kwarg("sizevars", updated.func.value))
        self.record(original, rule, "rewrite", f".{method}(...) -> {spec.compat}(...)", "sizevars")
        return updated.with_changes(func=self.compat_expr(spec.compat), args=_tidy(args))

    def _is_unbacked_query(self, call: cst.Call) -> bool:
        assert isinstance(call.func, cst.Attribute)
        method = call.func.attr.value
        if method == "get_unbacked_symbol_uses":
            return not call.args
        if method == "get_free_symbol_uses" and len(call.args) == 1:
            arg = call.args[0]
            return (arg.keyword is not None and arg.keyword.value == "unbacked_only"
                    and isinstance(arg.value, cst.Name) and arg.value.value == "True")
        return False

    def _free_symbols_call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        assert isinstance(updated.func, cst.Attribute)
        if self._skip_if_guarded(original, "free-unbacked-symbols", self.text(original.func)):
            return updated
        self.record(original, "free-unbacked-symbols", "rewrite", f"{self.text(original)} -> {FREE_SYMBOLS}(...)",
                    "sizevars")
        return cst.Call(func=self.compat_expr(FREE_SYMBOLS), args=[cst.Arg(value=updated.func.value)])

    def _config_patch(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        if self._skip_if_guarded(original, "inductor-config", "config.patch(...)"):
            return updated
        positional = [a for a in updated.args if a.keyword is None and not a.star]
        keywords = [a for a in updated.args if a.keyword is not None or a.star]
        if not positional:
            args = list(updated.args)
        elif len(positional) == 1 and not keywords:  # patch({"a.b": 1})
            args = [positional[0].with_changes(star="**", comma=cst.MaybeSentinel.DEFAULT)]
        elif len(positional) == 2 and not keywords:  # patch("a.b", 1)
            entry = cst.DictElement(key=positional[0].value, value=positional[1].value)
            args = [cst.Arg(value=cst.Dict(elements=[entry]), star="**")]
        else:
            self.todo(original, "inductor-config", f"map config.patch(...) to {CONFIG_PATCH[1]}(**overrides) by hand",
                      category="config")
            return updated
        self._consume(original.func)
        self.record(original, "inductor-config", "rewrite", f"config.patch(...) -> {CONFIG_PATCH[1]}(...)", "config")
        return updated.with_changes(func=self.compat_expr(CONFIG_PATCH[1]), args=_tidy(args))

    def _remap_arguments(self, original: cst.Call, updated: cst.Call, compat: str) -> cst.Call:
        if self._skip_if_guarded(original, "compat-arguments", f"{compat}(...)"):
            return updated
        renames = KEYWORD_RENAMES[compat]
        positional_names: tuple[str, ...] = ()
        if compat == "register_backend_for_device":
            extra = sum(1 for a in original.args if a.keyword is None) - 3
            positional_names = register_backend_positional(self.source, max(extra, 0)) or ()
        args, changed, index = [], False, 0
        for arg in updated.args:
            if arg.keyword is None:
                if index >= 3 and index - 3 < len(positional_names):
                    arg = arg.with_changes(keyword=cst.Name(positional_names[index - 3]), equal=_NO_SPACE)
                    changed = True
                index += 1
            elif arg.keyword.value in renames:
                arg = arg.with_changes(keyword=cst.Name(renames[arg.keyword.value]))
                changed = True
            args.append(arg)
        if changed:
            self.record(original, "compat-arguments", "rewrite", f"{compat}: arguments mapped to the compat signature")
        return updated.with_changes(args=args) if changed else updated


def _tidy(args: list[cst.Arg]) -> list[cst.Arg]:
    """Let libcst place the commas: only the last argument loses any trailing comma."""
    if args:
        args[-1] = args[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
    return args


class _ImportPass(RewriteCommand):
    """Pass 2: settle each internal import against the rewritten uses."""

    TODO_TAG = _TAG

    def __init__(self, context: CodemodContext, owner: MigrateCommand) -> None:
        super().__init__(context)
        self.owner = owner
        self._blocks: dict[int, tuple[str, list[tuple[str, str]]]] = {}

    def on_visit(self, node: cst.CSTNode) -> bool:
        # Imports live in statements: never descend into expressions or import-free lines.
        descend = super().on_visit(node)
        if isinstance(node, cst.BaseExpression):
            return False
        if isinstance(node, cst.SimpleStatementLine):
            return descend and any(isinstance(s, (cst.Import, cst.ImportFrom)) for s in node.body)
        return descend

    def _references(self, import_node: cst.CSTNode, local: str) -> int:
        scope = self.scope_of(import_node)
        if scope is None:
            return 1  # unknown: assume used
        return sum(len(a.references) for a in scope.assignments[local]
                   if isinstance(a, Assignment) and a.node is import_node)

    def leave_SimpleStatementLine(
        self, original_node: cst.SimpleStatementLine, updated_node: cst.SimpleStatementLine
    ) -> cst.SimpleStatementLine | cst.FlattenSentinel[cst.SimpleStatementLine] | cst.RemovalSentinel:
        kept: list[cst.BaseSmallStatement] = []
        extra: list[cst.BaseSmallStatement] = []
        changed = False
        # Metadata belongs to the original nodes; pass 2 edits nothing below statements,
        # so original and updated small statements are the same code.
        for stmt in original_node.body:
            if isinstance(stmt, cst.ImportFrom):
                module = import_from_module(stmt, self.package)
                if module is not None and is_internal(module):
                    stay, new = self._import_from(stmt, module)
                    changed = changed or stay is not stmt or bool(new)
                    kept.extend([stay] if stay is not None else [])
                    extra.extend(new)
                    continue
            elif isinstance(stmt, cst.Import) and any(is_internal(dotted(a.name) or "") for a in stmt.names):
                kept_import, new_imports = self._import(stmt)
                changed = changed or kept_import is not stmt or bool(new_imports)
                kept.extend([kept_import] if kept_import is not None else [])
                extra.extend(new_imports)
                continue
            kept.append(stmt)
        return statement_lines(updated_node, kept, extra) if changed else updated_node

    def _guarded(self, node: cst.CSTNode, names: list[tuple[str, str]]) -> bool:
        """Note an import inside a compat block; the block gets one TODO (see on_leave)."""
        found = self.guards.block(node)
        if found is None:
            return False
        block, kind = found
        self._blocks.setdefault(id(block), (kind, []))[1].extend(names)
        return True

    def on_leave(  # type: ignore[override]
        self, original_node: cst.CSTNode, updated_node: cst.CSTNode
    ) -> cst.CSTNode | cst.RemovalSentinel | cst.FlattenSentinel[cst.CSTNode]:
        noted = self._blocks.pop(id(original_node), None)
        if noted is not None:
            kind, names = noted
            mapped = sorted({(SYMBOLS[q], local) for q, local in names if q in SYMBOLS})
            if len(mapped) == len({local for _, local in names}) and all(q in SYMBOLS for q, _ in names):
                imports = ", ".join(c if c == local else f"{c} as {local}" for c, local in mapped)
                message = f"this {kind} can become `from {COMPAT_MODULE} import {imports}`"
            else:
                listed = ", ".join(dict.fromkeys(q for q, _ in names))
                message = f"this {kind} imports torch internals ({listed}); the stable API may cover them"
            self.todo(original_node, "compat-block", message,
                      category=self.owner.stable.category(names[0][0]) if names else "")
        return super().on_leave(original_node, updated_node)

    def _import_from(self, node: cst.ImportFrom, module: str) -> tuple[cst.ImportFrom | None, list[cst.ImportFrom]]:
        if isinstance(node.names, cst.ImportStar):
            if not self._guarded(node, [(f"{module}.*", "*")]):
                self.todo(node, "no-equivalent", f"star import from {module}: import the names you use",
                          category=self.owner.stable.category(module))
            return node, []
        entries = []
        for alias in node.names:
            name = dotted(alias.name) or ""
            local = alias.asname.name.value if alias.asname and isinstance(alias.asname.name, cst.Name) else name
            entries.append((alias, f"{module}.{name}", local))
        if self._guarded(node, [(q, local) for _, q, local in entries]):
            return node, []
        kept_aliases: list[cst.ImportAlias] = []
        targets: list[AliasTarget | None] = []
        unmapped: list[str] = []
        blocked: list[str] = []
        stable = self.owner.stable
        for alias, qualname, local in entries:
            refs = self._references(node, local)
            target = self.owner.stable_target(qualname)
            if refs == 0 and local in self.owner.consumed and qualname not in self.owner.blocked:
                self.record(node, "unused-import", "rewrite", f"removed import of {qualname} (no uses left)")
            elif target is not None and qualname not in self.owner.blocked:
                keep_local = refs > 0 or target.name in self.owner.foreign_names
                asname = None if (local == target.name or not keep_local) else local
                targets.append(AliasTarget(target.module, target.name, asname))
                kept_aliases.append(alias)
                self.record(node, "compat-symbol" if target.module == COMPAT_MODULE else "stable-name", "rewrite",
                            f"import {qualname} -> {target.module}.{target.name}", stable.category(qualname))
            else:
                kept_aliases.append(alias)
                targets.append(None)
                if stable.is_module(qualname):
                    # its uses (``alias.Name``) were settled one by one in pass 1
                    self.todo(node, "no-equivalent", f"{qualname} stays imported for the uses marked below", kind=None)
                else:
                    (blocked if qualname in self.owner.blocked else unmapped).append(qualname)
        for qualname in unmapped:
            category = stable.category(qualname)
            self.todo(node, "no-equivalent", f"{qualname} [{category}]: {stable.advice(qualname)}", category=category)
        if blocked:
            self.todo(node, "compat-arguments",
                      f"{', '.join(q.rpartition('.')[2] for q in blocked)} kept internal: its positional arguments "
                      f"after the 4th changed meaning in 2.9; re-run with --from RELEASE to migrate it",
                      category="codegen")
        if len(kept_aliases) == len(entries) and not any(targets):
            return node, []
        if not kept_aliases:
            return None, []
        kept_aliases[-1] = kept_aliases[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
        trimmed = node.with_changes(names=kept_aliases)
        return split_import_from(trimmed, module, targets, self.package)

    def _import(self, node: cst.Import) -> tuple[cst.Import | None, list[cst.BaseSmallStatement]]:
        names: list[tuple[str, str]] = []
        for alias in node.names:
            name = dotted(alias.name) or ""
            if is_internal(name):
                names.append((name, alias.asname.name.value if alias.asname and isinstance(alias.asname.name, cst.Name) else name))
        if self._guarded(node, names):
            return node, []
        kept, todo, extra = [], [], []
        stable = self.owner.stable
        for alias in node.names:
            name = dotted(alias.name) or ""
            if not is_internal(name):
                kept.append(alias)
                continue
            local = alias.asname.name.value if alias.asname and isinstance(alias.asname.name, cst.Name) else None
            target = self.owner.stable_target(name) if local is not None else None
            if target is not None and local is not None:
                # ``import torch._inductor.config as cfg`` -> ``from spyre_shims.compat.config import inductor as cfg``
                asname = None if local == target.name else cst.AsName(name=cst.Name(local))
                extra.append(cst.ImportFrom(module=cst.parse_expression(target.module),  # type: ignore[arg-type]
                                            names=[cst.ImportAlias(name=cst.Name(target.name), asname=asname)]))
                self.record(node, "stable-name", "rewrite", f"import {name} -> {target.module}.{target.name}",
                            stable.category(name))
                continue
            if local is not None:
                removable = self._references(node, local) == 0 and local in self.owner.consumed
            else:
                removable = name in self.owner.consumed_modules and not self._chain_uses(node, name)
            if removable:
                self.record(node, "unused-import", "rewrite", f"removed import of {name} (no uses left)")
            else:
                kept.append(alias)
                todo.append(name)
        if todo:
            self.todo(node, "no-equivalent", f"{', '.join(todo)} stays imported for the uses marked below", kind=None)
        if len(kept) == len(node.names):
            return node, extra
        if not kept:
            return None, extra
        kept[-1] = kept[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
        return node.with_changes(names=kept), extra

    def _chain_uses(self, node: cst.Import, module: str) -> bool:
        """Does any ``a.b.c...`` chain still reach ``module`` through this import's root?"""
        root = module.partition(".")[0]
        scope = self.scope_of(node)
        if scope is None:
            return True
        for assignment in scope.assignments[root]:
            for access in assignment.references:
                expr: cst.CSTNode = access.node
                parent = self.parent(expr)
                while isinstance(parent, cst.Attribute) and parent.value is expr:
                    expr = parent
                    parent = self.parent(expr)
                text = dotted(expr) if isinstance(expr, (cst.Name, cst.Attribute)) else None
                if text is not None and (text == module or text.startswith(module + ".") or module.startswith(text + ".")):
                    if text != root:
                        return True
        return False
