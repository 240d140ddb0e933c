"""Typed shapes of upgrade rules, and selection by ``--from``/``--to``.

The rules themselves are data in :mod:`spyre_codemods.rule_table`; this module
only says what each kind of rule means, so the transform can batch them.

A rule applies to an upgrade ``X -> Y`` across its deprecation window: code written
for ``X`` may still use the old spelling (it works on ``X``), and ``Y`` has the new
one. When the old spelling also still works on ``Y`` (a window that outlives ``Y``, or
a name the old module keeps re-exporting) the change is optional: it is made only
with ``modernize`` (``--modernize``) and otherwise listed as available.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from .releases import Release, parse_release
from .textscan import call_arguments, method_access

__all__ = [
    "Rule",
    "RenameRule",
    "SymbolMove",
    "MembersMove",
    "ModuleMove",
    "MethodRename",
    "MethodToCall",
    "Callee",
    "KeywordRename",
    "SignatureChange",
    "DropClassKeyword",
    "SubclassCheck",
    "RuleSelection",
    "select_rules",
    "resolve_rename",
]


@dataclass(frozen=True, kw_only=True)
class Rule:
    """Common fields: a stable id, the release that introduced the new spelling,
    a human note, and where the change was confirmed (release + file).

    ``old_removed``: the release whose Inductor no longer accepts the old spelling, when
    a deprecation window kept it working for a while (default: ``since``, the old
    spelling stopped working when the new one arrived).
    """

    id: str
    since: Release
    note: str
    confirmed: str
    old_removed: Release | None = None

    def old_works_in(self, release: Release) -> bool:
        """True when code still using the old spelling runs on ``release`` (Inductor's
        own code of that release may still use it)."""
        return release < (self.old_removed if self.old_removed is not None else self.since)

    def prefilter(self) -> tuple[tuple[str, ...], ...]:
        """Identifier groups for the text pre-filter: the rule can only fire in a
        file that contains at least one word of *every* group (e.g. the old module's
        name and the moved symbol's name)."""
        raise NotImplementedError

    @property
    def old_text(self) -> str:
        """Short rendering of the old spelling (docs and reports)."""
        raise NotImplementedError

    @property
    def new_text(self) -> str:
        """Short rendering of the new spelling (docs and reports)."""
        raise NotImplementedError

    def refine(self, data: bytes) -> bool:
        """A sharper (still conservative) text test, run when :meth:`prefilter`'s
        words are all present; ``False`` proves the rule cannot fire in ``data``."""
        return True

    def applies(self, source: Release, target: Release) -> bool:
        """True when code written for ``source`` may use the old spelling and ``target``
        has the new one (whether or not the old one still works there)."""
        return self.old_works_in(source) and self.since <= target

    def optional_on(self, target: Release) -> bool:
        """True when code keeping the old spelling still runs on ``target``."""
        return self.old_works_in(target)


@dataclass(frozen=True, kw_only=True)
class RenameRule(Rule):
    """A rule that maps one fully qualified name to another.

    ``reexported``: the old module still re-exports the name in every known release
    (it imports it for its own use). Imports are moved to the new home, but
    attribute access through the old module (``ir.LoopBody``), which keeps working,
    is left alone: rewriting it would churn code that is already current.
    """

    reexported: bool = False

    def old_works_in(self, release: Release) -> bool:
        return self.reexported or super().old_works_in(release)

    def rename(self, qualname: str) -> str | None:
        """The new qualified name, or ``None`` when ``qualname`` is not affected."""
        raise NotImplementedError


@dataclass(frozen=True, kw_only=True)
class SymbolMove(RenameRule):
    """One symbol renamed and/or moved to another module (``a.b.Old`` -> ``c.d.New``)."""

    old: str
    new: str

    def rename(self, qualname: str) -> str | None:
        if qualname == self.old:
            return self.new
        if qualname.startswith(self.old + "."):  # attribute of the symbol: Old.create
            return self.new + qualname[len(self.old):]
        return None

    def prefilter(self) -> tuple[tuple[str, ...], ...]:
        module, _, name = self.old.rpartition(".")
        return (module.rpartition(".")[2],), (name,)

    @property
    def old_text(self) -> str:
        return self.old

    @property
    def new_text(self) -> str:
        return self.new


@dataclass(frozen=True, kw_only=True)
class MembersMove(RenameRule):
    """Several module members moved, same names, to another module."""

    old_module: str
    new_module: str
    names: tuple[str, ...]

    def rename(self, qualname: str) -> str | None:
        for name in self.names:
            old = f"{self.old_module}.{name}"
            if qualname == old or qualname.startswith(old + "."):
                return f"{self.new_module}.{name}" + qualname[len(old):]
        return None

    def prefilter(self) -> tuple[tuple[str, ...], ...]:
        return (self.old_module.rpartition(".")[2],), self.names

    @property
    def old_text(self) -> str:
        return f"{self.old_module}.{{{', '.join(self.names)}}}"

    @property
    def new_text(self) -> str:
        return f"{self.new_module}.{{…}}"


@dataclass(frozen=True, kw_only=True)
class ModuleMove(RenameRule):
    """A module (and everything under it) moved: ``a.old`` -> ``a.b.new``."""

    old: str
    new: str

    def rename(self, qualname: str) -> str | None:
        if qualname == self.old or qualname.startswith(self.old + "."):
            return self.new + qualname[len(self.old):]
        return None

    def prefilter(self) -> tuple[tuple[str, ...], ...]:
        return ((self.old.rpartition(".")[2],),)

    @property
    def old_text(self) -> str:
        return f"{self.old} (module)"

    @property
    def new_text(self) -> str:
        return f"{self.new} (module)"


@dataclass(frozen=True, kw_only=True)
class MethodRename(Rule):
    """``<receiver>.old(...)`` -> ``<receiver>.new(...)``.

    ``receiver`` is the last name of the receiver expression that identifies the
    object (``sizevars`` matches ``V.graph.sizevars`` and ``self.sizevars``);
    ``None`` matches any receiver. ``new_if_value_used`` is the spelling to use
    when the call's result is consumed (old ``guard_equals`` returned a value,
    new ``check_equals`` returns ``None``). ``new_without_keyword`` = (keyword, method):
    the spelling for a call that does not pass ``keyword`` (2.11's ``size_hint(x)`` without
    ``fallback=`` is ``size_hint_or_throw(x)``, line for line; with it, ``optimization_hint``).
    A later selected rename of the new spelling follows (``size_hint_or_throw`` ->
    ``guarding_hint_or_throw`` on 2.12).
    """

    method: str
    new: str
    receiver: str | None = None
    new_if_value_used: str | None = None
    new_without_keyword: tuple[str, str] | None = None

    def prefilter(self) -> tuple[tuple[str, ...], ...]:
        return ((self.receiver,), (self.method,)) if self.receiver else ((self.method,),)

    def refine(self, data: bytes) -> bool:
        # the receiver must be right before the method: `sizevars.size_hint`, not just both words
        return self.receiver is None or method_access(self.receiver, self.method).search(data) is not None

    @property
    def old_text(self) -> str:
        return f"{self.receiver or '<obj>'}.{self.method}(...)"

    @property
    def new_text(self) -> str:
        text = f"{self.receiver or '<obj>'}.{self.new}(...)"
        if self.new_if_value_used:
            text += f" (or .{self.new_if_value_used}(...) when the result is used)"
        if self.new_without_keyword:
            keyword, method = self.new_without_keyword
            text += f" with {keyword}=, else .{method}(...)"
        return text


@dataclass(frozen=True, kw_only=True)
class MethodToCall(Rule):
    """``obj.method()`` -> ``obj.new(<extra keywords>)``; overrides of the old
    method in subclasses and bare references get a TODO (semantics changed)."""

    method: str
    new: str
    add_keywords: tuple[tuple[str, str], ...] = ()

    def prefilter(self) -> tuple[tuple[str, ...], ...]:
        return ((self.method,),)

    @property
    def old_text(self) -> str:
        return f"<obj>.{self.method}()"

    @property
    def new_text(self) -> str:
        kws = ", ".join(f"{k}={v}" for k, v in self.add_keywords)
        return f"<obj>.{self.new}({kws})"


@dataclass(frozen=True)
class Callee:
    """What a call-pattern rule matches: a qualified function/method name
    (resolved through imports and aliases) or a method name on any receiver."""

    qualname: str | None = None
    method: str | None = None

    @property
    def short(self) -> str:
        """Last name of the callee (for the text pre-filter and messages)."""
        return (self.qualname or self.method or "").rpartition(".")[2]

    def __str__(self) -> str:
        return self.qualname or f"<obj>.{self.method}"


@dataclass(frozen=True, kw_only=True)
class KeywordRename(Rule):
    """A keyword argument renamed at call sites: ``f(old=...)`` -> ``f(new=...)``."""

    callee: Callee
    old_keyword: str
    new_keyword: str

    def prefilter(self) -> tuple[tuple[str, ...], ...]:
        return (self.callee.short,), (self.old_keyword,)

    @property
    def old_text(self) -> str:
        return f"{self.callee}({self.old_keyword}=...)"

    @property
    def new_text(self) -> str:
        return f"{self.callee}({self.new_keyword}=...)"


@dataclass(frozen=True, kw_only=True)
class SignatureChange(Rule):
    """Positional arguments from index ``keep_positional`` on become keywords, named
    after the parameters of the release the code was written for (``history``:
    ``(first release, parameter names)`` pairs, oldest first); keywords that the
    new release dropped get a TODO (their meaning moved elsewhere)."""

    callee: Callee
    history: tuple[tuple[Release, tuple[str, ...]], ...]
    keep_positional: int
    removed: tuple[str, ...] = ()

    def params_for(self, source: Release) -> tuple[str, ...]:
        """Parameter names of the callee in release ``source``."""
        chosen = self.history[0][1]
        for since, params in self.history:
            if since <= source:
                chosen = params
        return chosen

    def prefilter(self) -> tuple[tuple[str, ...], ...]:
        return ((self.callee.short,),)

    def refine(self, data: bytes) -> bool:
        if self.callee.method is None:
            return True  # a function may be called through an import alias
        # only calls with extra positional arguments or dropped keywords need a change
        for call in call_arguments(data, self.callee.method):
            if call is None:
                return True
            positional, keywords = call
            if positional > self.keep_positional or set(keywords) & set(self.removed):
                return True
        return False

    @property
    def old_text(self) -> str:
        return f"{self.callee}({', '.join(self.history[-1][1])})"

    @property
    def new_text(self) -> str:
        kept = ", ".join(self.history[-1][1][: self.keep_positional])
        return f"{self.callee}({kept}, *, ...)"


@dataclass(frozen=True, kw_only=True)
class DropClassKeyword(Rule):
    """``class C(..., metaclass=X)`` -> ``class C(...)`` where ``X`` is gone."""

    keyword: str
    value: str

    def prefilter(self) -> tuple[tuple[str, ...], ...]:
        return ((self.value.rpartition(".")[2],),)

    @property
    def old_text(self) -> str:
        return f"class C(..., {self.keyword}={self.value.rpartition('.')[2]})"

    @property
    def new_text(self) -> str:
        return "class C(...)"


@dataclass(frozen=True, kw_only=True)
class SubclassCheck(Rule):
    """A contract change for subclasses of ``base`` that needs a human: TODO on
    the class when it lacks ``required_method``, or when it defines
    ``method_with_decorator`` = (method, decorator) with that decorator."""

    base: str
    required_method: str | None = None
    method_with_decorator: tuple[str, str] | None = None

    def prefilter(self) -> tuple[tuple[str, ...], ...]:
        return ((self.base.rpartition(".")[2],),)

    @property
    def old_text(self) -> str:
        return f"class C({self.base.rpartition('.')[2]})"

    @property
    def new_text(self) -> str:
        return "TODO: " + self.note


@dataclass(frozen=True)
class RuleSelection:
    """Rules chosen for one ``--from``/``--to`` run, ordered by ``since``.

    ``deferred``: rules that apply but are optional on ``target`` (the old spelling
    still works there) and were left out because ``modernize`` was not asked for.
    """

    source: Release
    target: Release
    rules: tuple[Rule, ...] = field(default_factory=tuple)
    deferred: tuple[Rule, ...] = field(default_factory=tuple)

    @property
    def words(self) -> frozenset[str]:
        """Every identifier any selected rule's pre-filter looks for."""
        return frozenset(w for r in self.rules for group in r.prefilter() for w in group)

    def may_fire(self, present: set[str] | frozenset[str], data: bytes) -> bool:
        """Can any rule fire in ``data``, a file containing exactly the words ``present``?"""
        return any(all(present.intersection(group) for group in r.prefilter()) and r.refine(data)
                   for r in self.rules)


def select_rules(
    rules: Iterable[Rule], source: str | Release, target: str | Release, modernize: bool = False
) -> RuleSelection:
    """Rules that move code from ``source`` to ``target``, oldest first; optional ones
    (old spelling still working on ``target``) only when ``modernize``."""
    src, dst = parse_release(source), parse_release(target)
    if dst < src:
        raise ValueError(f"--to {dst} is older than --from {src}; downgrades are not supported")
    applicable = sorted((r for r in rules if r.applies(src, dst)), key=lambda r: r.since)
    chosen = tuple(r for r in applicable if modernize or not r.optional_on(dst))
    deferred = tuple(r for r in applicable if not modernize and r.optional_on(dst))
    return RuleSelection(src, dst, chosen, deferred)


def resolve_rename(rules: Sequence[Rule], qualname: str) -> str:
    """Apply every rename rule in release order (chains compose: 2.8 -> 2.9 -> 2.14)."""
    for rule in rules:
        if isinstance(rule, RenameRule):
            renamed = rule.rename(qualname)
            if renamed is not None:
                qualname = renamed
    return qualname
