"""Happens-before over one program: which steps of different cores the
program's own synchronisation orders.

Cores are ordered only by what the hardware does: a barrier releases when every
core whose stream holds its tag has arrived (tags are matched, not counted), and
a ring receive starts after its send. Each core's stream is cut into segments at
its synchronisation steps; each segment carries a vector clock: entry ``j`` is
how many of core ``j``'s segments are known to have finished when it starts
(its own entry is its own segment index). Step ``a`` of core ``i`` in segment
``s`` happens before a step of core ``j != i`` in segment ``t`` exactly when
``clock(j, t)[i] > s``; two steps of one core are ordered by the stream.

The order is derived by running the barrier and ring rules over the streams (the
same rules the emulator's rounds follow), so a program that would deadlock is an
error here too. The DRAM race rule (:mod:`.rules`) and the emulator's check of
data-dependent transfers both ask this order whether two accesses are concurrent.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

import numpy as np

from spyre_adapter.model import isa
from spyre_adapter.model.errors import EmulatorError
from spyre_adapter.model.program import Program, ProgramMemo

__all__ = ["Order", "order_of"]


class Order:
    """The happens-before order of one program's steps (see the module docstring)."""

    def __init__(self, cores: Sequence[int], segment: dict[int, np.ndarray], clocks: dict[int, np.ndarray]) -> None:
        #: the cores with a stream, in the program's order; a clock's entries follow it
        self.cores = tuple(cores)
        self.slot = {c: k for k, c in enumerate(self.cores)}
        #: per core, the segment of each step
        self.segment = segment
        #: per core, (segments, cores) array: the vector clock of each segment
        self.clocks = clocks

    def segment_of(self, core: int, step: int) -> int:
        """The segment of step ``step`` of ``core``."""
        return int(self.segment[core][step])

    def clock(self, core: int, seg: int) -> np.ndarray:
        """The vector clock of segment ``seg`` of ``core``."""
        return self.clocks[core][seg]

    def before(self, a: tuple[int, int], b: tuple[int, int]) -> bool:
        """Whether segment ``a`` = (core, segment) happens before segment ``b``."""
        (ca, sa), (cb, sb) = a, b
        if ca == cb:
            return sa < sb
        return bool(self.clocks[cb][sb][self.slot[ca]] > sa)

    def concurrent(self, a: tuple[int, int], b: tuple[int, int]) -> bool:
        """Whether neither of segments ``a`` and ``b`` happens before the other (one core: never)."""
        return a[0] != b[0] and not self.before(a, b) and not self.before(b, a)

    def concurrent_matrix(self, blocks: Sequence[tuple[int, int]]) -> np.ndarray:
        """``[i, j]``: whether segments ``blocks[i]`` and ``blocks[j]`` are concurrent."""
        if not blocks:
            return np.zeros((0, 0), dtype=bool)
        core = np.array([c for c, _ in blocks])
        seg = np.array([s for _, s in blocks])
        slot = np.array([self.slot[c] for c in core])
        clk = np.stack([self.clocks[c][s] for c, s in blocks])      # (n, cores)
        known = clk[:, slot]                                           # [j, i]: what j knows of i's core
        before = known.T > seg[:, None]                                # [i, j]: i before j
        return (core[:, None] != core[None, :]) & ~before & ~before.T

    def describe(self, core: int, step: int) -> str:
        """Where a step lies in the order, for error messages."""
        return f"core {core} step {step} (segment {self.segment_of(core, step)})"


#: Orders of live programs (an Order is read-only): the planner's check and the
#: program's checked first launch both need it.
_ORDERS = ProgramMemo()


def order_of(p: Program) -> Order:
    """The happens-before order of ``p``'s steps; an :class:`EmulatorError` when
    its synchronisation deadlocks (a barrier some core never reaches, a receive
    whose send never comes). Computed once per program."""
    got = _ORDERS.get(p)
    if got is None:
        got = _order_of(p)
        _ORDERS.put(p, got)
    return got


