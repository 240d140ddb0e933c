"""The functional pass: run every core's instructions over that core's LX memory
and the card's DRAM. Every output value comes from executing the program.

The card keeps each core's LX bytes and, per byte, a stamp of when it was
written: reading bytes not written in this launch (or left for it by an earlier
kernel, see :class:`~spyre_adapter.model.program.Resident`) is an error, as is
overwriting bytes an earlier kernel left for a later one. Cores run in rounds,
one instruction each; cores that run the same step on different tiles in a
round run it as one batched op (one torch op over their stacked LX views). An
unchecked launch that records its steps for replay runs them in dependence
levels instead (:mod:`.regroup`), where more cores share each batched op.

What is checked, each violation an :class:`EmulatorError` naming the kernel,
core, step and buffer: LX views inside the usable capacity and aligned; DMA
LX addresses on stick boundaries; DMA regions inside their tensor; per-core
span of each tensor; reads of unwritten LX; two cores writing the same DRAM
bytes, or parts of one stick, between the same barriers; a core reading DRAM
another core writes between the same barriers; ring transfers without a
partner; barriers some core never reaches.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Iterator, Mapping, MutableMapping, Sequence
from typing import Any

import numpy as np
import sympy
import torch

from spyre_shims import index as sidx
from spyre_shims.kernel_ir import LoopKernel
from spyre_shims.ops import torch_dtype
from spyre_shims.reference import (KernelFault, Tile, combine_partials, compile_evaluation, evaluate, merge_partials,
                                   partial_dtypes)

from spyre_adapter.emulator import grouping, lx_memory, regroup
from spyre_adapter.emulator import replay as rp
from spyre_adapter.emulator.card import HELD, Card, Where, core_range, where_of
from spyre_adapter.emulator.lx_memory import LxMemory, NotBatchable
from spyre_adapter.emulator.replay import Replay, put
from spyre_adapter.model.bodies import index_cone
from spyre_adapter.model.program import (AddrGen, Barrier, Combine, DmaGather, DmaLoad, DmaScatter, DmaStore,
                                         Instruction, Lx, Pe, Program, Region, RingRecv, RingSend, Vec, describe)
from spyre_adapter.model.rules import EmulatorError, buffer_dtypes, overlaps, static_check
from spyre_adapter.model.traffic import StickMarks

__all__ = ["EmulatorError", "Card", "Replay", "RunStats", "execute", "static_check"]

@dataclasses.dataclass
class RunStats:
    """What one execution measured: DRAM bytes of data-dependent transfers by
    (core, step), and per core the highest LX byte its instructions touched."""

    dynamic_bytes: dict[tuple[int, int], int]
    lx_peak: dict[int, int]


# ------------------------------------------------------------------ execution

#: The data-moving instruction kinds and the method of :class:`_Execution` that runs each.
_HANDLERS: dict[type, str] = {DmaLoad: "dma_load", DmaStore: "dma_store", DmaGather: "dma_gather",
                              DmaScatter: "dma_scatter", RingSend: "ring_send", RingRecv: "ring_recv",
                              AddrGen: "addr_gen", Combine: "combine"}


class _Execution:
    """One launch of one program."""

    def __init__(self, p: Program, card: Card, buffers: MutableMapping[str, torch.Tensor],
                 sizes: Mapping[sympy.Symbol, int], checking: bool, pe_threads: int = 1) -> None:
        self.p, self.card, self.buffers, self.checking = p, card, buffers, checking
        self.m = card.machine
        self.sizes = dict(sizes)
        self.sizes.update({sidx.index_symbol(k): v for k, v in p.sizes})
        self.dtypes = buffer_dtypes(p)
        self.epoch = card.epoch
        self.mailbox: dict[tuple[int, int], torch.Tensor] = {}
        self.dynamic_bytes: dict[tuple[int, int], int] = {}
        self.dyn_writes: dict[str, list[tuple[int, int, torch.Tensor]]] = defaultdict(list)
        self.dyn_reads: dict[str, list[tuple[int, int, torch.Tensor]]] = defaultdict(list)
        self.core_epoch: dict[int, int] = defaultdict(int)
        #: the steps executed so far, as replayable thunks (an unchecked recording launch)
        self.record: list[rp.Thunk] | None = None
        self.pe_threads = pe_threads
        #: ring messages a recording launch copies from the sender's LX: (tag, receiver) -> (sender, view)
        self.direct: dict[tuple[int, int], tuple[int, Lx]] = {}

    # ---------------------------------------------------------- LX bookkeeping
    def check_written(self, where: Where, lx: Lx, step: int, name: str,
                      mask: torch.Tensor | None) -> None:
        """Every byte of ``lx`` (where ``mask`` is set) was written in this launch."""
        if not self.checking or lx.numel == 0:
            return
        st = self.card.stamps(where, lx)
        # Every byte stamped now (masked lanes included) ends the check. amax of
        # the bitwise complement is the fast way to a uint8 minimum on strided views.
        if 255 - int((~st).amax()) == self.epoch == int(st.amax()):
            return
        st = self.card.element_stamps(where, lx)
        ok = (st == self.epoch).all(-1)
        if mask is not None:
            ok = ok | ~mask.bool().expand(ok.shape)
        if bool(ok.all()):
            return
        held = int(st.amax()) == HELD
        bad = (~ok).nonzero()[0].tolist()
        core = core_range(where)[bad[0]] if not isinstance(where, int) else where
        raise EmulatorError("read of unwritten LX", self.p.name, core, step, name,
                            f"{lx.dtype} element {bad[-1] if bad else 0} of the LX view at {lx.addr}"
                            + (" holds another kernel's data" if held else " was never written in this launch"))

    def mark(self, where: Where, lx: Lx) -> None:
        """Stamp ``lx``'s bytes as written now (it must not overwrite data held for a later kernel)."""
        if lx.numel == 0 or not self.checking:
            return
        st = self.card.stamps(where, lx)
        if self.checking and int(st.amax()) == HELD:
            core = where if isinstance(where, int) else where[0]
            raise EmulatorError("overwrites held LX data", self.p.name, core, -1, "-",
                                f"LX bytes at {lx.addr} hold data an earlier kernel left for a later one")
        st.fill_(self.epoch)

    # ---------------------------------------------------------- DMA
    def _dram(self, name: str) -> torch.Tensor:
        return self.buffers[name]

    def dma_load(self, core: int, step: int, ins: DmaLoad) -> None:
        put(self.card.view(core, ins.dst), rp.region(self.buffers, ins.src))
        self.mark(core, ins.dst)

    def dma_store(self, core: int, step: int, ins: DmaStore) -> None:
        self.check_written(core, ins.src, step, ins.dst.buffer, None)
        rp.write_dram(rp.region(self.buffers, ins.dst), self.card.view(core, ins.src), ins.accumulate)

    def _addresses(self, core: int, step: int, ins: DmaGather | DmaScatter) -> tuple[torch.Tensor, torch.Tensor]:
        self.check_written(core, ins.addrs, step, ins.buffer, None)
        idx = self.card.view(core, ins.addrs).reshape(-1).clone()
        live = idx >= 0
        n = self._dram(ins.buffer).numel()
        if bool(((idx >= n) & live).any()):
            raise EmulatorError("DMA outside a tensor's bytes", self.p.name, core, step, ins.buffer,
                                f"element {int(idx[(idx >= n) & live][0])} of {n}")
        isz = self._dram(ins.buffer).element_size()
        marks = StickMarks(n * isz + self.m.stick_bytes, self.m.stick_bytes)
        marks.add_indices(idx[live], isz)
        self.dynamic_bytes[(core, step)] = marks.count() * self.m.stick_bytes
        if self.checking and bool(live.any()):
            lo, hi = int(idx[live].min()), int(idx[live].max())
            if (hi - lo + 1) * isz > self.m.span_bytes_per_core:
                raise EmulatorError("per-core span exceeded", self.p.name, core, step, ins.buffer,
                                    f"{(hi - lo + 1) * isz} B > {self.m.span_bytes_per_core} B")
        return idx, live

    def dma_gather(self, core: int, step: int, ins: DmaGather) -> None:
        idx, live = self._addresses(core, step, ins)
        dst = self.card.view(core, ins.dst).reshape(-1)
        dst[live] = self._dram(ins.buffer)[idx[live]]
        st = self.card.element_stamps(core, ins.dst).reshape(dst.numel(), -1)
        st[live] = self.epoch
        if self.checking:
            self.dyn_reads[ins.buffer].append((core, self._epoch_of(core), idx[live]))

    def dma_scatter(self, core: int, step: int, ins: DmaScatter) -> None:
        idx, live = self._addresses(core, step, ins)
        self.check_written(core, ins.src, step, ins.buffer, None)
        src = self.card.view(core, ins.src).reshape(-1)
        self._dram(ins.buffer).index_put_((idx[live],), src[live], accumulate=ins.accumulate)
        if self.checking and not ins.accumulate:
            self.dyn_writes[ins.buffer].append((core, self._epoch_of(core), idx[live]))

    # ---------------------------------------------------------- ring
    def ring_send(self, core: int, step: int, ins: RingSend) -> None:
        self.check_written(core, ins.src, step, "ring", None)
        data = self.card.view(core, ins.src).clone()
        for peer in ins.peers:
            if (ins.tag, peer) in self.mailbox:
                raise EmulatorError("ring tag reused", self.p.name, core, step, "ring", f"#{ins.tag} to core {peer}")
            self.mailbox[(ins.tag, peer)] = data

    def _received(self, core: int, step: int, ins: RingRecv) -> torch.Tensor:
        data = self.take((ins.tag, core))
        if data.numel() != ins.dst.numel or data.dtype != torch_dtype(ins.dst.dtype):
            raise EmulatorError("ring size mismatch", self.p.name, core, step, "ring",
                                f"#{ins.tag}: {data.numel()} {data.dtype} sent, {ins.dst.numel} {ins.dst.dtype} expected")
        return data

    def ring_recv(self, core: int, step: int, ins: RingRecv) -> None:
        put(self.card.view(core, ins.dst), self._received(core, step, ins))
        self.mark(core, ins.dst)

    def _batched_recv(self, group: list[tuple[int, int, Instruction]]) -> None:
        """Receives into the same LX view of consecutive cores: one copy (one
        stacked or broadcast source: a send to many peers is one tensor)."""
        data = [self._received(c, step, ins) for c, step, ins in group]  # type: ignore[arg-type]
        where = where_of([g[0] for g in group])
        dst = group[0][2].dst  # type: ignore[union-attr]
        rp.deliver(self.card.view(where, dst), dst.sizes, data)
        self.mark(where, dst)

    # ---------------------------------------------------------- compute
    def _tile(self, ins: Vec | AddrGen | Combine, kernel: LoopKernel, starts: torch.Tensor | None = None,
              bind: Sequence[tuple[str, int]] = ()) -> Tile:
        sizes = dict(self.sizes)
        sizes.update({sidx.index_symbol(k): v for k, v in bind})
        red = ins.red if isinstance(ins, (Vec, AddrGen)) else None
        return Tile(kernel, ins.box, sizes, red=red, batch_starts=starts)

    def vec(self, cores: list[int], steps: list[int], instrs: list[Vec], kept: list[Any] | None = None) -> None:
        """Run a group of vector steps: batched over its cores when their operands
        allow one view, else core by core. ``kept`` (a replayed step's slot) keeps
        the memories and tiles built here for the next launch."""
        ins = instrs[0]
        kernel = self.p.bodies[ins.body]
        if len(cores) > 1 and (kept is None or kept[0] != "single"):
            where = where_of(cores)
            validated = kept is not None and kept[0] == "batched"
            if validated:
                mem, tile = kept[1]
                mem.ex = self
            else:
                starts = torch.tensor([[lo for lo, _ in v.box] + [lo for lo, _ in (v.red or ())] +
                                       ([0] * len(kernel.reduction_ranges) if v.red is None else [])
                                       for v in instrs], dtype=torch.int64)
                mem = LxMemory(self, where, [v.operands for v in instrs], steps[0], kernel)
                tile = self._tile(ins, kernel, starts, ins.bind)
            try:
                self._run_vec(where, steps[0], ins, kernel, mem, tile, batched=None if validated else instrs)
                if kept is not None and not validated:
                    mem.memo, mem.values, mem.fast = {}, {}, {}
                    kept[:] = ["batched", (mem, tile)]
                return
            except NotBatchable:
                pass
        if kept is not None and kept[0] == "single":
            parts = kept[1]
        else:
            parts = [(core, step, v, LxMemory(self, core, v.operands, step, kernel), self._tile(v, kernel, None, v.bind))
                     for core, step, v in zip(cores, steps, instrs)]
            if kept is not None:
                for part in parts:
                    part[3].memo, part[3].values, part[3].fast = {}, {}, {}
                kept[:] = ["single", parts]
        for core, step, v, mem, tile in parts:
            mem.ex = self
            self._run_vec(core, step, v, kernel, mem, tile)

    def _run_vec(self, where: Where, step: int, ins: Vec, kernel: LoopKernel, mem: LxMemory,
                 tile: Tile, batched: list[Vec] | None = None) -> None:
        if batched is not None:
            self._prevalidate(mem)
        try:
            if mem.fast is not None and lx_memory.REPLAY_COMPILED:  # a replayed step: compiled on its first replay, then rerun
                if mem.plan is None:
                    mem.plan = compile_evaluation(kernel, mem, tile, phase=ins.phase, memo=mem.values)
                partials = mem.plan()
            else:
                partials = evaluate(kernel, mem, tile, phase=ins.phase, memo=mem.values)
        except KernelFault as exc:
            raise EmulatorError("kernel fault", self.p.name, where if isinstance(where, int) else where[0], step,
                                "-", str(exc)) from None
        for pos, comps in ins.partials:
            state = partials[pos]
            for value, lx in zip(state, comps):
                put(self.card.view(where, lx), value)
                self.mark(where, lx)

    @staticmethod
    def _prevalidate(mem: LxMemory) -> None:
        """Raise NotBatchable before any store when the batch's operands are not
        at one LX view on every core."""
        for ops in mem.ops.values():
            if any(o.lx != ops[0].lx for o in ops):
                raise NotBatchable()

    def addr_gen(self, core: int, step: int, ins: AddrGen) -> None:
        kernel = self.p.bodies[ins.body]
        targets = dict(ins.targets)
        only = index_cone(kernel.body, tuple(sorted(targets)))
        mem = LxMemory(self, core, ins.operands, step, kernel, targets=targets)
        try:
            evaluate(kernel, mem, self._tile(ins, kernel, None, ins.bind), only=only)
        except KernelFault as exc:
            raise EmulatorError("kernel fault", self.p.name, core, step, "-", str(exc)) from None
        missing = set(targets) - set(only)
        if missing:
            raise EmulatorError("missing operand", self.p.name, core, step, "-", f"no access at {sorted(missing)}")

    def combine(self, core: int, step: int, ins: Combine, kept: list[Any] | None = None) -> None:
        """Combine a reduction's partial states from LX, into LX or through the
        body's finish phase. ``kept`` (a replayed step's slot) keeps the tile and
        the finish phase's memory built on the recording launch: building them
        (index symbols, windows) cost five times the arithmetic."""
        kernel = self.p.bodies[ins.body]
        recording = kept is not None and kept[0] is None
        if kept is not None and not recording:
            tile, mem = kept
            if mem is not None:
                mem.ex = self
        else:
            tile = self._tile(ins, kernel)
            mem = None if ins.into else LxMemory(self, core, ins.operands, step, kernel)
        keep = tile.keep_shape()
        reduced: dict[int, Any] = {}
        for pos, chunks in ins.partials:
            red = kernel.body[pos]
            states = []
            for comps in chunks:
                vals = []
                for lx in comps:
                    self.check_written(core, lx, step, "partials", None)
                    vals.append(self.card.view(core, lx).reshape(keep))
                states.append(tuple(vals))
            if len(states[0]) != len(partial_dtypes(red)):
                raise EmulatorError("partials mismatch", self.p.name, core, step, "partials",
                                    f"{len(states[0])} components for a {red.args[2]} reduction")
            if ins.into:
                reduced[pos] = merge_partials(red.args[2], states)
            else:
                reduced[pos] = combine_partials(red.args[2], states, torch_dtype(red.args[0]))
        if ins.into:
            for pos, comps in ins.into:
                for value, lx in zip(reduced[pos], comps):
                    put(self.card.view(core, lx), value)
                    self.mark(core, lx)
            if recording:
                kept[:] = [tile, None]  # type: ignore[index]
            return
        assert mem is not None
        evaluate(kernel, mem, tile, phase="finish", reduced=reduced, memo=mem.values)
        if recording:  # later launches resolve and keep the memory's readers and writers
            mem.memo, mem.values, mem.fast = {}, {}, {}
            kept[:] = [tile, mem]  # type: ignore[index]

    def pe(self, cores: list[int], steps: list[int], instrs: list[Pe]) -> None:
        ins = instrs[0]
        where = where_of(cores)
        for x in (ins.a, ins.b) + ((ins.acc,) if ins.accumulate else ()):
            self.check_written(where, x, steps[0], "pe operand", None)
        rp.matmul(self.card.view(where, ins.a), self.card.view(where, ins.b), self.card.view(where, ins.acc),
                  ins.accumulate, self.pe_threads)
        self.mark(where, ins.acc)

    def _epoch_of(self, core: int) -> int:
        return self.core_epoch.get(core, 0)

    # ---------------------------------------------------------- the rounds
    def _rounds(self, inbox: Any) -> Iterator[list[tuple[int, int, Instruction]]]:
        """The round schedule: each round, every core whose next step can start;
        yields its batches, which the caller must run (or account for: a ring
        receive can start once ``(tag, core)`` is in ``inbox``) before resuming."""
        streams = {c.core: c.instrs for c in self.p.cores if c.instrs}
        pcs = {c: 0 for c in streams}
        members: dict[int, set[int]] = defaultdict(set)
        for c, s in streams.items():
            for ins in s:
                if isinstance(ins, Barrier):
                    members[ins.tag].add(c)
        waiting: dict[int, set[int]] = defaultdict(set)
        while pcs:
            runnable: list[tuple[int, int, Instruction]] = []
            for c, pc in pcs.items():
                ins = streams[c][pc]
                if isinstance(ins, RingRecv) and (ins.tag, c) not in inbox:
                    continue
                if isinstance(ins, Barrier):
                    waiting[ins.tag].add(c)
                    continue
                runnable.append((c, pc, ins))
            released = [t for t, cs in waiting.items() if cs and cs >= members[t]]
            for t in released:
                for c in waiting.pop(t):
                    pcs[c] += 1
                    self.core_epoch[c] += 1
            if not runnable and not released:
                stuck = ", ".join(f"core {c} at step {pc} ({describe(streams[c][pc], self.p.bodies)[0]})"
                                  for c, pc in list(pcs.items())[:4])
                raise EmulatorError("deadlock", self.p.name, next(iter(pcs)), pcs[next(iter(pcs))], "-",
                                    f"no core can proceed: {stuck}")
            for group in grouping.batches(runnable):
                yield group
                for c, pc, _ in group:
                    pcs[c] = pc + 1
            for c in [c for c, pc in pcs.items() if pc >= len(streams[c])]:
                del pcs[c]

    def run(self) -> None:
        """Run the program round by round (a recording launch: in dependence levels)."""
        if self.record is not None:
            for group in self._levelled():
                self._execute(group)
        else:
            for group in self._rounds(self.mailbox):
                self._execute(group)
        self._check_mailbox()
        if self.checking:
            self._dynamic_races()

    def _levelled(self) -> list[list[tuple[int, int, Instruction]]]:
        """The program's steps regrouped by dependence level (see :mod:`.regroup`),
        from the round order, which the program's own synchronisation makes valid."""
        order: list[tuple[int, int, Instruction]] = []
        inbox: set[tuple[int, int]] = set()
        for group in self._rounds(inbox):
            for c, _, ins in group:
                if isinstance(ins, RingSend):
                    inbox.update((ins.tag, peer) for peer in ins.peers)
                elif isinstance(ins, RingRecv):
                    inbox.discard((ins.tag, c))
            order.extend(group)
        self.core_epoch.clear()
        numels = {k: v.numel() for k, v in self.buffers.items()}
        lvls = regroup.levels(order, self.p.bodies, self.m, numels, regroup.aliasing(self.buffers), self.direct)

        def signature(item: tuple[int, int, Instruction]) -> Any:
            c, _, ins = item
            src = self.direct.get((ins.tag, c)) if isinstance(ins, RingRecv) else None
            return ("direct", ins.dst, src[1]) if src else grouping.signature(ins)

        def shape(item: tuple[int, int, Instruction]) -> Any:
            c, _, ins = item
            if isinstance(ins, RingRecv):
                src = self.direct.get((ins.tag, c))
                return ("copy", grouping.lx_shape(ins.dst), grouping.lx_shape(src[1])) if src and grouping.gatherable(ins.dst, src[1]) else None
            return self._dma_gather_key(ins)

        return regroup.regroup(order, lvls, signature, shape)

    def _dma_gather_key(self, ins: Instruction) -> Any:
        """What DMA steps must share to run as one gather and scatter (None: they cannot)."""
        if isinstance(ins, DmaLoad) and self._dram_gatherable(ins.src, ins.dst):
            return ("load", ins.src.buffer, ins.src.sizes, ins.src.strides, grouping.lx_shape(ins.dst))
        if isinstance(ins, DmaStore) and not ins.accumulate and self._dram_gatherable(ins.dst, ins.src) \
                and grouping.disjoint(ins.dst.sizes, ins.dst.strides):
            return ("store", ins.dst.buffer, ins.dst.sizes, ins.dst.strides, grouping.lx_shape(ins.src))
        return None

    def _dram_gatherable(self, r: Region, lx: Lx) -> bool:
        """Whether DMA between ``r`` and ``lx`` copies bits (same dtype, no
        conversion) over non-negative strides, so it can run gathered."""
        buf = self.buffers.get(r.buffer)
        return buf is not None and buf.dtype == torch_dtype(lx.dtype) and min(r.strides, default=0) >= 0 \
            and grouping.gatherable(lx, lx)

    def replay(self, thunks: Sequence[rp.Thunk]) -> None:
        """Run a recorded launch's steps in their order (unchecked launches only)."""
        for step in thunks:
            step(self)
        self._check_mailbox()

    def take(self, key: tuple[int, int]) -> torch.Tensor:
        """The ring message ``key`` (tag, receiving core), removed from the mailbox."""
        data = self.mailbox.pop(key, None)
        if data is None:
            raise EmulatorError("ring receive before its send", self.p.name, key[1], -1, "ring",
                                f"#{key[0]}: the recorded steps are out of order")
        return data

    def _check_mailbox(self) -> None:
        if self.mailbox:
            (tag, peer), _ = next(iter(self.mailbox.items()))
            raise EmulatorError("ring send without receive", self.p.name, peer, -1, "ring",
                                f"#{tag} sent to core {peer}, never received")

    def _execute(self, group: list[tuple[int, int, Instruction]]) -> None:
        if self.record is None:
            self._dispatch(group)
            return
        step = self._thunk(group)
        if step is not None:
            self.record.append(step)
            step(self)

    def _thunk(self, group: list[tuple[int, int, Instruction]]) -> rp.Thunk | None:
        """The group as a replayable step, its LX views resolved now (None: nothing
        to do, a send whose every message is copied by its receiver)."""
        if isinstance(group, regroup.Gathered):
            return self._gathered(group)
        c, _, ins = group[0]
        view = self.card.view
        if isinstance(ins, RingRecv) and (ins.tag, c) in self.direct:
            src = self.direct[(ins.tag, c)][1]
            pairs = [(g[0], self.direct[(g[2].tag, g[0])][0]) for g in group]  # type: ignore[attr-defined]
            grid = grouping.core_grid(pairs)
            if grid is not None:
                shape, (r0, rs), (s0, ss) = grid
                return rp.copy(self.card.grid_view(r0, rs, shape, ins.dst), self.card.grid_view(s0, ss, shape, src))
            runs = [rp.copy(view(where_of([r for r, _ in run]), ins.dst), self._senders([s for _, s in run], src))
                    for run in grouping.even_pairs(pairs)]
            return runs[0] if len(runs) == 1 else rp.sequence(runs)
        if isinstance(ins, RingSend):
            group = [(g[0], g[1], dataclasses.replace(g[2], peers=tuple(  # type: ignore[call-arg, attr-defined]
                p for p in g[2].peers if (g[2].tag, p) not in self.direct))) for g in group]  # type: ignore[attr-defined]
            if not any(g[2].peers for g in group):  # type: ignore[attr-defined]
                return None
        lead = grouping.spacing(group) if len(group) > 1 and isinstance(ins, (DmaLoad, DmaStore)) else None
        if len(group) > 1 and isinstance(ins, (DmaLoad, DmaStore)) and lead is None:
            # Cores in a row whose regions no strided view spaces: one gather and
            # scatter (31 transposed 64x64 loads: 53 us, one copy each: 257 us).
            if self._dma_gather_key(ins) is not None:
                return self._gathered(regroup.Gathered(group))
            return rp.sequence([self._thunk([g]) for g in group])
        if len(group) == 1:
            if isinstance(ins, DmaLoad):
                return rp.load(view(c, ins.dst), ins.src)
            if isinstance(ins, DmaStore):
                return rp.store(view(c, ins.src), ins.dst, ins.accumulate)
            if isinstance(ins, RingSend):
                return rp.send(view(c, ins.src), ins.tag, ins.peers)
            if isinstance(ins, RingRecv):
                return rp.recv(view(c, ins.dst), (ins.tag, c))
        if isinstance(ins, Pe):
            where = where_of([g[0] for g in group])
            return rp.pe(view(where, ins.a), view(where, ins.b), view(where, ins.acc), ins.accumulate)
        elif isinstance(ins, DmaLoad) and lead is not None:
            return rp.batched_load(self._lead_view(where_of([g[0] for g in group]), ins.dst, lead), ins.src, lead)
        elif isinstance(ins, DmaStore) and lead is not None:
            return rp.batched_store(self._lead_view(where_of([g[0] for g in group]), ins.src, lead), ins.dst, lead,
                                    ins.accumulate)
        elif isinstance(ins, RingSend):
            return rp.batched_send(view(where_of([g[0] for g in group]), ins.src),
                                   [(g[2].tag, g[2].peers) for g in group])  # type: ignore[union-attr]
        elif isinstance(ins, RingRecv):
            return rp.batched_recv(view(where_of([g[0] for g in group]), ins.dst), ins.dst.sizes,
                                   [(g[2].tag, g[0]) for g in group])  # type: ignore[union-attr]
        if isinstance(ins, Vec):
            cores, steps, instrs = [g[0] for g in group], [g[1] for g in group], [g[2] for g in group]
            kept: list[Any] = [None, None]
            return lambda ex: ex.vec(cores, steps, instrs, kept)
        if isinstance(ins, Combine) and len(group) == 1:
            slot: list[Any] = [None, None]
            return lambda ex: ex.combine(c, group[0][1], ins, slot)  # type: ignore[arg-type]
        return lambda ex: ex._dispatch(group)

    def _tiles(self, lx: Lx) -> Any:
        """The card's tiles shaped like ``lx`` at every element offset (see :func:`.replay.tiles`)."""
        return rp.tiles(self.card.bits(lx.itemsize), lx.sizes, lx.strides)

    def _offsets(self, pairs: Sequence[tuple[int, Lx]]) -> Any:
        """Element offsets of (core, view) pairs in the card's flat memory."""
        width = self.m.lx_bytes
        return np.array([(core * width + lx.addr) // lx.itemsize for core, lx in pairs], dtype=np.int64)

    def _gathered(self, group: list[tuple[int, int, Instruction]]) -> rp.Thunk:
        """A :class:`.regroup.Gathered` group as one gather and scatter."""
        ins = group[0][2]
        if isinstance(ins, RingRecv):
            src = [self.direct[(g[2].tag, g[0])] for g in group]  # type: ignore[attr-defined]
            return rp.gathered_copy(self._tiles(ins.dst), self._offsets([(g[0], g[2].dst) for g in group]),  # type: ignore[attr-defined]
                                    self._tiles(src[0][1]), self._offsets(src), (len(group), *ins.dst.sizes))
        if isinstance(ins, DmaLoad):
            return rp.gathered_load(self._tiles(ins.dst), self._offsets([(g[0], g[2].dst) for g in group]),  # type: ignore[attr-defined]
                                    ins.src.buffer, ins.src.sizes, ins.src.strides,
                                    np.array([g[2].src.offset for g in group], dtype=np.int64),  # type: ignore[attr-defined]
                                    (len(group), *ins.dst.sizes))
        assert isinstance(ins, DmaStore)
        return rp.gathered_store(self._tiles(ins.src), self._offsets([(g[0], g[2].src) for g in group]),  # type: ignore[attr-defined]
                                 ins.dst.buffer, ins.dst.sizes, ins.dst.strides,
                                 np.array([g[2].dst.offset for g in group], dtype=np.int64),  # type: ignore[attr-defined]
                                 (len(group), *ins.dst.sizes))

    def _senders(self, cores: list[int], src: Lx) -> torch.Tensor:
        """``src`` on sender cores stepping evenly upward (one sender to many: expanded)."""
        if len(cores) > 1 and cores[0] == cores[1]:
            one = self.card.view(cores[0], src)
            return one.expand((len(cores), *one.shape))
        return self.card.view(where_of(cores), src)

    def _dispatch(self, group: list[tuple[int, int, Instruction]]) -> None:
        c, step, ins = group[0]
        if isinstance(ins, Vec):
            self.vec([g[0] for g in group], [g[1] for g in group], [g[2] for g in group])  # type: ignore[misc]
        elif isinstance(ins, Pe):
            self.pe([g[0] for g in group], [g[1] for g in group], [g[2] for g in group])  # type: ignore[misc]
        elif isinstance(ins, (DmaLoad, DmaStore)) and len(group) > 1 and self._batched_dma(group):
            pass
        elif isinstance(ins, RingRecv) and len(group) > 1:
            self._batched_recv(group)
        else:
            for c, step, ins in group:
                self._one(c, step, ins)

    def _batched_dma(self, group: list[tuple[int, int, Instruction]]) -> bool:
        """Loads (stores) of equal shape into (from) the same LX view of a core
        range, to (from) regions spaced evenly or on a 2-D grid: one strided copy."""
        lead = grouping.spacing(group)
        if lead is None:
            return False
        first = group[0][2]
        where = where_of([g[0] for g in group])
        dram = rp.region(self.buffers, first.src if isinstance(first, DmaLoad) else first.dst, lead)
        if isinstance(first, DmaLoad):
            put(self._lead_view(where, first.dst, lead), dram)
            self.mark(where, first.dst)
        else:
            assert isinstance(first, DmaStore)
            for c, step, ins in group:
                self.check_written(c, ins.src, step, ins.dst.buffer, None)  # type: ignore[union-attr]
            rp.write_dram(dram, self._lead_view(where, first.src, lead), first.accumulate)
        return True

    def _lead_view(self, where: Where, lx: Lx, lead: tuple[tuple[int, int], ...]) -> torch.Tensor:
        """``lx`` over a core range, its core dim split like the DRAM side's ``lead`` dims."""
        return self.card.view(where, lx).unflatten(0, tuple(n for n, _ in lead))

    def _one(self, core: int, step: int, ins: Instruction) -> None:
        handler = _HANDLERS.get(type(ins))
        if handler is None:
            raise EmulatorError("unknown instruction", self.p.name, core, step, "-", repr(ins))
        getattr(self, handler)(core, step, ins)

    def _dynamic_races(self) -> None:
        for buf, writes in self.dyn_writes.items():
            isz = self._dram(buf).element_size()
            by_epoch: dict[int, list] = defaultdict(list)
            for core, epoch, idx in writes:
                by_epoch[epoch].append((core, idx * isz, idx * isz + isz - 1))
            for epoch, items in by_epoch.items():
                hit = overlaps(items) if len({c for c, _, _ in items}) > 1 else None
                if hit:
                    raise EmulatorError("cross-core write conflict", self.p.name, hit[1], -1, buf,
                                        f"cores {hit[0]} and {hit[1]} both scatter to byte {hit[2]}")


def execute(p: Program, buffers: MutableMapping[str, torch.Tensor], card: Card,
            sizes: Mapping[sympy.Symbol, int] | None = None, checking: bool = True,
            replay: Replay | None = None, pe_threads: int = 1) -> RunStats:
    """Run ``p`` on ``card`` over the flat DRAM ``buffers`` (kernel arguments by
    name; the program's workspace is allocated here). ``checking`` off skips the
    LX stamp checks (a program already run once with them); ``pe_threads``: the
    intra-op threads of large PE steps (see :func:`.replay.matmul`); an unchecked launch
    given ``replay`` records its steps there, or replays them once recorded."""
    bufs = dict(buffers)
    for name, dt, numel in p.workspace:
        bufs[name] = torch.full((numel,), float("nan"), dtype=torch_dtype(dt)) if torch_dtype(dt).is_floating_point \
            else torch.zeros(numel, dtype=torch_dtype(dt))
    peaks = {}
    if checking:
        peaks = static_check(p, card.machine, {k: v.numel() for k, v in bufs.items()})
    epoch = card.new_launch() if checking else card.epoch
    for r in p.lx_in:
        lx = r.lx
        st = card.stamps(r.core, lx)
        if checking and not bool((st == HELD).all()):
            raise EmulatorError("read of unwritten LX", p.name, r.core, -1, r.buffer,
                                f"expects {r.buffer}[{r.lo}:{r.hi}] held in LX at {r.addr}; no earlier kernel left it")
        st.fill_(epoch)
    ex = _Execution(p, card, bufs, sizes or {}, checking, pe_threads)
    aliased = regroup.aliasing(bufs) if replay is not None and not checking else frozenset()
    if replay is not None and not checking and replay.ready(card, aliased):
        ex.replay(replay.thunks or ())
    elif replay is not None and not checking:
        ex.record = []
        ex.run()
        replay.card, replay.thunks, replay.aliased = card, ex.record, aliased
    else:
        ex.run()
    for r in p.lx_out:
        card.stamps(r.core, r.lx).fill_(HELD)
    return RunStats(ex.dynamic_bytes, peaks)
