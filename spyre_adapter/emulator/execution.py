"""One launch of one program: the launch's state (DRAM buffers, run-time sizes,
ring mailbox, data-dependent traffic and writes) and the two orders its steps
run in.

A checked launch runs in rounds (:meth:`Execution.run`): each round, every core
whose next step can start, a ring receive once its send is in the mailbox, a
barrier once every core holding its tag has arrived; runs of consecutive cores
doing the same step run as one batched op. A launch that records its steps
for replay runs them in dependence levels instead (:mod:`.regroup`), where more
cores share each batched op. How a group of steps executes, and how it is
recorded, is each step type's (:mod:`.steps`).
"""

from __future__ import annotations

import functools
from collections import defaultdict
from collections.abc import Iterator, Mapping, MutableMapping, Sequence
from typing import Any

import sympy
import torch

from spyre_shims import index as sidx
from spyre_shims.kernel_ir import LoopKernel
from spyre_shims.reference import Tile

from spyre_adapter.emulator import grouping, regroup
from spyre_adapter.emulator import replay as rp
from spyre_adapter.emulator import steps
from spyre_adapter.emulator.card import Card
from spyre_adapter.emulator.lx_state import LxState
from spyre_adapter.model import isa
from spyre_adapter.model.checker_rules import enabled
from spyre_adapter.model.errors import EmulatorError
from spyre_adapter.model.loop_steps import instructions
from spyre_adapter.model.ordering import Order, concurrent_sets, order_of
from spyre_adapter.model.program import DmaScatter, Lx, Program, itemsize
from spyre_adapter.model.rules import buffer_dtypes

__all__ = ["Execution", "Item"]

#: One step of one core: (core, step index, instruction).
Item = tuple[int, int, Any]


