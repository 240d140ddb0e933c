"""Size templates: one program for a kernel structure over a range of its
run-time size, bound at each launch instead of planned.

A dynamic-shape decode meets a new KV length every token. Within a size bucket
(:mod:`~spyre_adapter.scheduler.size_buckets`) the planner makes the same
choices and builds programs of one structure: the same instructions, cores,
loops and allocations, whose integers - DRAM offsets, strides and extents,
vector ranges, byte counts - move with the size. A :class:`SizeTemplate` holds
that program once, each integer an affine function ``a + b * size``, and binds
a size by evaluating them: no search, no build.

How a template is made, from three programs the planner builds: at two
adjacent sizes ``s`` and ``s + 1`` of a bucket (a decode's first two there) and
at the bucket's top ``t``:

* the three must have one structure (every field equal but the integers);
* each integer's slope is its step from ``s`` to ``s + 1``, and the line must
  land on its value at ``t``: integers that are steps (tile counts, ceilings)
  or quadratic in the size (an L x L score matrix) miss it and no template is
  made. Sampling two adjacent sizes and the far end is what makes this test
  strict: a step function is flat between adjacent sizes or jumps there, and
  either way its line misses the far end unless the function is a line there;
* LX addresses come from the allocator, which packs allocations aligned to
  sticks: they are not affine. The template places every allocation where the
  program at ``t`` placed it; each allocation at a smaller size holds no more
  bytes, so the placement is the top program's, with its lifetimes.

The second size planned in a bucket tries, once: a kernel whose program changes
structure within the bucket (a tile that no longer fits LX at the top, a grid
that divides the size over the cores) is planned per size as before.

When the top's program does not continue the adjacent pair, the size below
the top is tried as ``t`` once: a bucket of the size symbol whose tensors are
one longer (a KV cache of ``s + 1`` rows) crosses a tile boundary at its top
only. At the first size of the next bucket, the template is carried on
(:meth:`SizeTemplates.extend`): its two highest sizes, bound, are the adjacent
pair and only the new top is planned. The planner also prefers, within its estimates' spread, divisions that
keep one structure over a bucket (:func:`~spyre_adapter.scheduler.loops.plan_group`).

The template covers ``[s, t]``. A bound program is checked on its first launch
like any program (every static rule, LX stamps) and its outputs are compared
with the kernel's reference semantics (see
:class:`~spyre_adapter.emulator.executable.Planned`): should a binding ever
compute other numbers, that launch falls back to the host, announced, and the
template is dropped.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Callable
from typing import Any

import sympy

from spyre_adapter.model.program import Alloc, Lx, Program

__all__ = ["SizeTemplate", "SizeTemplates", "fit", "TemplateMismatch"]

#: Marks an integer leaf in a structure signature.
_INT = object()
#: Marks a float of the plan's metadata (estimates): not compared, taken from the first sample.
_PLAN_FLOAT = object()
#: The numbers in a label (an allocation's ``buf4[0:576]``, a tile epilogue's
#: ``epilogue_1x18_float32``): integers of the template too.
_DIGITS = re.compile(r"(\d+)")


class TemplateMismatch(ValueError):
    """The sampled programs do not make a template (the message says why);
    ``at_top``: the two adjacent sizes agree and the top's program does not
    continue them."""

    def __init__(self, message: str, at_top: bool = False) -> None:
        super().__init__(message)
        self.at_top = at_top


def _label(text: str) -> tuple[tuple[str, ...], list[int]]:
    """A label's text around its numbers, and the numbers (walked and rebuilt alike)."""
    parts = _DIGITS.split(text)
    return tuple(parts[0::2]), [int(x) for x in parts[1::2]]


@functools.lru_cache(maxsize=None)
def _field_names(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(cls))


@functools.lru_cache(maxsize=None)
def _init_names(cls: type) -> tuple[str, ...] | None:
    """The fields ``cls``'s constructor takes, in order; None when some field is
    not one of them (rebuilt with :func:`dataclasses.replace` then)."""
    names = tuple(f.name for f in dataclasses.fields(cls) if f.init)
    return names if names == _field_names(cls) else None