def _order_of(p: Program) -> Order:
    streams = {c.core: c.steps for c in p.cores if c.instrs}
    cores = list(streams)
    slot = {c: k for k, c in enumerate(cores)}
    n = len(cores)
    members: dict[int, set[int]] = defaultdict(set)
    for c, s in streams.items():
        for ins in s:
            if isa.step(ins).sync == "barrier":
                members[ins.tag].add(c)
    vc = {c: np.zeros(n, dtype=np.int64) for c in cores}
    seg_now = dict.fromkeys(cores, 0)
    clocks: dict[int, list[np.ndarray]] = {c: [vc[c].copy()] for c in cores}
    segment = {c: np.zeros(len(s), dtype=np.int64) for c, s in streams.items()}
    pcs = dict.fromkeys(cores, 0)
    mailbox: dict[tuple[int, int], np.ndarray] = {}
    waiting: dict[int, set[int]] = defaultdict(set)

    def finish(c: int, carried: np.ndarray | None) -> None:
        """Close core ``c``'s segment; the next one knows ``carried`` as well."""
        seg_now[c] += 1
        if carried is not None:
            np.maximum(vc[c], carried, out=vc[c])
        vc[c][slot[c]] = seg_now[c]
        clocks[c].append(vc[c].copy())

    def done_so_far(c: int) -> np.ndarray:
        """What core ``c`` tells whoever it orders before itself: everything up to its current segment."""
        out = vc[c].copy()
        out[slot[c]] = seg_now[c] + 1
        return out

    active = set(cores)
    while active:
        moved = False
        for c in list(active):
            s, pc = streams[c], pcs[c]
            while pc < len(s):
                ins = s[pc]
                sync = isa.step(ins).sync
                if sync == "recv":
                    msg = mailbox.pop((ins.tag, c), None)
                    if msg is None:
                        break
                    finish(c, msg)
                elif sync == "barrier":
                    if c in waiting[ins.tag]:
                        break
                    waiting[ins.tag].add(c)
                    if not waiting[ins.tag] >= members[ins.tag]:
                        segment[c][pc] = seg_now[c]
                        break
                    # the last member arrives: every member leaves knowing what all of them did
                    joint = np.max(np.stack([done_so_far(m) for m in waiting[ins.tag]]), axis=0)
                    for m in waiting.pop(ins.tag):
                        segment[m][pc if m == c else pcs[m]] = seg_now[m]
                        finish(m, joint)
                        if m != c:
                            pcs[m] += 1
                    pc += 1
                    moved = True
                    continue
                segment[c][pc] = seg_now[c]
                if sync == "send":
                    msg = done_so_far(c)
                    for peer in ins.peers:
                        mailbox[(ins.tag, peer)] = msg
                    finish(c, None)
                pc += 1
                moved = True
            pcs[c] = pc
            if pc >= len(s):
                active.discard(c)
        # A core parked at a barrier is active but cannot move; the loop ends when
        # no core moves in a whole pass.
        if not moved:
            break
    stuck = [c for c in cores if pcs[c] < len(streams[c])]
    if stuck:
        c = stuck[0]
        what = ", ".join(f"core {k} at step {pcs[k]} ({isa.describe(streams[k][pcs[k]], p.bodies)[0]})" for k in stuck[:4])
        raise EmulatorError("deadlock", p.name, c, pcs[c], "-", f"no core can proceed: {what}")
    return Order(cores, segment, {c: np.stack(v) for c, v in clocks.items()})


def concurrent_sets(order: Order, blocks: Sequence[tuple[int, int]],
                    writes: Sequence[bool]) -> tuple[list[list[int]], list[tuple[int, int]]]:
    """How to compare a buffer's accesses grouped in segments ``blocks`` (core,
    segment; ``writes``: whether the segment writes the buffer): classes of
    segments with the same vector clock, which are pairwise concurrent (a
    barrier every core holds makes such classes), and the pairs of segments of
    different classes the order leaves concurrent, at least one of them writing.
    Indices into ``blocks``."""
    classes: dict[bytes, list[int]] = defaultdict(list)
    for k, b in enumerate(blocks):
        classes[order.clock(*b).tobytes()].append(k)
    groups = list(classes.values())
    w = np.asarray(writes, dtype=bool)
    if len(groups) < 2 or not w.any():
        return groups, []
    cls = np.empty(len(blocks), dtype=np.int64)
    for c, members in enumerate(groups):
        cls[members] = c
    conc = order.concurrent_matrix(blocks)
    conc &= cls[:, None] != cls[None, :]
    conc &= w[:, None] | w[None, :]
    return groups, [(int(i), int(j)) for i, j in zip(*np.nonzero(np.triu(conc)))]
