"""The upgrade's checks driven by the per-release API index and the advisory table:
imports that must resolve on the target, signature changes at call sites and at
overriding definitions, and advisory TODOs at the use sites of changed behaviour.

Mixed into :class:`~spyre_codemods.upgrade.UpgradeCommand`, whose visitor methods call
these helpers; nothing here visits on its own.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Iterator, Sequence

import libcst as cst

from .advisories import Advisory
from .api_index import INDEXED_PACKAGES, ApiIndex, Param, ReleaseApi, Signature, is_indexed, load_index
from .base import RewriteCommand
from .import_resolution import ImportResolver
from .imports import AliasTarget, dedupe_aliases, split_import_from
from .names import absolutize, dotted, import_from_module
from .notes import read_notes
from .params_edit import NO_SPACE, add_params
from .redesigns import select_changes
from .releases import Release
from .signature_table import CHECKED_DUNDERS, EXTERNAL, RECEIVERS
from .signatures import compare, plan_call, plan_override

__all__ = ["IndexChecks"]

IMPORTS_RULE = "import-resolution"
_NOT_USED = re.compile(r"not used yet: (.*?)(?:; |$)")
SIGNATURE_RULE = "signature-change"


def _import_statements(body: list[ast.stmt]) -> Iterator[ast.Import | ast.ImportFrom]:
    """Import statements at any depth, walking statement bodies only (expressions hold none)."""
    for stmt in body:
        if isinstance(stmt, (ast.Import, ast.ImportFrom)):
            yield stmt
            continue
        for field in ("body", "orelse", "finalbody", "handlers", "cases"):
            child = getattr(stmt, field, None)
            if isinstance(child, list):
                yield from _import_statements([c for c in child if isinstance(c, (ast.stmt, ast.excepthandler,
                                                                                   ast.match_case))])


_GONE: dict[tuple[str, str], frozenset[str]] = {}


def _gone_methods(index: ApiIndex, target: ReleaseApi, cls: str) -> frozenset[str]:
    """Methods some indexed release's ``cls`` had that ``target``'s has not (memoised)."""
    key = (str(target.minor), cls)
    if key not in _GONE:
        ever: set[str] = set()
        for view in index.views_between("0.0", index.releases[-1]):
            for owner in view.mro(cls):
                module, _, name = owner.rpartition(".")
                info = view.class_info(module, name)
                ever.update(info[1] if info else ())
        _GONE[key] = frozenset(m for m in ever if target.method(cls, m) is None)
    return _GONE[key]


def _literal(text: str) -> bool:
    try:
        ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return False
    return True


def _decorator_names(fn: cst.FunctionDef) -> set[str]:
    names = set()
    for deco in fn.decorators:
        expr = deco.decorator.func if isinstance(deco.decorator, cst.Call) else deco.decorator
        text = dotted(expr)
        if text:
            names.add(text.rpartition(".")[2])
    return names


def own_params(fn: cst.FunctionDef, method: bool = True) -> list[Param]:
    """An overriding definition's parameters, without ``self``/``cls`` (``method=False``:
    a replacement for a plain function, which has none)."""
    p = fn.params

    def default(param: cst.Param) -> str | None:
        return None if param.default is None else cst.Module(body=[]).code_for_node(param.default)

    out = [Param(x.name.value, "posonly", default(x)) for x in p.posonly_params]
    out += [Param(x.name.value, "positional", default(x)) for x in p.params]
    if isinstance(p.star_arg, cst.Param):
        out.append(Param(p.star_arg.name.value, "varargs", None))
    out += [Param(x.name.value, "kwonly", default(x)) for x in p.kwonly_params]
    if p.star_kwarg is not None:
        out.append(Param(p.star_kwarg.name.value, "varkw", None))
    if method and "staticmethod" not in _decorator_names(fn) and out and out[0].kind in ("posonly", "positional"):
        out = out[1:]
    return out


_CONFIG = "torch._inductor.config"
#: the last components of the indexed packages: a tree copied without its ``torch/`` root
#: names its modules ``_inductor.x``
_INDEXED_ROOTS = frozenset(p.rpartition(".")[2] for p in INDEXED_PACKAGES)


class IndexChecks(RewriteCommand):
    """Helpers for the index-driven parts of the upgrade (see the module docstring)."""

    def setup_index_checks(
        self, source: Release, target: Release, explicit_callees: frozenset[str], enabled: bool = True,
        handled_methods: frozenset[str] = frozenset(),
    ) -> None:
        """``enabled=False``: the rules only (no import, signature or advisory checks);
        ``handled_methods``: methods the rules rename (not reported as gone)."""
        self._handled_methods = handled_methods
        index = load_index()
        self.resolver = ImportResolver(index, source, target if enabled else "0.0")
        self.to_api: ReleaseApi | None = index.view(target) if enabled else None
        self.from_api: ReleaseApi | None = index.nearest_view(source) if enabled else None
        self._source, self._target = source, target
        self._index = index
        self.advisories = select_changes(source, target) if enabled else ()
        self._explicit_callees = explicit_callees
        self._signature_cache: dict[tuple[str, str], tuple[Signature, Signature, Release] | None] = {}
        self._indexed_locals: frozenset[str] = frozenset()
        self._bound: dict[str, set[str]] = {}
        self._import_lines: frozenset[int] | None = None
        self._class_bases: list[list[str]] = []
        self._class_nodes: list[cst.ClassDef] = []
        self._confirmed: dict[int, list[str]] = {}
        #: replacement function name -> (the Inductor callable it stands for, "replaces"/"copies")
        self._replacements: dict[str, tuple[str, str]] = {}
        self._config_advisories: tuple[Advisory, ...] = ()
        #: imported local -> (its qualname on the source, class, method) for a function that
        #: became a class's own method
        self._as_method: dict[str, tuple[str, str, str]] = {}
        adv_words = [a for a in self.advisories if a.qualnames]
        self._advisory_qual_words = frozenset(q.rpartition(".")[2] for a in adv_words for q in a.qualnames)
        self._advisory_methods: dict[str, list[tuple[str | None, Advisory]]] = {}
        for a in self.advisories:
            for receiver, method in a.methods:
                self._advisory_methods.setdefault(method, []).append((receiver, a))
        self._external = {e.method: e for e in EXTERNAL}

    @property
    def index_active(self) -> bool:
        return self.to_api is not None

    def index_words(self, bound: dict[str, set[str]]) -> tuple[set[str], dict[str, frozenset[str]]]:
        """Prune words for the index checks, given the file's imported locals (which
        also give the cheap first guess at a name's origin, see :meth:`_from_torch`):
        the names of callables whose parameters changed, and the advisories' words;
        plus, per conventional receiver, its class's changed methods."""
        self._bound = bound
        self._indexed_locals = frozenset(
            local for local, quals in bound.items() if any(q == "torch" or is_indexed(q) for q in quals))
        words = set(self._external)
        for a in self.advisories:
            words |= a.words
        if self.to_api is None or self.from_api is None:
            return words, {}
        self._replacements = self._find_replacements()
        words |= set(self._replacements)
        if self.resolver.active:  # imported functions that became a class's method: their uses change
            for local, quals in bound.items():
                for q in quals:
                    module, _, name = q.rpartition(".")
                    verdict = self.resolver.check(module, name) if is_indexed(module) else None
                    if verdict is not None and verdict.method_of is not None:
                        words.add(local)
        self._config_advisories = self._find_config_advisories()
        if self._config_advisories:
            words |= {"config"} | {local for local, quals in bound.items() if _CONFIG in quals}
        # functions: those imported by name, or living in a module the file imports
        modules = {q for quals in bound.values() for q in quals}
        changed = self._index.changed_functions(self.from_api, self.to_api)
        for name, homes in changed.items():
            if name in bound or homes & modules:
                words.add(name)
        # and their local aliases (`from ..utils import ceildiv as cdiv`)
        for local, quals in bound.items():
            if any(q.rpartition(".")[0] in changed.get(q.rpartition(".")[2], ()) for q in quals):
                words.add(local)
        attributes = {receiver: self._index.changed_methods(self.from_api, self.to_api, cls)
                      | _gone_methods(self._index, self.to_api, cls)
                      for receiver, cls in RECEIVERS.items()}
        # an imported Inductor class's changed methods, as `Cls.m`: a call through the class
        # (`CppCodeCache.load(...)`) or a patch (`Cls.m = f`)
        for local, quals in bound.items():
            for q in quals:
                if is_indexed(q) and (self.to_api.is_class(q) or self.from_api.is_class(q)):
                    changed = self._index.changed_methods(self.from_api, self.to_api, q)
                    if changed:
                        attributes[local] = attributes.get(local, frozenset()) | changed
        return words, attributes

    def class_words(self) -> frozenset[str]:
        """Extra prune words inside the current class: its indexed bases' changed methods."""
        if not self._class_bases or not self._class_bases[-1] or self.to_api is None or self.from_api is None:
            return frozenset()
        words: set[str] = set()
        for base in self._class_bases[-1]:
            words |= self._index.changed_methods(self.from_api, self.to_api, base)
        return frozenset(words)

    def _from_torch(self, expr: cst.BaseExpression, confirm: bool = True) -> str | None:
        """Qualified name of a Name/Attribute chain that starts at a torch import.

        The file's import table gives a guess without scope analysis; libcst's scope
        analysis (costly: it resolves the whole module) confirms it only when
        ``confirm`` and the guess matters."""
        root = self.root_name(expr)
        if root is None or root.value not in self._indexed_locals:
            return None
        quals = self._bound.get(root.value, set())
        guess = dotted(expr) if len(quals) == 1 else None
        if guess is not None:
            (qual,) = quals
            guess = qual + guess[len(root.value):]
        if not confirm:
            return guess
        return self.imported_qualname(expr)

    # ---- imports ------------------------------------------------------------------
    def must_visit_lines(self) -> frozenset[int]:
        """Lines holding an import that does not resolve on the target (found with the
        file's ``ast``): their blocks are visited whatever words they contain."""
        if self._import_lines is None:
            lines: set[int] = set()
            smap = self.source_map
            if smap is not None and self.resolver.active:
                for node in _import_statements(smap.tree.body):
                    if isinstance(node, ast.ImportFrom):
                        module = absolutize("." * node.level + (node.module or ""), self.package) \
                            if node.level else node.module
                        if module is not None and is_indexed(module) and any(
                                (self.resolver.check_module(module) if a.name == "*" else
                                 self.resolver.check(module, a.name)) is not None for a in node.names):
                            lines.add(node.lineno)
                    elif isinstance(node, ast.Import):
                        if any(self.resolver.check_module(a.name) is not None for a in node.names):
                            lines.add(node.lineno)
            self._import_lines = frozenset(lines)
        return self._import_lines

    def resolve_imports(
        self, original: cst.SimpleStatementLine, stmts: Sequence[cst.BaseSmallStatement]
    ) -> tuple[list[cst.BaseSmallStatement], list[cst.BaseSmallStatement], bool]:
        """Check every import in ``stmts`` (already rewritten by the rules) against the
        target release: moves are applied, the rest get a TODO on ``original``."""
        if not self.resolver.active:
            return list(stmts), [], False
        kept: list[cst.BaseSmallStatement] = []
        extra: list[cst.BaseSmallStatement] = []
        changed = False
        for stmt in stmts:
            if isinstance(stmt, cst.ImportFrom):
                result = self._resolve_import_from(original, stmt)
                if result is not None:
                    stay, new = result
                    changed = True
                    kept.extend([stay] if stay is not None else [])
                    extra.extend(new)
                    continue
            elif isinstance(stmt, cst.Import):
                for alias in stmt.names:
                    verdict = self.resolver.check_module(dotted(alias.name) or "")
                    if verdict is not None:
                        self.todo(original, IMPORTS_RULE, verdict.message)
            kept.append(stmt)
        return kept, extra, changed

    def _resolve_import_from(
        self, original: cst.SimpleStatementLine, node: cst.ImportFrom
    ) -> tuple[cst.ImportFrom | None, list[cst.ImportFrom]] | None:
        module = import_from_module(node, self.package)
        if module is None or not is_indexed(module):
            return None
        if isinstance(node.names, cst.ImportStar):
            verdict = self.resolver.check_module(module)
            if verdict is not None:
                self.todo(original, IMPORTS_RULE, verdict.message)
            return None
        targets: list[AliasTarget | None] = []
        for alias in node.names:
            name = dotted(alias.name) or ""
            verdict = self.resolver.check(module, name)
            if verdict is None:
                targets.append(None)
            elif verdict.method_of is not None:
                owner_module, _, owner = verdict.method_of.rpartition(".")
                local = alias.asname.name.value if alias.asname and isinstance(alias.asname.name, cst.Name) else name
                self._as_method[local] = (f"{module}.{name}", owner, name)
                targets.append(AliasTarget(owner_module, owner, None))
                self.record(original, IMPORTS_RULE, "rewrite", verdict.message)
            elif verdict.moves:
                assert verdict.module is not None and verdict.name is not None
                local = alias.asname.name.value if alias.asname and isinstance(alias.asname.name, cst.Name) else name
                targets.append(AliasTarget(verdict.module, verdict.name, local if local != verdict.name else None))
                self.record(original, IMPORTS_RULE, "rewrite", verdict.message)
            else:
                targets.append(None)
                self.todo(original, IMPORTS_RULE, verdict.message)
        if not any(targets):
            return None
        stay, new = split_import_from(node, module, targets, self.package)
        return (dedupe_aliases(stay) if stay is not None else None), [dedupe_aliases(n) for n in new]

    def method_use(self, node: cst.Name) -> cst.BaseExpression | None:
        """A use of a function imported under a name that became a class's own method
        (see :meth:`ImportResolver.check`): ``Class.name``."""
        found = self._as_method.get(node.value)
        if found is None:
            return None
        parent = self.parent(node)
        if isinstance(parent, cst.Attribute) and parent.attr is node:
            return None  # `obj.name`: an attribute of something else
        if self.imported_qualname(node) != found[0] or self.guard(node) is not None:
            return None
        self.record(node, IMPORTS_RULE, "rewrite", f"{node.value} -> {found[1]}.{found[2]}")
        return cst.Attribute(value=cst.Name(found[1]), attr=cst.Name(found[2]))

    def guarded_import(self, stmt: cst.Import | cst.ImportFrom, guard: str) -> None:
        """An import inside a compat block is left alone; if it does not resolve on the
        target it is reported (and marked)."""
        if not self.resolver.active or isinstance(stmt.names, cst.ImportStar):
            return
        if isinstance(stmt, cst.Import):
            for alias in stmt.names:
                verdict = self.resolver.check_module(dotted(alias.name) or "")
                if verdict is not None:
                    self.skipped(stmt, IMPORTS_RULE, verdict.message, guard)
            return
        module = import_from_module(stmt, self.package)
        if module is None or not is_indexed(module):
            return
        for alias in stmt.names:
            verdict = self.resolver.check(module, dotted(alias.name) or "")
            if verdict is not None:
                self.skipped(stmt, IMPORTS_RULE, verdict.message, guard)

    # ---- signatures ---------------------------------------------------------------
    def _signature_pair(
        self, key: tuple[str, str], lookup: Callable[[ReleaseApi], Signature | None]
    ) -> tuple[Signature, Signature, Release] | None:
        """(signature on the source, on the target, first release that changed it) when
        the parameters changed, else ``None``."""
        if key in self._signature_cache:
            return self._signature_cache[key]
        found = None
        ext = self._external.get(key[1]) if key[0] == "*" else None
        if ext is not None:
            old_text, new_text = ext.at(self._source), ext.at(self._target)
            if old_text and new_text and old_text != new_text:
                since = next(s for s, p in ext.history if p == new_text)
                found = (Signature(old_text, "f"), Signature(new_text, "f"), since)
        elif self.to_api is not None and self.from_api is not None:
            old, new = lookup(self.from_api), lookup(self.to_api)
            if old is not None and new is not None and old.bound_params != new.bound_params:
                since = self._target
                for view in self._index.views_between(self.from_api.minor, self._target):
                    sig = lookup(view)
                    if sig is None or sig.bound_params != old.bound_params:
                        since = view.minor
                        break
                found = (old, new, since)
        self._signature_cache[key] = found
        return found

    @staticmethod
    def _method_lookup(cls: str, method: str) -> Callable[[ReleaseApi], Signature | None]:
        def lookup(view: ReleaseApi) -> Signature | None:
            hit = view.method(cls, method)
            return hit[1] if hit else None

        return lookup

    def _method_pair(self, cls: str, method: str) -> tuple[Signature, Signature, Release] | None:
        return self._signature_pair((cls, method), self._method_lookup(cls, method))

    def _callee_pairs(self, call: cst.Call) -> tuple[str, tuple[Signature, Signature, Release]] | None:
        func = call.func
        if isinstance(func, cst.Attribute):
            method = func.attr.value
            if method in self._explicit_callees:
                return None
            receiver = func.value
            if method in self._external:
                pair = self._signature_pair(("*", method), lambda v: None)
                return (method, pair) if pair else None
            last = receiver.attr.value if isinstance(receiver, cst.Attribute) else (
                receiver.value if isinstance(receiver, cst.Name) else None)
            if last in RECEIVERS:
                pair = self._method_pair(RECEIVERS[last], method)
                return (f"{last}.{method}", pair) if pair else None
            is_self = isinstance(receiver, cst.Name) and receiver.value == "self"
            is_super = isinstance(receiver, cst.Call) and dotted(receiver.func) == "super"
            if (is_self or is_super) and self._class_bases and self._class_bases[-1]:
                for base in self._class_bases[-1]:
                    pair = self._method_pair(base, method)
                    if pair:
                        return f"{base.rpartition('.')[2]}.{method}", pair
                return None
        if not isinstance(func, (cst.Name, cst.Attribute)):
            return None
        guess = self._from_torch(func, confirm=False)
        if guess is None or not is_indexed(guess) or guess.rpartition(".")[2] in self._explicit_callees:
            return None
        pair = self._signature_pair(("", guess), lambda v: v.function(guess))
        if pair is None or self._from_torch(func) != guess:
            return None
        return guess.rpartition(".")[2], pair

    def check_call(self, original: cst.Call, updated: cst.Call) -> cst.Call:
        """Apply a callee's parameter changes (from the index) to one call."""
        if not self.index_active or any(a.star for a in original.args):
            return updated
        found = self._callee_pairs(original)
        if found is None:
            self._check_gone_method(original)
            return updated
        name, (old, new, since) = found
        changes = compare(old, new)
        positional = sum(1 for a in original.args if a.keyword is None)
        keywords = [a.keyword.value for a in original.args if a.keyword is not None]
        plan = plan_call(changes, positional, keywords)
        if not plan.edits and not plan.problems:
            return updated
        guard = self.guard(original)
        if guard is not None:
            self.skipped(original, SIGNATURE_RULE, f"{name}() call", guard)
            return updated
        if plan.edits:
            args = list(updated.args)
            for i, keyword in plan.to_keyword.items():
                args[i] = args[i].with_changes(keyword=cst.Name(keyword), equal=NO_SPACE)
            for i, arg in enumerate(args):  # same width or wider: the call's layout is kept
                if arg.keyword is not None and arg.keyword.value in plan.rename_keywords:
                    args[i] = arg.with_changes(keyword=cst.Name(plan.rename_keywords[arg.keyword.value]))
            updated = updated.with_changes(args=args)
            if plan.to_keyword:
                updated = self.fit_call(original, updated, min(plan.to_keyword))
            self.record(original, SIGNATURE_RULE, "rewrite", f"{name}(): arguments follow the {since} signature")
        if plan.problems:
            self.todo(original, SIGNATURE_RULE, f"{name}() changed in {since}: {'; '.join(plan.problems)}; "
                                                f"now {new.render(name.rpartition('.')[2])}")
        return updated

    def _check_gone_method(self, call: cst.Call) -> None:
        """``V.graph.sizevars.symbolic_hint(...)``: a method of a conventional receiver's
        class that the target no longer has (and no rule renames) gets a TODO."""
        func = call.func
        if not isinstance(func, cst.Attribute) or func.attr.value in self._handled_methods:
            return
        receiver = func.value
        last = receiver.attr.value if isinstance(receiver, cst.Attribute) else (
            receiver.value if isinstance(receiver, cst.Name) else None)
        cls = RECEIVERS.get(last or "")
        if cls is None or self.to_api is None or self.from_api is None:
            return
        method = func.attr.value
        if self.to_api.method(cls, method) is not None:
            return
        if self.from_api.method(cls, method) is not None:
            gone = next((v.minor for v in self._index.views_between(self.from_api.minor, self._target)
                         if v.method(cls, method) is None), self._target)
            why = f"removed in {gone}"
        else:
            # not on the source release either: code written for an older one (dead or broken)
            last_seen = [v.minor for v in self._index.views_between("0.0", self._target) if v.method(cls, method)]
            if not last_seen:
                return  # never Inductor's: the receiver is something else
            why = f"last in {last_seen[-1]}, not on torch {self.from_api.minor} either"
        guard = self.guard(call)
        if guard is not None:
            self.skipped(call, SIGNATURE_RULE, f"{last}.{method}() call", guard)
            return
        self.todo(call, SIGNATURE_RULE, f"{last}.{method}() is gone on torch {self._target} ({why}): "
                                        f"{cls.rpartition('.')[2]} has no {method}")

    def _patch_lookup(self, qual: str) -> Callable[[ReleaseApi], Signature | None]:
        owner, _, attr = qual.rpartition(".")
        assert self.from_api is not None and self.to_api is not None
        if self.from_api.is_class(owner) or self.to_api.is_class(owner):
            return self._method_lookup(owner, attr)
        return lambda view: view.function(qual)

    def _patched(self, target: cst.BaseExpression, confirm: bool = True) -> str | None:
        """The Inductor callable of the source release that ``target = f`` replaces."""
        qual = self._from_torch(target, confirm=False)
        if qual is None or not is_indexed(qual) or self.from_api is None:
            return None
        if self._patch_lookup(qual)(self.from_api) is None or (confirm and self._from_torch(target) != qual):
            return None
        return qual

    def _find_replacements(self) -> dict[str, tuple[str, str]]:
        """Functions defined once in this file that Inductor calls in place of its own:
        put in place of one Inductor callable (``lowering.make_fallback =
        npu_make_fallback``), or a module-level copy of an Inductor function whose
        parameters changed (same name, the source release's parameters exactly, at least
        two). Found with the file's ``ast``; name -> (callable, how). Their definitions are
        checked like overrides (:meth:`check_replacement`)."""
        smap = self.source_map
        if smap is None:
            return {}
        defs: dict[str, int] = {}
        targets: dict[str, set[str]] = {}
        for node in ast.walk(smap.tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                defs[node.name] = defs.get(node.name, 0) + 1
            elif isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.value, ast.Name) \
                    and isinstance(node.targets[0], ast.Attribute):
                try:
                    expr = cst.parse_expression(ast.unparse(node.targets[0]))
                except cst.ParserSyntaxError:
                    continue
                qual = self._patched(expr, confirm=False)
                if qual is not None:
                    targets.setdefault(node.value.id, set()).add(qual)
        found = {name: (next(iter(quals)), "replaces") for name, quals in targets.items()
                 if len(quals) == 1 and defs.get(name) == 1}
        for name, qual in self._copies(smap.tree, defs).items():
            found.setdefault(name, (qual, "copies"))
        return found

    def _copies(self, tree: ast.Module, defs: dict[str, int]) -> dict[str, str]:
        """Module-level functions that copy an Inductor function whose parameters changed
        between the releases: the name and the source release's parameters match exactly,
        in one Inductor module only."""
        assert self.from_api is not None and self.to_api is not None
        changed = self._index.changed_functions(self.from_api, self.to_api)
        names = {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}
        if names - set(changed):  # bodies are read only for a file that may hold a copy
            rewritten = self._index.changed_bodies(self.from_api, self.to_api)
            changed = {n: changed.get(n, frozenset()) | rewritten.get(n, frozenset()) for n in names}
        this_module = self.context.full_module_name or ""
        if is_indexed(this_module) or this_module.partition(".")[0] in _INDEXED_ROOTS:
            return {}  # Inductor's own code (or a copy of its tree): its functions are the originals
        out: dict[str, str] = {}
        for node in tree.body:
            if not isinstance(node, ast.FunctionDef) or not changed.get(node.name) or defs.get(node.name) != 1:
                continue
            own = _ast_params(node.args)
            if len(own) < 2:
                continue  # too little to tell a copy from a namesake
            homes = [m for m in changed[node.name] if m != this_module
                     and (sig := self.from_api.function(f"{m}.{node.name}")) is not None and sig.params == own]
            if len(homes) == 1:
                out[node.name] = f"{homes[0]}.{node.name}"
        return out

    def check_patch(self, assign: cst.Assign) -> None:
        """``lowering.make_fallback = npu_make_fallback``: a vendor function put in place of
        an Inductor function or method. Inductor calls it with the target's parameters: a
        TODO when they changed since the source release, or when the target is gone. A
        replacement defined in this file is checked at its definition instead, unless
        the target is gone."""
        if not self.index_active or len(assign.targets) != 1 \
                or not isinstance(assign.value, (cst.Name, cst.Attribute)):
            return
        target = assign.targets[0].target
        if not isinstance(target, cst.Attribute):
            return
        qual = self._patched(target)
        if qual is None:
            return
        assert self.to_api is not None
        lookup = self._patch_lookup(qual)
        owner, _, attr = qual.rpartition(".")
        short = f"{owner.rpartition('.')[2]}.{attr}"
        if lookup(self.to_api) is None:
            message = f"patches {short}, which is gone on torch {self._target}: Inductor no longer calls it"
        else:
            if isinstance(assign.value, cst.Name) and self._replacements.get(assign.value.value, ("",))[0] == qual:
                return  # checked where it is defined
            pair = self._signature_pair(("patch", qual), lookup)
            resync = self._body_since(qual)
            if pair is None and resync is None:
                return
            parts = [f"its parameters changed in {pair[2]}: the replacement must accept {pair[1].render(attr)}"]\
                if pair is not None else []
            if resync is not None:
                parts.append(f"Inductor's implementation changed in {resync}: compare the replacement with it")
            message = f"patches {short}: {'; '.join(parts)}"
        guard = self.guard(assign)
        if guard is not None:
            self.skipped(assign, SIGNATURE_RULE, f"patch of {short}", guard)
            return
        self.todo(assign, SIGNATURE_RULE, message)

    def check_replacement(self, original: cst.FunctionDef, updated: cst.FunctionDef) -> cst.FunctionDef:
        """A function this file puts in place of an Inductor callable whose parameters
        changed: add the optional parameters it lacks, as for an override, TODO for the
        rest (what the new parameters mean is the vendor's to decide)."""
        found = self._replacements.get(original.name.value)
        if found is None or self.to_api is None:
            return updated
        qual, how = found
        lookup = self._patch_lookup(qual)
        new = lookup(self.to_api)
        pair = self._signature_pair(("patch", qual), lookup)
        resync = self._body_since(qual)
        if new is None or (pair is None and resync is None) or self.guard(original) is not None:
            return updated
        assert self.from_api is not None
        if how == "copies" and pair is None:
            # a vendored module copies many functions: one note for the module lists them
            self.group_todo(original, SIGNATURE_RULE,
                            f"copy of an Inductor function whose implementation changed after torch {self._source} "
                            f"(same name and parameters): compare with Inductor's on torch {self._target} and "
                            "re-sync", kind="todo")
            return updated
        owner, _, attr = qual.rpartition(".")
        where = f"{owner.rpartition('.')[2]}.{attr}"
        if pair is None:
            # only the body changed: parameters that never matched are not this upgrade's to add
            self.todo(original, SIGNATURE_RULE, f"{how} {where} on torch {self._target}: Inductor's "
                                                f"implementation changed in {resync}: compare and re-sync")
            return updated
        extra = [f"Inductor's implementation changed in {resync}: compare and re-sync"] if resync else []
        return self._fit_signature(original, updated, new, pair[0] if pair else lookup(self.from_api), where,
                                   f"{how} {where} on torch ", method=self.from_api.is_class(owner), extra=extra)

    def _body_since(self, qual: str) -> Release | None:
        """The first release after the source whose body of Inductor's function or
        method ``qual`` differs from the source's (by fingerprint), if any."""
        assert self.from_api is not None
        owner, _, attr = qual.rpartition(".")

        def fingerprint(view: ReleaseApi) -> str | None:
            if view.is_class(owner):
                hit = view.method(owner, attr)
                if hit is None:
                    return None
                cls_module, _, cls = hit[0].rpartition(".")
                return view.body(cls_module, f"{cls}.{attr}")
            found = view.origin(owner, attr)
            return view.body(found[0], found[1]) if found is not None and found[1] else None

        before = fingerprint(self.from_api)
        if before is None:
            return None
        for view in self._index.views_between(self.from_api.minor, self._target):
            after = fingerprint(view)
            if after is not None and after != before:
                return view.minor
        return None

    def indexed_bases(self, node: cst.ClassDef) -> list[str]:
        """Qualified names of the class's bases that the index knows as classes."""
        if self.to_api is None:
            return []
        found = []
        for base in node.bases:
            qualname = self._from_torch(base.value, confirm=False)
            if qualname and is_indexed(qualname) and (
                    self.to_api.is_class(qualname) or (self.from_api is not None and self.from_api.is_class(qualname))):
                found.append(qualname)
        return found

    def check_override(self, original: cst.FunctionDef, updated: cst.FunctionDef) -> cst.FunctionDef:
        """Compare a method of a class deriving from an indexed class with the base's
        method on the target release: add optional parameters it lacks (literal
        defaults only), TODO for the rest."""
        name = original.name.value
        bases = self._class_bases[-1] if self._class_bases else []
        if not bases or self.to_api is None or (name.startswith("__") and name not in CHECKED_DUNDERS):
            return updated
        for base in bases:
            hit = self.to_api.method(self._on_target(base), name)
            old_hit = self.from_api.method(base, name) if self.from_api is not None else None
            if hit is None:
                if old_hit is not None and self.guard(original) is None and base in self._confirmed_bases():
                    self.todo(original, SIGNATURE_RULE,
                              f"{old_hit[0].rpartition('.')[2]}.{name} is gone on torch {self._target}: "
                              f"Inductor no longer calls this override")
                    return updated
                continue
            owner, target_sig = hit
            if self.guard(original) is not None or base not in self._confirmed_bases():
                return updated
            where = f"{owner.rpartition('.')[2]}.{name}"
            return self._fit_signature(original, updated, target_sig, old_hit[1] if old_hit else None, where,
                                       f"override of {where} on torch ")
        return updated

    def _fit_signature(self, original: cst.FunctionDef, updated: cst.FunctionDef, target_sig: Signature,
                       old_sig: Signature | None, where: str, subject: str, method: bool = True,
                       extra: Sequence[str] = ()) -> cst.FunctionDef:
        """Bring a definition Inductor calls as ``where`` to ``target_sig``: optional
        parameters it lacks are added (literal defaults only); a TODO (``subject`` ...)
        lists the rest and the new parameters the body does not read yet."""
        name = original.name.value
        own = own_params(original, method)
        plan = plan_override(own, target_sig, old_sig)
        addable = [p for p in plan.add if p.default is not None and _literal(p.default)]
        problems = plan.problems + [f"parameter {p.name}={p.default} is missing" for p in plan.add
                                    if p not in addable] + list(extra)
        # the parameters added now, and those an earlier run's note says it added
        added = {p.name for p in addable} | self._noted_unused(original, subject)
        unused = self._unused_new_params(original, [*own, *addable], target_sig, old_sig, added)
        if not addable and not problems and not unused:
            return updated
        if addable:
            updated = add_params(updated, addable, self.line_limit, self.def_column(original))
            self.record(original, SIGNATURE_RULE, "rewrite",
                        f"{name}: added {', '.join(map(str, addable))} (as {where} on {self._target})")
        if unused:
            # worded from the result, not the edit: a re-run says the same
            problems.append(f"not used yet: {', '.join(unused)}")
        role = "base" if subject.startswith("override") else "Inductor's"
        expected = "" if problems == list(extra) else f"; {role} is {target_sig.render(where.rpartition('.')[2])}"
        self.todo(original, SIGNATURE_RULE, f"{subject}{self._target}: {'; '.join(problems)}{expected}")
        return updated

    def _on_target(self, cls: str) -> str:
        """``cls`` where the target release has it (a class that moved is looked up at its
        new home: its methods are not gone because its module is)."""
        assert self.to_api is not None
        if self.to_api.is_class(cls):
            return cls
        module, _, name = cls.rpartition(".")
        verdict = self.resolver.check(module, name) if self.resolver.active else None
        return f"{verdict.module}.{verdict.name}" if verdict is not None and verdict.moves else cls

    def _noted_unused(self, fn: cst.FunctionDef, subject: str) -> set[str]:
        """Names in the ``not used yet:`` list of this tool's note on ``subject`` above ``fn``."""
        prefix = f"# {self.TODO_TAG}: {subject}"
        # joined: the subject and the list may be wrapped over several lines
        for note in read_notes(fn.leading_lines, f"# {self.TODO_TAG}: "):
            listed = _NOT_USED.search(note.text) if note.text.startswith(prefix) else None
            if listed:
                return {item.partition("=")[0].strip() for item in listed.group(1).split(", ")}
        return set()

    @staticmethod
    def _unused_new_params(fn: cst.FunctionDef, own: Sequence[Param], base: Signature,
                           base_old: Signature | None, added: set[str]) -> list[str]:
        """The override's parameters that are ``added`` now or that the base gained since
        the source release, and that its body does not read."""
        gained = {p.name for p in base.bound_params} - {p.name for p in base_old.bound_params} \
            if base_old is not None else set()
        names = [p for p in own if p.name in gained | added]
        if not names:
            return []
        read = _names_in(fn.body)  # names, not text: a TODO comment in the body may mention one
        return [str(p) for p in names if p.name not in read]

    # ---- advisories ---------------------------------------------------------------
    def advise_attribute(self, node: cst.Attribute) -> None:
        for receiver, advisory in self._advisory_methods.get(node.attr.value, ()):
            if self.receiver_matches(node.value, receiver):
                self._advise(node, advisory)
        if node.attr.value in self._advisory_qual_words:
            self._advise_qualname(node)

    def advise_name(self, node: cst.Name) -> None:
        if node.value in self._advisory_qual_words and node.value in self._indexed_locals:
            self._advise_qualname(node)

    def _advise_qualname(self, node: cst.Name | cst.Attribute) -> None:
        guess = self._from_torch(node, confirm=False)
        for advisory in self.advisories:
            if guess in advisory.qualnames and self._from_torch(node) == guess:
                self._advise(node, advisory)

    def _confirmed_bases(self) -> list[str]:
        """The current class's indexed bases, confirmed by scope analysis (memoised)."""
        node = self._class_nodes[-1]
        if id(node) not in self._confirmed:
            self._confirmed[id(node)] = [
                q for q in (self._from_torch(b.value) for b in node.bases) if q in self._class_bases[-1]]
        return self._confirmed[id(node)]

    def enter_class(self, node: cst.ClassDef) -> list[str]:
        """Track the class being visited; its indexed bases (a guess until confirmed)."""
        for arg in node.bases:  # not visited yet: their parents, for origin look-ups
            self._visited_parent[id(arg)] = node
            self._visited_parent[id(arg.value)] = arg
        bases = self.indexed_bases(node)
        self._class_nodes.append(node)
        self._class_bases.append(bases)
        if bases and self.to_api is not None:
            methods = [s.name.value for s in node.body.body if isinstance(s, cst.FunctionDef)] \
                if isinstance(node.body, cst.IndentedBlock) else []
            for advisory in self.advisories:
                overridden = [m for m in methods if m in advisory.base_methods]
                if advisory.base is None or (advisory.base_methods and not overridden):
                    continue
                missing = [m for m in advisory.requires if m not in methods]
                if advisory.requires and (not missing or advisory.base not in bases):
                    continue  # implemented here, or inherited from a concrete subclass of the base
                if any(self._inherits(b, advisory.base) for b in bases) \
                        and any(self._inherits(b, advisory.base) for b in self._confirmed_bases()):
                    detail = f" (overridden here: {', '.join(overridden)})" if overridden else \
                        f" (not defined here: {', '.join(missing)})" if missing else ""
                    self._advise(node, advisory, detail)
        return bases

    def exit_class(self) -> None:
        self._class_nodes.pop()
        self._class_bases.pop()


    def _inherits(self, cls: str, base: str, depth: int = 0) -> bool:
        if cls == base:
            return True
        assert self.to_api is not None
        module, _, name = cls.rpartition(".")
        info = self.to_api.class_info(module, name) if module else None
        origin = self.to_api.origin(module, name) if module else None
        if origin is not None and origin[1] and f"{origin[0]}.{origin[1]}" == base:
            return True
        return info is not None and depth < 20 and any(self._inherits(b, base, depth + 1) for b in info[0])

    def _find_config_advisories(self) -> tuple[Advisory, ...]:
        """Advisories about a config default that this file's config settings may need
        (those whose option the file does not mention already)."""
        wanted = [a for a in self.advisories if a.config_default]
        smap = self.source_map
        if not wanted or smap is None:
            return ()
        # in code, not comments: this tool's own notes name the option
        named: set[str] = set()
        for node in ast.walk(smap.tree):
            if isinstance(node, ast.Attribute):
                named.add(node.attr)
            elif isinstance(node, ast.keyword) and node.arg:
                named.add(node.arg)
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                named.add(node.value)
        return tuple(a for a in wanted if a.config_default not in named)

    def advise_config(self, assign: cst.Assign) -> None:
        """``config.allow_buffer_reuse = False``: the backend sets Inductor's config here,
        where a new default that changes behaviour may need a value of its own."""
        if not self._config_advisories or len(assign.targets) != 1 or not _literal_value(assign.value):
            return  # a value, not a hook being installed
        target = assign.targets[0].target
        if not isinstance(target, cst.Attribute):
            return
        guess = self._from_torch(target, confirm=False)
        if guess is None or not guess.startswith(_CONFIG + ".") or self._from_torch(target) != guess:
            return
        for advisory in self._config_advisories:
            self._advise(assign, advisory, " (Inductor config is set here)")

    def _advise(self, node: cst.CSTNode, advisory: Advisory, detail: str = "") -> None:
        if self.guard(node) is None:
            self.group_todo(node, advisory.id, advisory.message + detail)


