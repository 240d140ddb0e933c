"""What the upgrade and migrate transforms share: metadata access, compat-block
checks, findings, and TODO comments attached to the enclosing statement.

Cost matters (the benchmark runs every rule over ~250k lines of Inductor), so no
metadata is resolved up front: libcst's ScopeProvider is resolved the first time a
candidate node needs its qualified name (many files never get there); parents come
from the ancestor stack of the traversal (ParentNodeProvider is resolved lazily, for
the rare look-up of a node off the current path); line numbers (a light
code-generation pass, :mod:`spyre_codemods.lines`) are computed only when a file has findings. The traversal also bypasses libcst's
matcher-decorator dispatch, which these transforms do not use and which triples the
cost of visiting a large file.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import replace
from typing import ClassVar

import libcst as cst
from libcst.codemod import Codemod, CodemodContext, VisitorBasedCodemodCommand
from libcst.codemod.visitors import AddImportsVisitor, RemoveImportsVisitor
from libcst.metadata import (Assignment, ImportAssignment, MetadataWrapper, ParentNodeProvider, QualifiedNameSource,
                             Scope, ScopeProvider)

from .bindings import UNKNOWN, ModuleBindings
from .blocktext import SourceMap, source_map
from .guards import GuardFinder, version_flags
from .lines import node_lines
from .names import absolutize, dotted, import_from_module
from .notes import read_notes, relaid, same_words, wrap_note
from .params_edit import MAX_LINE, fit_call_args, line_limit
from .prune import WordTest
from .report import Finding, FindingKind

__all__ = ["RewriteCommand", "SOURCE_KEY"]

#: ``context.scratch`` key under which the driver leaves the file's original bytes
SOURCE_KEY = "spyre_codemods.source"

_STATEMENT_TYPES = (cst.SimpleStatementLine, cst.BaseCompoundStatement)
_STATEMENT_HOLDERS = (cst.Module, cst.IndentedBlock, cst.BaseCompoundStatement, cst.Else, cst.ExceptHandler,
                      cst.ExceptStarHandler, cst.Finally, cst.MatchCase)
_IMPORTS = (cst.Import, cst.ImportFrom)


def _prunable(node: cst.CSTNode) -> bool:
    """Blocks, and statement lines without imports (imports are always looked at)."""
    if isinstance(node, cst.SimpleStatementLine):
        return not any(isinstance(small, _IMPORTS) for small in node.body)
    return isinstance(node, cst.BaseCompoundStatement)


class RewriteCommand(VisitorBasedCodemodCommand):
    """Base for the spyre codemods (not a codemod on its own).

    Subclasses set ``TODO_TAG``; findings accumulate in :attr:`findings` so the
    file driver can report them, and TODO comments are attached to the statement
    that contains the node needing a human, once (re-runs do not stack them).
    """

    METADATA_DEPENDENCIES = ()
    TODO_TAG: ClassVar[str] = "TODO(spyre-adapter)"
    #: Leave a TODO at matches skipped inside compat blocks (not only a report entry).
    TODO_IN_GUARDS: ClassVar[bool] = False

    def __init__(self, context: CodemodContext) -> None:
        # libcst's matcher-decorator set-up introspects every method of the class on each
        # instance (~17 ms, one instance per file); these transforms use no matcher
        # decorators and bypass that dispatch (see on_visit), so it is skipped.
        Codemod.__init__(self, context)
        cst.CSTTransformer.__init__(self)
        self._extra_visit_funcs: dict[object, object] = {}
        self._extra_leave_funcs: dict[object, object] = {}
        self.findings: list[Finding] = []
        self._raw_findings: list[tuple[cst.CSTNode, str, FindingKind, str, str]] = []
        self._pending_todos: dict[int, list[str]] = {}
        self._header_notes: list[str] = []
        #: grouped notes: holder id -> message -> site statements (see group_todo)
        self._groups: dict[int, dict[str, list[cst.CSTNode]]] = {}
        self._site_results: dict[int, cst.CSTNode | None] = {}
        #: TODO comments in the output (written now or found from an earlier run)
        self.notes = 0
        #: leading lines of removed statements, for the statement after each (by id)
        self._carried: dict[int, list[cst.EmptyLine]] = {}
        self._reset_pass_state(None)

    def _reset_pass_state(self, wrapper: MetadataWrapper | None) -> None:
        self._wrapper = wrapper
        self._stack: list[cst.CSTNode] = []
        self._visited_parent: dict[int, cst.CSTNode | None] = {}
        self._import_depth = 0
        self._parents: Mapping[cst.CSTNode, cst.CSTNode] | None = None
        self._scopes: Mapping[cst.CSTNode, Scope | None] | None = None
        self._flags: frozenset[str] | None = None
        self._guards = GuardFinder(self.ancestors, self.is_torch, self._version_flags, self.package)
        self._rename_ok: dict[tuple[int, str], bool] = {}
        self._qualnames: dict[int, str | None] = {}
        self._bindings: ModuleBindings | None = None
        self._prune: WordTest | None = None
        self._source_map: SourceMap | None | bool = False  # False: not built yet
        self._line_limit: int | None = None

    # ---- running ------------------------------------------------------------
    def transform_module(self, tree: cst.Module) -> cst.Module:
        """Like libcst's, minus the defensive deep copy of the tree (we never keep
        metadata past the pass), plus the scheduled import additions/removals."""
        tree = self.run_pass(tree, self.transform_module_impl)
        for key, visitor in ((AddImportsVisitor.CONTEXT_KEY, AddImportsVisitor),
                             (RemoveImportsVisitor.CONTEXT_KEY, RemoveImportsVisitor)):
            if self.context.scratch.get(key):
                tree = visitor(self.context).transform_module(tree)
        return tree

    def run_pass(self, tree: cst.Module, body: Callable[[cst.Module], cst.Module] | None = None) -> cst.Module:
        """Resolve metadata on ``tree``, run ``body`` (default: visit with ``self``)
        and turn the pass's findings into line-numbered :class:`Finding` s."""
        wrapper = MetadataWrapper(tree, unsafe_skip_copy=True)
        self._reset_pass_state(wrapper)
        # Comments above the first statement live in the module header: a TODO left
        # there by an earlier run must count as present.
        self._header_notes = [n.text for n in read_notes(tree.header, self._note_prefix)]
        with self.resolve(wrapper):
            self.context = replace(self.context, wrapper=wrapper)
            result = body(wrapper.module) if body is not None else wrapper.module.visit(self)
        if self._raw_findings:
            lines = self._finding_lines([node for node, *_ in self._raw_findings])
            for node, rule, kind, message, category in self._raw_findings:
                self.findings.append(Finding(lines.get(id(node), 0), rule, kind, message, category))
            self._raw_findings = []
        return result

    def _finding_lines(self, nodes: list[cst.CSTNode]) -> dict[int, int]:
        """Line of each node: code is generated only for the top-level statements (or
        methods) that hold findings, starting from their line in the ``ast`` map."""
        assert self._wrapper is not None
        module = self._wrapper.module
        smap = self.source_map
        by_block: dict[int, tuple[cst.CSTNode, list[cst.CSTNode]]] = {}
        rest: list[cst.CSTNode] = []
        for node in nodes:
            block = next((a for a in (node, *self.ancestors(node)) if smap is not None and id(a) in smap.spans), None)
            if block is None:
                rest.append(node)
            else:
                by_block.setdefault(id(block), (block, []))[1].append(node)
        lines: dict[int, int] = {}
        for key, (block, members) in by_block.items():
            assert smap is not None
            leading = len(getattr(block, "leading_lines", ()))
            lines.update(node_lines(module, members, within=block, first_line=smap.spans[key][0] - leading))
        if rest:
            lines.update(node_lines(module, rest))
        return lines

    def transform_module_impl(self, tree: cst.Module) -> cst.Module:
        return tree.visit(self)

    # ---- traversal bookkeeping ----------------------------------------------
    # Plain CSTTransformer dispatch (see the module docstring for why).
    def on_visit(self, node: cst.CSTNode) -> bool:
        # parents of every visited node, for look-ups after it was left (cheaper than
        # libcst's ParentNodeProvider, which re-walks the whole module)
        self._visited_parent[id(node)] = self._stack[-1] if self._stack else None
        self._stack.append(node)
        if isinstance(node, _IMPORTS):
            self._import_depth += 1
        descend = cst.CSTTransformer.on_visit(self, node)
        if descend and self._prune is not None and _prunable(node) \
                and self._prunable_level() and self.may_prune(node):
            # A top-level block or statement (or a method) whose text names nothing the
            # rules look for cannot need a change: skip its subtree. Slicing its text
            # from the file is much cheaper than visiting it.
            smap = self.source_map
            span = smap.spans.get(id(node)) if smap is not None else None
            text = smap.text(span) if smap is not None and span is not None else None
            extra = self.extra_prune_words(node)
            if span is not None and any(span[0] <= line <= span[1] for line in self.must_visit_lines()):
                descend = True
            else:
                if text is None:
                    text = self.module.code_for_node(node).encode()
                # a block holding a note of an earlier run is visited, so the note is recognised
                descend = self._prune.hits(text, extra) or self.TODO_TAG.encode() in text
        return descend

    def extra_prune_words(self, node: cst.CSTNode) -> frozenset[str]:
        """Method names whose ``.name`` keeps ``node`` (a top-level block or method) from
        being skipped, besides the prune words (e.g. what only a class's methods call)."""
        return frozenset()

    def _prunable_level(self) -> bool:
        stack = self._stack
        if len(stack) >= 2 and isinstance(stack[-2], cst.Module):
            return True
        return (len(stack) >= 4 and isinstance(stack[-2], cst.IndentedBlock)
                and isinstance(stack[-3], cst.ClassDef) and isinstance(stack[-4], cst.Module))

    def may_prune(self, node: cst.CSTNode) -> bool:
        """May this top-level block or method be skipped when its text names none of
        the prune words? (A transform may keep some blocks whatever they say.)"""
        return True

    def set_prune_words(self, words: Iterable[str], attributes: Mapping[str, Iterable[str]] = {}) -> None:
        """Let the traversal skip top-level blocks and methods whose text contains
        none of ``words`` and no ``receiver.method`` of ``attributes`` (a transform
        calls this from ``visit_Module``)."""
        test = WordTest(words, attributes)
        self._prune = test if test else None

    @property
    def source_map(self) -> SourceMap | None:
        """The file's ``ast`` and block spans (from the original bytes the driver passes
        in ``context.scratch``, else from the module's code), built on first use."""
        if self._source_map is False:
            source = self.context.scratch.get(SOURCE_KEY)
            if self._wrapper is None:
                return None
            if not isinstance(source, bytes):
                source = self._wrapper.module.bytes
            self._source_map = source_map(self._wrapper.module, source)
        return self._source_map  # type: ignore[return-value]

    @property
    def line_limit(self) -> int:
        """The file's line length (see :func:`~spyre_codemods.params_edit.line_limit`)."""
        if self._line_limit is None:
            smap = self.source_map
            source = b"".join(smap.lines) if smap is not None else self.module.bytes
            self._line_limit = line_limit(source.decode("utf-8", "replace"))
        return self._line_limit

    def fit_call(self, original: cst.Call, updated: cst.Call, first: int) -> cst.Call:
        """``updated`` (a one-line call whose arguments from ``first`` on were rewritten)
        broken before argument ``first`` when its line would pass the file's limit."""
        text = self.text(original)
        statement = next((a for a in self.ancestors(original) if isinstance(a, _STATEMENT_TYPES)), None)
        if "\n" in text or statement is None or first <= 0:
            return updated
        line = self.text(statement.with_changes(leading_lines=[])).split("\n", 1)[0]  # type: ignore[attr-defined]
        at = line.find(text)
        if at < 0:
            return updated
        return fit_call_args(updated, first, self.line_limit, self.def_column(statement), at,
                             len(line) - at - len(text))

    def def_column(self, node: cst.CSTNode) -> int:
        """Column of a statement of the original tree (its block depth times the indent)."""
        depth = sum(1 for a in self.ancestors(node) if isinstance(a, cst.IndentedBlock))
        return depth * len(self.module.default_indent)

    def must_visit_lines(self) -> frozenset[int]:
        """Lines of the original file that must be visited whatever their block says."""
        return frozenset()

    def on_visit_attribute(self, node: cst.CSTNode, attribute: str) -> None:
        cst.CSTTransformer.on_visit_attribute(self, node, attribute)

    def on_leave_attribute(self, original_node: cst.CSTNode, attribute: str) -> None:
        cst.CSTTransformer.on_leave_attribute(self, original_node, attribute)

    def on_leave(  # type: ignore[override]
        self, original_node: cst.CSTNode, updated_node: cst.CSTNode
    ) -> cst.CSTNode | cst.RemovalSentinel | cst.FlattenSentinel[cst.CSTNode]:
        if isinstance(original_node, _IMPORTS):
            self._import_depth -= 1
        try:
            result = cst.CSTTransformer.on_leave(self, original_node, updated_node)
        finally:
            self._stack.pop()
        carried = self._carried.pop(id(original_node), None)
        if carried and isinstance(result, _STATEMENT_TYPES):
            result = result.with_changes(leading_lines=[*carried, *result.leading_lines])
        comments = self._pending_todos.pop(id(original_node), [])
        groups = self._groups.pop(id(original_node), None)
        if groups and isinstance(result, cst.CSTNode):
            result, own = self._place_notes(original_node, result, groups)
            comments = [*comments, *own]
        if comments:
            result = self._attach_comments(result, comments, self._note_width(original_node))
        if id(original_node) in self._site_results:
            self._site_results[id(original_node)] = result if isinstance(result, cst.CSTNode) else None
        return result

    @property
    def in_import(self) -> bool:
        """True while visiting the inside of an import statement."""
        return self._import_depth > 0

    # ---- metadata helpers ---------------------------------------------------
    @property
    def package(self) -> str | None:
        """Package of the file being rewritten (resolves relative imports)."""
        return self.context.full_package_name

    def ancestors(self, node: cst.CSTNode) -> Iterator[cst.CSTNode]:
        """Parents of an original-tree node, innermost first."""
        stack = self._stack
        for i in range(len(stack) - 1, -1, -1):
            if stack[i] is node:
                yield from reversed(stack[:i])
                return
        if id(node) in self._visited_parent:
            current_visited = self._visited_parent[id(node)]
            while current_visited is not None:
                yield current_visited
                current_visited = self._visited_parent.get(id(current_visited))
            return
        if self._parents is None:
            assert self._wrapper is not None
            self._parents = self._wrapper.resolve(ParentNodeProvider)
        current = self._parents.get(node)
        while current is not None:
            yield current
            current = self._parents.get(current)

    def parent(self, node: cst.CSTNode) -> cst.CSTNode | None:
        """Parent of an original-tree node (``None`` at the module)."""
        return next(self.ancestors(node), None)

    def scope_of(self, node: cst.CSTNode) -> Scope | None:
        """libcst scope of an original-tree node (ScopeProvider, resolved on first use)."""
        if self._scopes is None:
            assert self._wrapper is not None
            self._scopes = self._wrapper.resolve(ScopeProvider)
        return self._scopes.get(node)

    def imported_qualname(self, node: cst.CSTNode | None) -> str | None:
        """The absolute qualified name of a Name/Attribute that comes from an import,
        when it is unambiguous (one binding)."""
        if not isinstance(node, (cst.Name, cst.Attribute)):
            return None
        key = id(node)
        if key not in self._qualnames:
            self._qualnames[key] = self._compute_qualname(node)
        return self._qualnames[key]

    def _compute_qualname(self, node: cst.Name | cst.Attribute) -> str | None:
        root = self.root_name(node)
        text = dotted(node)
        if root is not None and text is not None and self._wrapper is not None:
            if self._bindings is None:
                self._bindings = ModuleBindings(self._wrapper.module, self.package)
            origin = self._bindings.origin(root.value, self.ancestors(node))
            if origin is not UNKNOWN:  # the common case, without a scope analysis
                return None if origin is None else str(origin) + text[len(root.value):]
        scope = self.scope_of(node)
        if scope is None:
            return None
        names = scope.get_qualified_names_for(node)
        if len(names) != 1:
            return None
        (qn,) = names
        if qn.source is not QualifiedNameSource.IMPORT:
            return None
        return absolutize(qn.name, self.package)

    def is_torch(self, expr: cst.BaseExpression) -> bool:
        """Does ``expr`` start at ``torch`` or at a name imported from torch?"""
        root = expr
        while isinstance(root, (cst.Attribute, cst.Subscript, cst.Call)):
            root = root.value if isinstance(root, (cst.Attribute, cst.Subscript)) else root.func
        if not isinstance(root, cst.Name):
            return False
        if self._wrapper is None:
            return root.value == "torch"
        qualname = self.imported_qualname(root)
        # the stable API's tier 2 re-exports torch's own objects: probing them is a torch test too
        return qualname is not None and (qualname == "torch" or qualname.startswith(("torch.", "spyre_shims.compat.")))

    def _version_flags(self) -> frozenset[str]:
        if self._flags is None:
            self._flags = version_flags(self.module, self.is_torch) if self._wrapper is not None else frozenset()
        return self._flags

    @property
    def guards(self) -> GuardFinder:
        """Compat-block finder for the tree being visited."""
        return self._guards

    def guard(self, node: cst.CSTNode) -> str | None:
        """Describe the compat block around an original-tree node, if any."""
        return self._guards.guard(node)

    def import_bindings(self, name: cst.Name) -> list[Assignment] | None:
        """Import statements that bind ``name`` where it is used (``None`` if any
        binding is not an import, e.g. a local assignment shadows it)."""
        scope = self.scope_of(name)
        if scope is None:
            return None
        found: list[Assignment] = []
        for assignment in scope[name.value]:
            if not isinstance(assignment, ImportAssignment):
                return None
            found.append(assignment)
        return found or None

    def references_unguarded(self, import_node: cst.CSTNode, local: str) -> bool:
        """May the local name bound by ``import_node`` be changed at every use?
        (False when the import or any use sits in a compat block.)"""
        key = (id(import_node), local)
        if key not in self._rename_ok:
            ok = self.guard(import_node) is None
            scope = self.scope_of(import_node)
            if ok and scope is not None:
                for assignment in scope.assignments[local]:
                    if isinstance(assignment, Assignment) and assignment.node is import_node:
                        ok = all(self.guard(access.node) is None for access in assignment.references)
            self._rename_ok[key] = ok
        return self._rename_ok[key]

    def import_binding(self, name: cst.Name) -> tuple[ImportAssignment, cst.ImportAlias] | None:
        """The single import (and its alias) that binds ``name`` where it is used."""
        bindings = self.import_bindings(name)
        if not bindings or len(bindings) != 1 or not isinstance(bindings[0], ImportAssignment):
            return None
        binding = bindings[0]
        node = binding.node
        if not isinstance(node, (cst.Import, cst.ImportFrom)) or isinstance(node.names, cst.ImportStar):
            return None
        for alias in node.names:
            local = alias.evaluated_alias or alias.evaluated_name.partition(".")[0] if isinstance(
                node, cst.Import) else alias.evaluated_alias or alias.evaluated_name
            if local == name.value:
                return binding, alias
        return None

    def remove_if_unused(self, name: cst.Name) -> None:
        """Schedule the import binding ``name`` for removal, done only if no use is
        left once the transform has run (libcst's RemoveImportsVisitor checks)."""
        found = self.import_binding(name)
        if found is None:
            return
        binding, alias = found
        if isinstance(binding.node, cst.ImportFrom):
            module = import_from_module(binding.node, self.package)
            if module is not None:
                RemoveImportsVisitor.remove_unused_import(
                    self.context, module, obj=alias.evaluated_name, asname=alias.evaluated_alias)
        else:
            RemoveImportsVisitor.remove_unused_import(self.context, alias.evaluated_name, asname=alias.evaluated_alias)

    @staticmethod
    def root_name(node: cst.BaseExpression) -> cst.Name | None:
        """``a`` for ``a.b.c`` (``None`` when the chain does not start at a Name)."""
        while isinstance(node, cst.Attribute):
            node = node.value
        return node if isinstance(node, cst.Name) else None

    @staticmethod
    def receiver_matches(receiver: cst.BaseExpression, last_name: str | None) -> bool:
        """True when ``receiver`` ends in ``last_name`` (``None`` matches anything)."""
        if last_name is None:
            return True
        if isinstance(receiver, cst.Name):
            return receiver.value == last_name
        if isinstance(receiver, cst.Attribute):
            return receiver.attr.value == last_name
        return False

    @staticmethod
    def text(node: cst.CSTNode) -> str:
        """Source text of a node (for messages)."""
        return cst.Module(body=[]).code_for_node(node)

    # ---- findings and TODOs -------------------------------------------------
    def record(self, node: cst.CSTNode, rule: str, kind: FindingKind, message: str, category: str = "") -> None:
        """Add a finding for an original-tree node (its line is filled in after the pass);
        ``category`` is the extension point it concerns (``migrate``)."""
        self._raw_findings.append((node, rule, kind, message, category))

    def todo(self, node: cst.CSTNode, rule: str, message: str, kind: FindingKind | None = "todo",
             category: str = "") -> None:
        """Leave ``# TODO(...): message`` above the statement containing ``node``
        (and record a ``kind`` finding, unless ``None``).

        ``node`` must not have been left yet (its statement is still open), so the
        comment can be attached when the statement is left.
        """
        statement = node if isinstance(node, _STATEMENT_TYPES) else next(
            (a for a in self.ancestors(node) if isinstance(a, _STATEMENT_TYPES)), None
        )
        if statement is None:
            return
        texts = self._pending_todos.setdefault(id(statement), [])
        comment = f"# {self.TODO_TAG}: {message}"
        if comment not in texts:
            texts.append(comment)
            if kind is not None:
                self.record(node, rule, kind, message, category)

    def group_todo(self, node: cst.CSTNode, rule: str, message: str, kind: FindingKind = "advisory") -> None:
        """Like :meth:`todo`, but one note per place: the uses of ``message`` in one
        function or class (the innermost around the use), else at the module level, share
        one TODO above the first of them that lists the lines of the others. Each use
        site is still a finding."""
        statement = node if isinstance(node, _STATEMENT_TYPES) else next(
            (a for a in self.ancestors(node) if isinstance(a, _STATEMENT_TYPES)), None)
        if statement is None:
            return
        holder = self._note_holder(statement)
        sites = self._groups.setdefault(id(holder), {}).setdefault(message, [])
        if all(s is not statement for s in sites):
            sites.append(statement)
            self._site_results.setdefault(id(statement), None)
            self.record(node, rule, kind, message)

    def _note_holder(self, statement: cst.CSTNode) -> cst.CSTNode:
        # the innermost function or class around the statement (a decorated def's
        # decorators belong to the function that holds the def)
        path = [statement, *self.ancestors(statement)]  # innermost first, the module last
        holder = next((a for a in path[1:] if isinstance(a, (cst.FunctionDef, cst.ClassDef))), None)
        return holder if holder is not None else path[-1]

    def _place_notes(self, holder: cst.CSTNode, result: cst.CSTNode, groups: dict[str, list[cst.CSTNode]]
                     ) -> tuple[cst.CSTNode, list[str]]:
        """Put each grouped note above its first use in ``result`` (the holder, left),
        naming the lines of the other uses relative to it; a note whose use is the holder
        itself (a class) goes above the holder (returned). Lines are counted in the
        output, so a re-run words the note the same."""
        entries = []
        widths: dict[int, int] = {}  # result statement -> the width of a note above it
        for message, sites in groups.items():
            found = []
            for site in sites:
                placed = self._site_results.get(id(site)) if site is not holder else None
                if placed is not None:
                    found.append(placed)
                    widths[id(placed)] = self._note_width(site)
            entries.append((message, any(s is holder for s in sites), found))
        anchor = result.name if isinstance(result, (cst.FunctionDef, cst.ClassDef)) else None
        wanted = [n for _, _, found in entries for n in found] + ([anchor] if anchor is not None else [])
        lines = node_lines(self.module, wanted, within=result) if wanted else {}
        firsts: dict[int, cst.CSTNode] = {}
        for message, on_holder, found in entries:
            if not on_holder and found:
                firsts.setdefault(id(found[0]), found[0])
        # A note's "also used at" offsets count the lines the notes placed between its
        # uses add; those depend on the notes' wrapped lengths, which depend on their
        # offsets: settle in a few rounds (lengths only grow with the suffix).
        comments = {message: f"# {self.TODO_TAG}: {message}" for message, _, _ in entries}
        for _ in range(4):
            per_first: dict[int, list[str]] = {key: [] for key in firsts}
            for message, on_holder, found in entries:
                if not on_holder and found:
                    per_first[id(found[0])].append(comments[message])
            added = [(lines[key], self._added_lines(node, per_first[key], widths.get(key, self.line_limit)))
                     for key, node in firsts.items() if key in lines]
            settled = {}
            for message, on_holder, found in entries:
                comment = f"# {self.TODO_TAG}: {message}"
                first = anchor if on_holder or not found else found[0]
                offsets = set()
                if first is not None and id(first) in lines:
                    start = lines[id(first)]
                    for n in found:
                        if n is not first and id(n) in lines:
                            end = lines[id(n)]
                            offsets.add(end - start + sum(c for line, c in added if start < line <= end))
                if offsets:
                    ordered = sorted(offsets)
                    unit = "line" if len(ordered) == 1 and abs(ordered[0]) == 1 else "lines"
                    comment += f" (also used at {', '.join(f'{o:+d}' for o in ordered)} {unit} from here)"
                settled[message] = comment
            if settled == comments:
                break
            comments = settled
        own: list[str] = []
        at: dict[int, list[str]] = {key: [] for key in firsts}
        for message, on_holder, found in entries:
            if on_holder or not found:
                own.append(comments[message])
            else:
                at[id(found[0])].append(comments[message])
        if at:  # one pass: a rebuilt tree has new node identities
            result = result.visit(_AttachAt({key: (texts, widths.get(key, self.line_limit))
                                             for key, texts in at.items()},
                                            self._attach_comments))  # type: ignore[assignment]
        return result, own

    def _note_width(self, statement: cst.CSTNode) -> int:
        """Columns a note above ``statement`` (of the original tree) may use: the file's
        line length less the statement's indentation."""
        return self.line_limit - self.def_column(statement)

    def carry_leading_lines(self, statement: cst.CSTNode) -> None:
        """``statement`` (of the original tree, being left) is removed: its blank lines and
        comments go to the statement after it, so nothing around the change moves."""
        leading = list(getattr(statement, "leading_lines", ()))
        parent = self.parent(statement)
        body = parent.body if isinstance(parent, (cst.Module, cst.IndentedBlock)) else None
        if not leading or not isinstance(body, (list, tuple)):
            return
        at = next((i for i, s in enumerate(body) if s is statement), None)
        if at is not None and at + 1 < len(body):
            self._carried.setdefault(id(body[at + 1]), []).extend(leading)

    def skipped(self, node: cst.CSTNode, rule: str, what: str, guard: str, hint: str = "") -> None:
        """Report a match left alone because it sits in a compat block (and, for the
        upgrade, mark it with a TODO: the block may be obsolete on the new release)."""
        message = f"{what} ({rule}): left alone inside a {guard}" + (f"; {hint}" if hint else "")
        self.record(node, rule, "skipped", message)
        if self.TODO_IN_GUARDS:
            self.todo(node, rule, message, kind=None)

    @property
    def _note_prefix(self) -> str:
        return f"# {self.TODO_TAG}: "

    def _attach_comments(
        self, result: cst.CSTNode | cst.RemovalSentinel | cst.FlattenSentinel[cst.CSTNode], comments: list[str],
        width: int,
    ) -> cst.CSTNode | cst.RemovalSentinel | cst.FlattenSentinel[cst.CSTNode]:
        if isinstance(result, cst.FlattenSentinel):
            nodes = list(result.nodes)
            if nodes:
                nodes[0] = self._attach_comments(nodes[0], comments, width)  # type: ignore[assignment]
            return cst.FlattenSentinel(nodes)
        if not isinstance(result, _STATEMENT_TYPES):
            return result
        leading = list(result.leading_lines)
        header_keys = {self._todo_key(t) for t in self._header_notes}
        # a TODO an earlier run left (same subject, other words or layout) is updated where it is
        earlier = {self._todo_key(n.text): n for n in read_notes(leading, self._note_prefix)}
        replaced: dict[int, tuple[int, list[cst.EmptyLine]]] = {}
        added: list[cst.EmptyLine] = []
        for comment in dict.fromkeys(comments):
            self.notes += 1
            key = self._todo_key(comment)
            if key in header_keys or any(same_words(comment, t) for t in self._header_notes):
                continue
            note = earlier.pop(key, None)
            if note is None:
                added += [cst.EmptyLine(comment=cst.Comment(line)) for line in wrap_note(comment, width)]
                continue
            wrapped = relaid(note.lines, comment, width, width + MAX_LINE - self.line_limit)
            if wrapped is not None:
                first = leading[note.start]
                replaced[note.start] = (note.end, [first.with_changes(comment=cst.Comment(line)) for line in wrapped])
        if not replaced and not added:
            return result
        for start in sorted(replaced, reverse=True):
            end, new_lines = replaced[start]
            leading[start:end] = new_lines
        # Right above the statement, below any blank lines or comments it already had.
        return result.with_changes(leading_lines=[*leading, *added])

    def _added_lines(self, statement: cst.CSTNode, comments: list[str], width: int) -> int:
        """How many lines ``comments`` would add above ``statement``: new notes count their
        wrapped lines, an earlier run's note on the same subject the difference."""
        header_keys = {self._todo_key(t) for t in self._header_notes}
        there = {self._todo_key(n.text): n for n in read_notes(getattr(statement, "leading_lines", ()),
                                                               self._note_prefix)}
        count = 0
        for comment in dict.fromkeys(comments):
            key = self._todo_key(comment)
            if key in header_keys:
                continue
            note = there.pop(key, None)
            lines = relaid(note.lines if note is not None else None, comment, width,
                           width + MAX_LINE - self.line_limit)
            if lines is not None:
                count += len(lines) - (len(note.lines) if note is not None else 0)
        return count

    def _todo_key(self, comment: str) -> str:
        """What a TODO is about: its text up to the first colon after the tag (the rule
        or advisory and the symbol, e.g. ``override of CachingAutotuner.precompile``)."""
        body = comment.removeprefix(f"# {self.TODO_TAG}: ")
        return body.partition(": ")[0]


class _AttachAt(cst.CSTTransformer):
    """Attach comments (and the width to wrap them to) to the statements with the given
    ids (of the tree visited)."""

    def __init__(self, comments: dict[int, tuple[list[str], int]], attach: Callable[..., object]) -> None:
        super().__init__()
        self._comments = comments
        self._attach = attach

    def on_visit(self, node: cst.CSTNode) -> bool:
        # statements live only in bodies: never descend into a line or an expression
        return isinstance(node, _STATEMENT_HOLDERS)

    def on_leave(self, original_node: cst.CSTNode, updated_node: cst.CSTNode) -> object:  # type: ignore[override]
        comments = self._comments.get(id(original_node))
        return updated_node if comments is None else self._attach(updated_node, *comments)