def _walk(o: Any, sig: list[Any], ints: list[int], lx: list[bool], in_plan: bool, lx_addr: bool) -> None:
    """Append ``o``'s structure to ``sig`` and its integers to ``ints`` (with
    whether each is an LX address), in a fixed order :func:`_compile` follows."""
    if o is None or isinstance(o, (bool, str)):
        sig.append(o)
    elif isinstance(o, int):
        sig.append(_INT)
        ints.append(o)
        lx.append(lx_addr)
    elif isinstance(o, float):
        sig.append(_PLAN_FLOAT if in_plan else o)
    elif isinstance(o, sympy.Integer):  # in loop bodies the planner made for a tile (a matmul's epilogue)
        sig.append(_INT)
        ints.append(int(o))
        lx.append(False)
    elif isinstance(o, sympy.Basic) and o.args:
        sig.append(o.func)
        sig.append(len(o.args))
        for x in o.args:
            _walk(x, sig, ints, lx, in_plan, False)
    elif isinstance(o, tuple):
        sig.append(len(o))
        for x in o:
            _walk(x, sig, ints, lx, in_plan, False)
    elif dataclasses.is_dataclass(o) and not isinstance(o, type):
        cls = type(o)
        sig.append(cls)
        addr_owner = cls is Lx or cls is Alloc
        for name in _field_names(cls):
            v = getattr(o, name)
            if name == "name" and isinstance(v, str):
                texts, numbers = _label(v)
                sig.append(texts)
                ints.extend(numbers)
                lx.extend(False for _ in numbers)
                continue
            _walk(v, sig, ints, lx, in_plan, addr_owner and name == "addr")
    else:  # opaque (sympy numbers, enums): equal across samples or no template
        sig.append(o)


def _flatten(p: Program) -> tuple[list[Any], list[int], list[bool], int, int]:
    """A program's structure signature, integers and LX-address flags, and where
    the plan's part of each starts (its metadata: how the program was chosen). The
    kernel is compared whole (the planner hands the same object back for every
    size); loop bodies are walked, sympy integers included (a tile's epilogue)."""
    sig: list[Any] = [p.kernel, p.name, p.kind, p.version]
    ints: list[int] = []
    lx: list[bool] = []
    for name in _MOVING_FIELDS:
        _walk(getattr(p, name), sig, ints, lx, False, False)
    sig_at, int_at = len(sig), len(ints)
    _walk(p.plan, sig, ints, lx, True, False)
    return sig, ints, lx, sig_at, int_at


#: The fields of a program whose integers a template binds (then its plan's).
_MOVING_FIELDS = ("cores", "bodies", "sizes", "workspace", "lx_in", "lx_out")

# A compiled rebuild: only subtrees holding an integer that is not the first
# sample's are rebuilt at a binding; the rest are the first sample's objects.
# Node forms: ("k", obj) keep; ("i", slot) integer; ("t", nodes) tuple;
# ("d", cls, args, ((index, node), ...)) dataclass built from its fields' values,
# those at the indices rebuilt ("r", obj, ((field, node), ...): by
# dataclasses.replace, for a class with fields its constructor does not take);
# ("s", texts, slots) an allocation label with its numbers rebound; ("I", slot)
# a sympy integer; ("y", func, nodes) a sympy expression rebuilt from its args.
_Node = tuple[Any, ...]


def _compile(o: Any, slots: list[int], moving: list[bool], in_plan: bool = False) -> _Node:
    """The rebuild tree of ``o`` (walked in :func:`_walk`'s order; ``slots`` is
    the next integer's index, in a one-element list)."""
    if o is None or isinstance(o, (bool, str, float)):
        return ("k", o)
    if isinstance(o, (int, sympy.Integer)):
        i = slots[0]
        slots[0] += 1
        return ("k", o) if not moving[i] else ("I", i) if isinstance(o, sympy.Integer) else ("i", i)
    if isinstance(o, sympy.Basic) and o.args:
        nodes = [_compile(x, slots, moving, in_plan) for x in o.args]
        return ("y", o.func, tuple(nodes)) if any(n[0] != "k" for n in nodes) else ("k", o)
    if isinstance(o, tuple):
        nodes = [_compile(x, slots, moving, in_plan) for x in o]
        return ("t", tuple(nodes)) if any(n[0] != "k" for n in nodes) else ("k", o)
    if dataclasses.is_dataclass(o) and not isinstance(o, type):
        changed = []
        for name in _field_names(type(o)):
            v = getattr(o, name)
            if name == "name" and isinstance(v, str):
                texts, numbers = _label(v)
                at = list(range(slots[0], slots[0] + len(numbers)))
                slots[0] += len(at)
                if any(moving[i] for i in at):
                    changed.append((name, ("s", texts, tuple(at))))
                continue
            n = _compile(v, slots, moving, in_plan)
            if n[0] != "k":
                changed.append((name, n))
        if not changed:
            return ("k", o)
        # rebuilt by the constructor from the fields' values (dataclasses.replace
        # would look the fields up again at every binding)
        names = _init_names(type(o))
        if names is None:
            return ("r", o, tuple(changed))
        args = tuple(getattr(o, n) for n in names)
        return ("d", type(o), args, tuple((names.index(name), n) for name, n in changed))
    return ("k", o)