class Execution:
    """One launch of one program."""

    def __init__(self, p: Program, card: Card, buffers: MutableMapping[str, torch.Tensor],
                 sizes: Mapping[sympy.Symbol, int], checking: bool, pe_threads: int = 1,
                 order: Order | None = None) -> None:
        self.p, self.card, self.buffers, self.checking = p, card, buffers, checking
        self.m = card.machine
        self.sizes = dict(sizes)
        self.sizes.update({sidx.index_symbol(k): v for k, v in p.sizes})
        self.dtypes = buffer_dtypes(p)
        self.lx = LxState(card, card.epoch, checking, p.name, self.dtypes)
        self.mailbox: dict[tuple[int, int], torch.Tensor] = {}
        #: DRAM bytes of data-dependent transfers by (core, step)
        self.dynamic_bytes: dict[tuple[int, int], int] = {}
        #: data-dependent DRAM accesses by buffer: (core, step, element indices)
        self.dyn_writes: dict[str, list[tuple[int, int, torch.Tensor]]] = defaultdict(list)
        self.dyn_reads: dict[str, list[tuple[int, int, torch.Tensor]]] = defaultdict(list)
        #: which steps of different cores the program orders (checked launches)
        self.order = order if order is not None or not checking else order_of(p)
        #: the steps executed so far, as replayable thunks (an unchecked recording launch)
        self.record: list[rp.Thunk] | None = None
        self.pe_threads = pe_threads
        #: ring messages a recording launch copies from the sender's LX: (tag, receiver) -> (sender, view)
        self.direct: dict[tuple[int, int], tuple[int, Lx]] = {}

    # ---------------------------------------------------------- what steps ask of the launch
    @functools.cached_property
    def scattered(self) -> frozenset[str]:
        """Buffers some step scatters to without accumulating: the only ones whose
        gathers the dynamic race rule needs (asked by checked gathers only)."""
        return frozenset(ins.buffer for c in self.p.cores for ins in instructions(c.instrs)
                         if isinstance(ins, DmaScatter) and not ins.accumulate)

    def dram(self, name: str) -> torch.Tensor:
        """A DRAM buffer of the launch (flat)."""
        return self.buffers[name]

    def fail(self, kind: str, core: int, step: int, buffer: str, detail: str) -> EmulatorError:
        """An error naming this launch's kernel."""
        return EmulatorError(kind, self.p.name, core, step, buffer, detail)

    def tile(self, ins: Any, kernel: LoopKernel, red: Any, starts: torch.Tensor | None = None,
             bind: Sequence[tuple[str, int]] = ()) -> Tile:
        """The tile a body step runs over (``bind``: size symbols the step sets)."""
        sizes = dict(self.sizes)
        sizes.update({sidx.index_symbol(k): v for k, v in bind})
        return Tile(kernel, ins.box, sizes, red=red, batch_starts=starts)

    def take(self, key: tuple[int, int]) -> torch.Tensor:
        """The ring message ``key`` (tag, receiving core), removed from the mailbox."""
        data = self.mailbox.pop(key, None)
        if data is None:
            raise self.fail("ring receive before its send", key[1], -1, "ring",
                            f"#{key[0]}: the recorded steps are out of order")
        return data

    # ---------------------------------------------------------- the rounds
    def rounds(self, inbox: Any) -> Iterator[list[Item]]:
        """The round schedule: each round, every core whose next step can start;
        yields its batches, which the caller must run (or account for: a ring
        receive can start once ``(tag, core)`` is in ``inbox``) before resuming."""
        streams = {c.core: c.steps for c in self.p.cores if c.instrs}
        pcs = {c: 0 for c in streams}
        members: dict[int, set[int]] = defaultdict(set)
        for c, s in streams.items():
            for ins in s:
                if isa.step(ins).sync == "barrier":
                    members[ins.tag].add(c)
        waiting: dict[int, set[int]] = defaultdict(set)
        while pcs:
            runnable: list[Item] = []
            for c, pc in pcs.items():
                ins = streams[c][pc]
                sync = isa.step(ins).sync
                if sync == "recv" and (ins.tag, c) not in inbox:
                    continue
                if sync == "barrier":
                    waiting[ins.tag].add(c)
                    continue
                runnable.append((c, pc, ins))
            released = [t for t, cs in waiting.items() if cs and cs >= members[t]]
            for t in released:
                for c in waiting.pop(t):
                    pcs[c] += 1
            if not runnable and not released:
                stuck = ", ".join(f"core {c} at step {pc} ({isa.describe(streams[c][pc], self.p.bodies)[0]})"
                                  for c, pc in list(pcs.items())[:4])
                first = next(iter(pcs))
                raise self.fail("deadlock", first, pcs[first], "-", f"no core can proceed: {stuck}")
            for group in grouping.batches(runnable, steps.batch_key):
                yield group
                for c, pc, _ in group:
                    pcs[c] = pc + 1
            for c in [c for c, pc in pcs.items() if pc >= len(streams[c])]:
                del pcs[c]

    def run(self) -> None:
        """Run the program round by round (a recording launch: in dependence levels)."""
        if self.record is not None:
            for group in self.levelled():
                thunk = steps.record(self, group)
                if thunk is not None:
                    self.record.append(thunk)
                    thunk(self)
        else:
            starts = self._allocation_starts() if self.checking and enabled("stale-lx") else {}
            for group in self.rounds(self.mailbox):
                for c, pc, _ in group if starts else ():
                    pending = starts.get(c)
                    while pending and pending[-1][0] <= pc:
                        _, addr, nbytes = pending.pop()
                        self.lx.reassign(c, addr, nbytes)
                steps.run(self, group)
        self.check_mailbox()
        if self.checking and enabled("dynamic-races"):
            self.dynamic_races()

    def _allocation_starts(self) -> dict[int, list[tuple[int, int, int]]]:
        """Per core, the allocations that start after its first step, last first:
        (step, address, bytes). Bytes an allocation takes over hold nothing for it
        (those holding what an earlier kernel left are not reassigned)."""
        out: dict[int, list[tuple[int, int, int]]] = {}
        held = [(r.core, r.addr, r.addr + (r.hi - r.lo) * itemsize(r.dtype)) for r in self.p.lx_in]
        for c in self.p.cores:
            keep = [(lo, hi) for core, lo, hi in held if core == c.core]
            later = sorted(((a.first, a.addr, a.nbytes) for a in c.alloc_table if a.first > 0
                            and not any(lo < a.addr + a.nbytes and a.addr < hi for lo, hi in keep)), reverse=True)
            if later:
                out[c.core] = later
        return out

    def levelled(self) -> list[list[Item]]:
        """The program's steps regrouped by dependence level (see :mod:`.regroup`),
        from the round order, which the program's own synchronisation makes valid."""
        order: list[Item] = []
        inbox: set[tuple[int, int]] = set()
        for group in self.rounds(inbox):
            for c, _, ins in group:
                sync = isa.step(ins).sync
                if sync == "send":
                    inbox.update((ins.tag, peer) for peer in ins.peers)
                elif sync == "recv":
                    inbox.discard((ins.tag, c))
            order.extend(group)
        numels = {k: v.numel() for k, v in self.buffers.items()}
        lvls = regroup.levels(order, self.p.bodies, self.m, numels, regroup.aliasing(self.buffers), self.direct)
        return regroup.regroup(order, lvls, lambda item: steps.level_key(self, item),
                               lambda item: steps.pool_key(self, item))

    def replay(self, thunks: Sequence[rp.Thunk]) -> None:
        """Run a recorded launch's steps in their order (unchecked launches only)."""
        for step in thunks:
            step(self)
        self.check_mailbox()

    # ---------------------------------------------------------- end of launch
    def check_mailbox(self) -> None:
        """Every ring message sent was received."""
        if self.mailbox:
            (tag, peer), _ = next(iter(self.mailbox.items()))
            raise self.fail("ring send without receive", peer, -1, "ring", f"#{tag} sent to core {peer}, never received")

    def dynamic_races(self) -> None:
        """No data-dependent DRAM access (a gather or a scatter) of one core
        touches an element another core scatters to without an order between
        them (:mod:`spyre_adapter.model.ordering`)."""
        assert self.order is not None
        for buf, writes in self.dyn_writes.items():
            accs = [(c, s, True, idx) for c, s, idx in writes] + [(c, s, False, idx) for c, s, idx in self.dyn_reads.get(buf, ())]
            if len({a[0] for a in accs}) < 2:
                continue
            blocks: dict[tuple[int, int], list] = defaultdict(list)
            for a in accs:
                blocks[(a[0], self.order.segment_of(a[0], a[1]))].append(a)
            keys = list(blocks)
            groups, pairs = concurrent_sets(self.order, keys, [any(a[2] for a in blocks[k]) for k in keys])
            for members in groups:
                ws = [a for k in members for a in blocks[keys[k]] if a[2]]
                self._dyn_conflict(buf, ws, ws)
                rs = [a for k in members for a in blocks[keys[k]] if not a[2]]
                if rs:
                    self._dyn_conflict(buf, rs, ws)
            for i, j in pairs:
                x, y = blocks[keys[i]], blocks[keys[j]]
                self._dyn_conflict(buf, [a for a in x if a[2]], y)
                self._dyn_conflict(buf, [a for a in y if a[2]], [a for a in x if not a[2]])

    def _dyn_conflict(self, buf: str, xs: list, ys: list) -> None:
        """The first element an access of ``xs`` and one of another core in ``ys`` both
        touch, as an error: one sort over every index of both lists (an element is a
        conflict when both lists touch it and more than one core does)."""
        if not xs or not ys:
            return
        el = torch.cat([a[3] for a in xs] + [a[3] for a in ys])
        if el.numel() == 0:
            return
        core = torch.cat([torch.full((a[3].numel(),), a[0], dtype=torch.int32) for a in xs + ys])
        nx = sum(a[3].numel() for a in xs)
        u, inv = torch.unique(el, return_inverse=True)
        in_x = torch.zeros(u.numel(), dtype=torch.bool).index_fill_(0, inv[:nx], True)
        in_y = torch.zeros(u.numel(), dtype=torch.bool).index_fill_(0, inv[nx:], True)
        lo = torch.full((u.numel(),), 1 << 30, dtype=torch.int32).scatter_reduce_(0, inv, core, "amin")
        hi = torch.full((u.numel(),), -1, dtype=torch.int32).scatter_reduce_(0, inv, core, "amax")
        bad = (in_x & in_y & (lo != hi)).nonzero()
        if not bad.numel():
            return
        e = int(u[bad[0, 0]])
        a, b = next((x, y) for x in xs if bool((x[3] == e).any())
                    for y in ys if y[0] != x[0] and bool((y[3] == e).any()))
        what = "both scatter to" if a[2] and b[2] else "one gathers what the other scatters to at"
        raise self.fail("cross-core write conflict" if a[2] and b[2] else "unordered DRAM access", b[0], b[1], buf,
                        f"{what} element {e}: {self.order.describe(a[0], a[1])} and "
                        f"{self.order.describe(b[0], b[1])} are not ordered by any barrier or ring message")
