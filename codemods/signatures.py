"""Parameter changes between two releases of a function or method, from the API index,
and what they mean for a call site or for an overriding definition.

Everything here works on parameter lists only (:class:`~spyre_codemods.api_index.Signature`
without ``self``); the upgrade transform turns the plans into edits or TODOs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from .api_index import Param, Signature

__all__ = ["ParamChanges", "compare", "mechanical_rename", "CallPlan", "plan_call", "OverridePlan", "plan_override"]

_POSITIONAL = ("posonly", "positional")


def _names(params: Sequence[Param]) -> list[str]:
    return [p.name for p in params if p.kind not in ("varargs", "varkw")]


@dataclass(frozen=True)
class ParamChanges:
    """How the parameters of one callable changed from ``old`` to ``new``."""

    old: tuple[Param, ...]
    new: tuple[Param, ...]
    renamed: dict[str, str] = field(default_factory=dict)
    removed: tuple[str, ...] = ()
    added: tuple[str, ...] = ()
    #: old names of the renames that are mechanical (see :func:`mechanical_rename`)
    mechanical: frozenset[str] = frozenset()

    @property
    def changed(self) -> bool:
        return self.old != self.new


def _open(params: Sequence[Param]) -> bool:
    """Takes ``*args`` or ``**kwargs``: what it accepts cannot be listed."""
    return any(p.kind in ("varargs", "varkw") for p in params)


def mechanical_rename(old: Param, new: Param) -> bool:
    """A rename the index proves is one: same slot (the caller checked), same kind, the same
    default, and names that are one spelling grown or shortened (the shorter's letters in
    order in the longer: ``numer`` -> ``number``) or share a word (``strict_sum`` ->
    ``strict_reduction``). ``compile_only`` -> ``do_link`` (opposite meanings) is neither."""
    if old.kind != new.kind or old.default != new.default:
        return False
    short, long_ = sorted((old.name, new.name), key=len)
    letters = iter(long_)
    if len(short) > 2 and all(c in letters for c in short):  # `in` on an iterator consumes it: in order
        return True
    return bool({w for w in old.name.split("_") if len(w) > 2} & {w for w in new.name.split("_") if len(w) > 2})


def compare(old: Signature, new: Signature) -> ParamChanges:
    """Renames are paired by position: a parameter gone from index ``i`` whose slot
    now holds a new name of the same kind (``strict_sum`` -> ``strict_reduction``)."""
    o, n = old.bound_params, new.bound_params
    old_names, new_names = set(_names(o)), set(_names(n))
    gone = [p for p in o if p.name in old_names - new_names]
    fresh = [p for p in n if p.name in new_names - old_names]
    renamed: dict[str, str] = {}
    mechanical: set[str] = set()
    for p in gone:
        index = o.index(p)
        slot = n[index] if index < len(n) else None
        if slot is not None and slot in fresh and (slot.kind in _POSITIONAL) == (p.kind in _POSITIONAL) \
                and (slot.default is None) == (p.default is None):
            renamed[p.name] = slot.name
            if mechanical_rename(p, slot):
                mechanical.add(p.name)
    removed = tuple(p.name for p in gone if p.name not in renamed)
    added = tuple(p.name for p in fresh if p.name not in renamed.values())
    return ParamChanges(o, n, renamed, removed, added, frozenset(mechanical))


@dataclass
class CallPlan:
    """Edits for one call: positional arguments (by index) to pass by keyword, and
    problems that need a human, and keywords to rename.

    Only edits whose meaning the index proves are made: a parameter that kept its name
    but moved or became keyword-only, and a mechanical rename (``numer=`` -> ``number=``,
    see :func:`mechanical_rename`; a positional argument in its place needs nothing). Any
    other parameter paired with a new name at the same position is *probably* a rename,
    but the index cannot tell ``compile_only`` -> ``do_link`` (same slot, opposite
    meaning) from one: a TODO."""

    to_keyword: dict[int, str] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    rename_keywords: dict[str, str] = field(default_factory=dict)

    @property
    def edits(self) -> bool:
        return bool(self.to_keyword or self.rename_keywords)


def plan_call(changes: ParamChanges, positional: int, keywords: Sequence[str]) -> CallPlan:
    """Plan for a call passing ``positional`` arguments then ``keywords`` (no ``*``/``**``)."""
    plan = CallPlan()
    old_pos = [p for p in changes.old if p.kind in _POSITIONAL]
    new_params = {p.name: p for p in changes.new}
    new_pos = [p.name for p in changes.new if p.kind in _POSITIONAL]
    new_open_kw = any(p.kind == "varkw" for p in changes.new)
    passed: set[str] = set()
    convert_from: int | None = None
    unmappable = False
    for i in range(positional):
        if i >= len(old_pos):
            if not any(p.kind == "varargs" for p in changes.old):
                plan.problems.append(f"{positional} positional arguments, the old signature took {len(old_pos)}")
            break
        name = old_pos[i].name
        if name in changes.renamed and name not in changes.mechanical:
            plan.problems.append(f"argument #{i + 1} was {name}, its place is now {changes.renamed[name]}")
        new_name = changes.renamed.get(name, name)
        if name in changes.removed or new_name not in new_params:
            plan.problems.append(f"argument #{i + 1} ({name}) is no longer accepted")
            unmappable = True
            continue
        passed.add(new_name)
        if convert_from is None and (i >= len(new_pos) or new_pos[i] != new_name):
            convert_from = i  # the parameter moved or became keyword-only
        if convert_from is not None:
            plan.to_keyword[i] = new_name
    for keyword in keywords:
        if keyword in changes.renamed and keyword in changes.mechanical:
            plan.rename_keywords[keyword] = changes.renamed[keyword]
            passed.add(changes.renamed[keyword])
        elif keyword in changes.renamed and not new_open_kw:
            plan.problems.append(f"keyword {keyword}= is gone; its place is now {changes.renamed[keyword]}")
            passed.add(changes.renamed[keyword])
        elif keyword in changes.removed and not new_open_kw:
            plan.problems.append(f"keyword {keyword}= is no longer accepted")
        else:
            passed.add(keyword)
    if unmappable and plan.to_keyword:
        # a positional argument that cannot be named would follow keywords: no edits
        plan.to_keyword.clear()
    missing = [p.name for p in changes.new if p.name in changes.added and p.default is None
               and p.kind not in ("varargs", "varkw") and p.name not in passed]
    if missing:
        plan.problems.append(f"new required parameter(s) not passed: {', '.join(missing)}")
    return plan


@dataclass
class OverridePlan:
    """Edits for a method that overrides an indexed one: parameters to add (with the
    base's default), and problems that need a human."""

    add: list[Param] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def plan_override(own: Sequence[Param], base: Signature, base_old: Signature | None) -> OverridePlan:
    """Compare an override's own parameters (without ``self``) with the base method's
    on the target release (``base_old``: on the source release, for renames).

    Required positional parameters are matched by position (Inductor passes them
    positionally, whatever they are called); parameters with a default and keyword-only
    ones by name (they may be passed by keyword)."""
    plan = OverridePlan()
    target = base.bound_params
    if _open(own) or _open(target):
        return plan  # *args/**kwargs on either side: nothing can be checked
    own_pos = [p for p in own if p.kind in _POSITIONAL]
    own_names = set(_names(own))
    base_pos_names = [p.name for p in target if p.kind in _POSITIONAL]
    shifted = [p.name for i, p in enumerate(own_pos)
               if p.name in base_pos_names and base_pos_names.index(p.name) != i]
    if shifted:
        # the override's positional parameters are not the base's in the same places: a
        # parameter added at the end would not line up either; only a human can say
        plan.problems.append(f"parameter(s) {', '.join(shifted)} not in the base's position(s)")
        return plan
    renamed = compare(base_old, base).renamed if base_old is not None else {}
    for old, new in renamed.items():
        if old in own_names and new not in own_names:
            plan.problems.append(f"parameter {old} is now called {new}")
    base_pos = [p for p in target if p.kind in _POSITIONAL]
    target_names = set(_names(target))
    for i, p in enumerate(base_pos):
        if p.default is None:
            if i >= len(own_pos):
                plan.problems.append(f"takes {sum(1 for q in base_pos if q.default is None)} positional arguments "
                                     f"({', '.join(q.name for q in base_pos if q.default is None)})")
                break
        elif p.name not in own_names and p.name not in renamed.values():
            if i < len(own_pos) and own_pos[i].name not in target_names:
                # the override's own parameter in that place already receives the argument
                # when it is passed by position: adding the base's name would duplicate it
                # (flagged only when the base's name is new: the pair worked on the source)
                if base_old is None or p.name not in _names(base_old.bound_params):
                    plan.problems.append(f"parameter {own_pos[i].name} is in the place of the base's {p.name}: "
                                         f"rename it {p.name} if the argument is passed by keyword")
            else:
                plan.add.append(p)
    for p in target:
        if p.kind == "kwonly" and p.name not in own_names and p.name not in renamed.values():
            if p.default is not None:
                plan.add.append(p)
            else:
                plan.problems.append(f"required keyword parameter {p.name} is missing")
    passed = {p.name for p in target}
    for i, p in enumerate(own_pos):
        if p.default is None and i >= len(base_pos):
            plan.problems.append(f"parameter {p.name} is no longer passed")
    for p in own:
        if p.kind == "kwonly" and p.default is None and p.name not in passed and p.name not in renamed:
            plan.problems.append(f"parameter {p.name} is no longer passed")
    return plan