def _build(node: _Node, vals: list[int]) -> Any:
    tag = node[0]
    if tag == "k":
        return node[1]
    if tag == "i":
        return vals[node[1]]
    if tag == "I":
        return sympy.Integer(vals[node[1]])
    if tag == "y":
        return node[1](*(_build(n, vals) for n in node[2]))
    if tag == "t":
        return tuple(_build(n, vals) for n in node[1])
    if tag == "s":
        texts, at = node[1], node[2]
        return "".join(t + (str(vals[i]) if k < len(at) else "") for k, (t, i) in
                       enumerate(zip(texts, (*at, -1))))
    if tag == "r":
        return dataclasses.replace(node[1], **{name: _build(n, vals) for name, n in node[2]})
    args = list(node[2])
    for i, n in node[3]:
        args[i] = _build(n, vals)
    return node[1](*args)


@dataclasses.dataclass(eq=False)
class SizeTemplate:
    """A program over sizes ``lo..hi`` of one run-time size (see the module
    docstring): :meth:`bind` gives the program at one of them."""

    lo: int
    hi: int
    #: the program at ``lo``: every object no integer of which moves is shared with it
    first: Program
    #: integers at ``lo`` (LX addresses: the top program's) and their steps per unit of size
    base: tuple[int, ...]
    slope: tuple[int, ...]
    _tree: dict[str, _Node] = dataclasses.field(repr=False, default_factory=dict)

    def covers(self, size: int) -> bool:
        """Whether ``size`` is in the template's range."""
        return self.lo <= size <= self.hi

    def bind(self, size: int) -> Program:
        """The program at ``size`` (in the range)."""
        if not self.covers(size):
            raise ValueError(f"size {size} is outside the template's range {self.lo}..{self.hi}")
        d = size - self.lo
        vals = [b + s * d for b, s in zip(self.base, self.slope)]
        fields = {name: _build(node, vals) for name, node in self._tree.items()}
        return dataclasses.replace(self.first, **fields) if fields else self.first


def fit(at_lo: Program, next_up: Program, at_hi: Program, lo: int, hi: int) -> SizeTemplate:
    """The template over ``lo..hi`` from the programs at ``lo``, ``lo + 1`` and
    ``hi`` (``lo + 1 < hi``); :class:`TemplateMismatch` when they do not make one."""
    if not lo + 1 < hi:
        raise TemplateMismatch(f"no sizes between {lo + 1} and {hi} to bind")
    sig_a, a, lx, sig_at, int_at = _flatten(at_lo)
    sig_b, b, _, _, _ = _flatten(next_up)
    sig_c, c, _, sig_at_c, int_at_c = _flatten(at_hi)
    if len(a) != len(b) or sig_a != sig_b:
        raise TemplateMismatch("the programs at adjacent sizes differ in structure")
    if (sig_at, int_at) != (sig_at_c, int_at_c) or sig_a[:sig_at] != sig_c[:sig_at]:
        raise TemplateMismatch("the program at the top of the range has another structure", at_top=True)
    slope = [y - x for x, y in zip(a, b)]
    base = list(a)
    for i, is_lx in enumerate(lx):
        if is_lx:  # the top program's placement (see the module docstring)
            base[i], slope[i] = c[i], 0
        elif a[i] + slope[i] * (hi - lo) != c[i]:
            if i < int_at:
                raise TemplateMismatch("an integer of the program is not affine in the size over the range", at_top=True)
            # The plan's record of how the program was chosen (tile estimates
            # rounded to classes of sizes, candidate counts) need not be affine:
            # such a number stays the first program's.
            slope[i] = 0
    moving = [s != 0 or x != y for s, x, y in zip(slope, base, a)]
    slots = [0]
    tree: dict[str, _Node] = {}
    for name in _MOVING_FIELDS:
        node = _compile(getattr(at_lo, name), slots, moving)
        if node[0] != "k":
            tree[name] = node
    node = _compile(at_lo.plan, slots, moving, True)
    if node[0] != "k":
        tree["plan"] = node
    assert slots[0] == len(base)
    return SizeTemplate(lo, hi, at_lo, tuple(base), tuple(slope), tree)


