"""LX allocation: every operand a core's program uses gets a byte range of that
core's scratchpad for the instructions between its first and last use.

Planners build instructions over symbolic :class:`Slot` s; :func:`allocate`
assigns addresses by a linear scan over the stream (first fit, stick aligned)
and rewrites the instructions with concrete :class:`~spyre_adapter.model.program.Lx`
views. A slot may be kept until a later instruction (``hold_until``) so the next
tile's loads land elsewhere and overlap with this tile's compute.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from spyre_adapter.model import isa
from spyre_adapter.model.errors import DoesNotFit
from spyre_adapter.model.program import Alloc, Lx

__all__ = ["Slot", "SlotView", "LxFull", "Arena", "allocate"]


class LxFull(DoesNotFit):
    """The operands live at one point of a core's stream do not fit its LX."""


class Slot:
    """A symbolic LX byte range of one core."""

    __slots__ = ("name", "nbytes", "first", "last", "hold_until", "addr", "fixed")

    def __init__(self, name: str, nbytes: int, fixed: int | None = None) -> None:
        self.name = name
        self.nbytes = max(int(nbytes), 1)
        self.first = -1
        self.last = -1
        self.hold_until = -1
        self.addr = fixed if fixed is not None else -1
        self.fixed = fixed is not None

    def use(self, index: int) -> None:
        """Record a use by instruction ``index`` of the core's stream."""
        if self.first < 0 or index < self.first:
            self.first = index
        self.last = max(self.last, index)

    def view(self, dtype: str, sizes: Sequence[int], strides: Sequence[int] | None = None, offset: int = 0) -> SlotView:
        """A typed view at byte ``offset`` of the slot (row-major strides by default)."""
        if strides is None:
            strides, acc = [], 1
            for n in reversed(sizes):
                strides.insert(0, acc if n > 1 else 0)
                acc *= n
        return SlotView(self, offset, dtype, tuple(int(s) for s in sizes), tuple(int(s) for s in strides))

    def __repr__(self) -> str:
        return f"Slot({self.name}, {self.nbytes} B @ {self.addr})"


@dataclasses.dataclass(frozen=True)
class SlotView:
    """An :class:`Lx` whose address is a slot's plus ``offset`` (known after allocation)."""

    slot: Slot
    offset: int
    dtype: str
    sizes: tuple[int, ...]
    strides: tuple[int, ...]

    def resolve(self) -> Lx:
        """The concrete view."""
        assert self.slot.addr >= 0, f"slot {self.slot.name} not allocated"
        return Lx(self.slot.addr + self.offset, self.dtype, self.sizes, self.strides)

    def sub(self, offset_elems: int, sizes: Sequence[int], strides: Sequence[int], itemsize: int) -> SlotView:
        """A view ``offset_elems`` elements into this one."""
        return SlotView(self.slot, self.offset + offset_elems * itemsize, self.dtype, tuple(sizes), tuple(strides))


class Arena:
    """First-fit byte ranges in ``[0, capacity)`` aligned to ``align``."""

    def __init__(self, capacity: int, align: int, reserved: Sequence[tuple[int, int]] = ()) -> None:
        self.capacity, self.align = capacity, align
        self.used: list[tuple[int, int]] = sorted(reserved)
        self.peak = max((hi for _, hi in self.used), default=0)

    def take(self, nbytes: int) -> int:
        size = -(-nbytes // self.align) * self.align
        at = 0
        for lo, hi in self.used:
            if lo - at >= size:
                break
            at = max(at, -(-hi // self.align) * self.align)
        if at + size > self.capacity:
            raise LxFull(f"{nbytes} B of operands do not fit ({self.in_use()} B in use)",
                         f"{self.capacity} B usable LX per core")
        self.used.append((at, at + size))
        self.used.sort()
        self.peak = max(self.peak, at + size)
        return at

    def place(self, lo: int, hi: int) -> None:
        self.used.append((lo, hi))
        self.used.sort()
        self.peak = max(self.peak, hi)

    def give(self, addr: int) -> None:
        self.used = [(lo, hi) for lo, hi in self.used if lo != addr]

    def in_use(self) -> int:
        return sum(hi - lo for lo, hi in self.used)


def _r(v: Any) -> Any:
    return v.resolve() if isinstance(v, SlotView) else v


def allocate(instrs: Sequence[Any], capacity: int, align: int,
             reserved: Sequence[tuple[int, int]] = (), periodic: bool = False) -> tuple[tuple[Any, ...], tuple[Alloc, ...], int]:
    """Assign every slot the instructions use an address (live from its first to
    its last use, or its ``hold_until``); returns the concrete instructions, the
    allocation table and the peak byte. Raises :class:`LxFull`.

    ``periodic``: a slot takes the address an earlier slot of its name and size
    freed (the most recent), and freed addresses stay with their role, so the
    buffers of a role alternate and a stream that repeats gets an allocation
    that repeats, which folds into a loop (first fit lets short-lived slots take
    the gaps, and the addresses never settle). Costs LX: falls back to first fit
    when it does not fit."""
    if periodic:
        try:
            return _allocate(instrs, capacity, align, reserved, True)
        except LxFull:
            pass
    return _allocate(instrs, capacity, align, reserved, False)


def _allocate(instrs: Sequence[Any], capacity: int, align: int, reserved: Sequence[tuple[int, int]],
              periodic: bool) -> tuple[tuple[Any, ...], tuple[Alloc, ...], int]:
    slots: dict[int, Slot] = {}
    for i, ins in enumerate(instrs):
        for v in isa.views(ins):
            if isinstance(v, SlotView):
                s = v.slot
                s.use(i)
                slots[id(s)] = s
    starts: dict[int, list[Slot]] = {}
    ends: dict[int, list[Slot]] = {}
    arena = Arena(capacity, align, reserved)
    table: list[Alloc] = []
    for s in slots.values():
        if s.fixed:
            arena.place(s.addr, s.addr + s.nbytes)
            table.append(Alloc(s.name, s.addr, s.nbytes, s.first, min(max(s.last, s.hold_until), len(instrs) - 1)))
            continue
        starts.setdefault(s.first, []).append(s)
        ends.setdefault(max(s.last, s.hold_until), []).append(s)
    # periodic: per (name, size), the addresses its slots had and that are free again,
    # kept out of the arena for that role alone (most recently freed last)
    pools: dict[tuple[str, int], list[int]] = {}
    for i in range(len(instrs)):
        for s in sorted(starts.get(i, ()), key=lambda s: -s.nbytes):
            pool = pools.get((s.name, s.nbytes))
            s.addr = pool.pop() if pool else arena.take(s.nbytes)
            table.append(Alloc(s.name, s.addr, s.nbytes, s.first, min(max(s.last, s.hold_until), len(instrs) - 1)))
        for s in ends.get(i, ()):
            if periodic:
                pools.setdefault((s.name, s.nbytes), []).append(s.addr)
            else:
                arena.give(s.addr)
    out = tuple(isa.map_views(ins, _r) for ins in instrs)
    return out, tuple(table), arena.peak