def _ast_params(args: ast.arguments) -> tuple[Param, ...]:
    """A definition's parameters as the index records them (defaults as source text)."""
    positional = [*args.posonlyargs, *args.args]
    defaults: list[ast.expr | None] = [None] * (len(positional) - len(args.defaults)) + list(args.defaults)
    out = [Param(a.arg, "posonly" if i < len(args.posonlyargs) else "positional",
                 None if d is None else ast.unparse(d)) for i, (a, d) in enumerate(zip(positional, defaults))]
    if args.vararg is not None:
        out.append(Param(args.vararg.arg, "varargs", None))
    out += [Param(a.arg, "kwonly", None if d is None else ast.unparse(d))
            for a, d in zip(args.kwonlyargs, args.kw_defaults)]
    if args.kwarg is not None:
        out.append(Param(args.kwarg.arg, "varkw", None))
    return tuple(out)


def _literal_value(node: cst.BaseExpression) -> bool:
    """A constant setting: a number, string, True/False/None (possibly negated)."""
    if isinstance(node, cst.UnaryOperation):
        node = node.expression
    return isinstance(node, (cst.Integer, cst.Float, cst.SimpleString, cst.ConcatenatedString)) or (
        isinstance(node, cst.Name) and node.value in ("True", "False", "None"))


class _NameCollector(cst.CSTVisitor):
    def __init__(self) -> None:
        super().__init__()
        self.names: set[str] = set()

    def visit_Name(self, node: cst.Name) -> None:
        self.names.add(node.value)


def _names_in(node: cst.CSTNode) -> set[str]:
    collector = _NameCollector()
    node.visit(collector)
    return collector.names