def _fit_below_top(at_lo: Program, next_up: Program, lo: int, top: int,
                   plan_at: Callable[[int], Program]) -> SizeTemplate | None:
    """The template over ``lo..top`` from the adjacent pair and the program
    planned at ``top``; else over ``lo..top - 1`` when only the top breaks the
    line: a bucket of the size symbol whose tensors are one longer (a KV cache of
    s + 1 rows) puts its top one past a tile boundary (65 rows for tiles of 64).
    None when neither makes one."""
    try:
        return fit(at_lo, next_up, plan_at(top), lo, top)
    except TemplateMismatch as exc:
        if not exc.at_top or lo + 4 > top - 1:
            return None
    try:
        return fit(at_lo, next_up, plan_at(top - 1), lo, top - 1)
    except TemplateMismatch:
        return None


class SizeTemplates:
    """The templates of one program cache, by (structure, machine, bucket) key."""

    def __init__(self) -> None:
        self._made: dict[Any, list[SizeTemplate]] = {}
        self._planned: dict[Any, int] = {}
        self._closed: set[Any] = set()
        self._extended: set[Any] = set()

    def find(self, key: Any, size: int) -> SizeTemplate | None:
        """A template of ``key`` covering ``size``."""
        return next((t for t in self._made.get(key, ()) if t.covers(size)), None)

    def make(self, key: Any, size: int, top: int, at_size: Program, plan_at: Callable[[int], Program],
             cached_at: Callable[[int], Program | None] = lambda size: None) -> SizeTemplate | None:
        """Try a template of ``key`` over ``size..top``, once per key; ``plan_at``
        plans one size, ``cached_at`` gives one already planned (None: not). Only
        the second size planned under a key tries: sizes met once (a prompt's
        length) pay nothing, and a decode planned the size before the token
        before - the adjacent pair, when cached, so only the top is planned. None
        when no template is made."""
        self._planned[key] = seen = self._planned.get(key, 0) + 1
        if seen < 2 or key in self._closed or size + 4 > top:
            return None
        self._closed.add(key)
        before = cached_at(size - 1)
        if before is not None:
            size, at_size, nxt = size - 1, before, at_size
        else:
            nxt = plan_at(size + 1)
        t = _fit_below_top(at_size, nxt, size, top, plan_at)
        if t is not None:
            self._made.setdefault(key, []).append(t)
        return t

    def extend(self, key: Any, below: Any, size: int, top: int, plan_at: Callable[[int], Program]) -> SizeTemplate | None:
        """At the first size met in a bucket (``key``, top ``top``), the template
        of the bucket below (templates key ``below``) carried on, once per key: its
        two highest sizes bound are the adjacent pair, and the top is planned - one
        program planned for the bucket instead of its first two sizes and the top.
        None when the bucket below has no template or the top does not continue it."""
        if key in self._extended or key in self._made:
            return None
        self._extended.add(key)
        prev = max(self._made.get(below, ()), key=lambda t: t.hi, default=None)
        if prev is None or not prev.lo < prev.hi - 1 or not prev.hi < size <= top or top - prev.hi < 4:
            return None
        t = _fit_below_top(prev.bind(prev.hi - 1), prev.bind(prev.hi), prev.hi - 1, top, plan_at)
        if t is None or not t.covers(size):
            return None
        self._made.setdefault(key, []).append(t)
        return t

    def withdraw(self, key: Any, t: SizeTemplate) -> None:
        """Stop binding from ``t`` (a binding computed numbers the reference did not)."""
        self._made[key] = [x for x in self._made.get(key, ()) if x is not t]
        self._closed.add(key)

    def clear(self) -> None:
        """Forget every template."""
        self._made.clear()
        self._planned.clear()
        self._closed.clear()
        self._extended.clear()
