"""How the emulator executes each step type: one registration per type of
:data:`spyre_adapter.model.isa.ISA`, with

* ``run``: execute a group of equal steps of consecutive cores (one step, or a
  batch: one torch op over the cores' stacked LX views), checked or not;
* ``record``: the same group as a replayable thunk, its LX views resolved now
  (a recording launch; :mod:`.replay` holds the thunks);
* ``batch_key``: equal keys on consecutive cores may run as one batch;
* ``pool_key``: equal keys of one dependence level, at unrelated cores and
  addresses, may run as one gather and scatter (None: they may not).

``tests/adapter/model/test_isa.py`` checks that every step type of the ISA is
registered here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING, Any

import torch

from spyre_shims.distributed import link_group
from spyre_shims.kernel_ir import LoopKernel
from spyre_shims.ops import torch_dtype
from spyre_shims.reference import (KernelFault, combine_partials, compile_evaluation, evaluate, merge_partials,
                                   partial_dtypes)

from spyre_adapter.emulator import grouping, lx_memory, regroup
from spyre_adapter.emulator import replay as rp
from spyre_adapter.emulator.card import Where, where_of
from spyre_adapter.emulator.lx_memory import LxMemory, NotBatchable
from spyre_adapter.model import isa
from spyre_adapter.model.bodies import index_cone
from spyre_adapter.model.program import (AddrGen, Barrier, CollectivePlan, Combine, DmaGather, DmaLoad, DmaScatter,
                                         DmaStore, LinkExchange, Pe, RingRecv, RingSend, Vec)
from spyre_adapter.model.traffic import index_sticks

if TYPE_CHECKING:
    from spyre_adapter.emulator.execution import Execution

__all__ = ["StepRun", "RUNS", "run", "record", "batch_key", "level_key", "pool_key"]

Item = tuple[int, int, Any]
Group = list[Item]


@dataclasses.dataclass(frozen=True)
class StepRun:
    """How the emulator runs and records one step type."""

    run: Callable[[Execution, Group], None]
    record: Callable[[Execution, Group], rp.Thunk | None] | None = None
    batch_key: Callable[[Any], Hashable | None] = lambda ins: None
    level_key: Callable[[Execution, Item], Hashable | None] | None = None
    pool_key: Callable[[Execution, Item], Hashable | None] = lambda ex, item: None


#: Step type -> how the emulator runs it.
RUNS: dict[type, StepRun] = {}


def _register(t: type, **parts: Any) -> None:
    RUNS[t] = StepRun(**parts)


def run(ex: Execution, group: Group) -> None:
    """Execute a group of equal steps (see :data:`RUNS`)."""
    ins = group[0][2]
    got = RUNS.get(type(ins))
    if got is None:
        raise ex.fail("unknown instruction", group[0][0], group[0][1], "-", repr(ins))
    got.run(ex, group)


def record(ex: Execution, group: Group) -> rp.Thunk | None:
    """The group as a replayable step (None: nothing to do), run once it is recorded."""
    if isinstance(group, regroup.Gathered):
        return rp.gathered(ex, group)
    got = RUNS[type(group[0][2])]
    if got.record is None:
        return lambda e: got.run(e, group)
    return got.record(ex, group)


def batch_key(ins: Any) -> Hashable | None:
    """What consecutive cores' steps must share to run as one batch (None: never batched)."""
    got = RUNS.get(type(ins))
    return got.batch_key(ins) if got is not None else None


def level_key(ex: Execution, item: Item) -> Hashable | None:
    """What steps of one dependence level must share to run as one batch (a
    recording launch: like :func:`batch_key`, and a receive copied straight from
    its sender's LX batches only with receives from the same view)."""
    got = RUNS.get(type(item[2]))
    if got is None:
        return None
    return got.level_key(ex, item) if got.level_key is not None else got.batch_key(item[2])


def pool_key(ex: Execution, item: Item) -> Hashable | None:
    """What steps of one level must share to run as one gather and scatter (None: they cannot)."""
    got = RUNS.get(type(item[2]))
    return got.pool_key(ex, item) if got is not None else None


def _one_by_one(fn: Callable[[Execution, int, int, Any], None]) -> Callable[[Execution, Group], None]:
    def each(ex: Execution, group: Group) -> None:
        for c, step, ins in group:
            fn(ex, c, step, ins)
    return each


# ------------------------------------------------------------------ DMA

def _dma_load(ex: Execution, core: int, step: int, ins: DmaLoad) -> None:
    rp.put(ex.lx.view(core, ins.dst), rp.region(ex.buffers, ins.src))
    ex.lx.mark(core, ins.dst)


def _dma_store(ex: Execution, core: int, step: int, ins: DmaStore) -> None:
    ex.lx.check_written(core, ins.src, step, ins.dst.buffer, None)
    rp.write_dram(rp.region(ex.buffers, ins.dst), ex.lx.view(core, ins.src), ins.accumulate)


def _strided_group(one: Callable[[Execution, int, int, Any], None]) -> Callable[[Execution, Group], None]:
    """Loads (stores) of equal shape into (from) the same LX view of a core range,
    to (from) regions spaced evenly or on a 2-D grid: one strided copy; else one by one."""
    def each(ex: Execution, group: Group) -> None:
        lead = grouping.spacing(group) if len(group) > 1 else None
        if lead is None:
            for c, step, ins in group:
                one(ex, c, step, ins)
            return
        first = group[0][2]
        region, lx = isa.transfer(first)  # type: ignore[misc]
        where = where_of([g[0] for g in group])
        dram = rp.region(ex.buffers, region, lead)
        if isa.step(first).dma == "in":
            rp.put(rp.lead_view(ex.card, where, lx, lead), dram)
            ex.lx.mark(where, lx)
        else:
            for c, step, ins in group:
                ex.lx.check_written(c, ins.src, step, ins.dst.buffer, None)
            rp.write_dram(dram, rp.lead_view(ex.card, where, lx, lead), first.accumulate)
    return each


def _record_strided(ex: Execution, group: Group) -> rp.Thunk:
    c, _, ins = group[0]
    loading = isa.step(ins).dma == "in"
    region, lx = isa.transfer(ins)  # type: ignore[misc]
    if len(group) == 1:
        view = ex.card.view(c, lx)
        return rp.load(view, region) if loading else rp.store(view, region, ins.accumulate)
    lead = grouping.spacing(group)
    if lead is None:
        # Cores in a row whose regions no strided view spaces: one gather and
        # scatter (31 transposed 64x64 loads: 53 us, one copy each: 257 us).
        if rp.gather_key(ex, ins) is not None:
            return rp.gathered(ex, regroup.Gathered(group))
        return rp.sequence([_record_strided(ex, [g]) for g in group])
    view = rp.lead_view(ex.card, where_of([g[0] for g in group]), lx, lead)
    return rp.batched_load(view, region, lead) if loading else rp.batched_store(view, region, lead, ins.accumulate)


def _addresses(ex: Execution, core: int, step: int, ins: DmaGather | DmaScatter) -> tuple[torch.Tensor, torch.Tensor]:
    """The descriptor's live element indices (negative ones are masked off) and
    the live mask; checks bounds and span, counts the sticks moved: torch ops over
    the indices only, never over the buffer."""
    ex.lx.check_written(core, ins.addrs, step, ins.buffer, None)
    idx = ex.lx.view(core, ins.addrs).reshape(-1)
    live = idx >= 0
    hit = idx[live]  # a copy: later steps may overwrite the addresses in LX
    n = ex.dram(ins.buffer).numel()
    isz = ex.dram(ins.buffer).element_size()
    if hit.numel():
        lo, hi = int(hit.min()), int(hit.max())
        if hi >= n:
            raise ex.fail("DMA outside a tensor's bytes", core, step, ins.buffer,
                          f"element {int(hit[hit >= n][0])} of {n}")
        if ex.checking and (hi - lo + 1) * isz > ex.m.span_bytes_per_core:
            raise ex.fail("per-core span exceeded", core, step, ins.buffer,
                          f"{(hi - lo + 1) * isz} B > {ex.m.span_bytes_per_core} B")
    ex.dynamic_bytes[(core, step)] = index_sticks(hit, isz, ex.m.stick_bytes) * ex.m.stick_bytes
    return hit, live


def _dma_gather(ex: Execution, core: int, step: int, ins: DmaGather) -> None:
    hit, live = _addresses(ex, core, step, ins)
    dst = ex.lx.view(core, ins.dst).reshape(-1)
    dst[live] = ex.dram(ins.buffer)[hit]
    st = ex.card.element_stamps(core, ins.dst).reshape(dst.numel(), -1)
    st[live] = ex.lx.epoch
    if ex.checking and ins.buffer in ex.scattered:  # only a buffer some core scatters to can race a gather
        ex.dyn_reads[ins.buffer].append((core, step, hit))


def _dma_scatter(ex: Execution, core: int, step: int, ins: DmaScatter) -> None:
    hit, live = _addresses(ex, core, step, ins)
    ex.lx.check_written(core, ins.src, step, ins.buffer, None)
    src = ex.lx.view(core, ins.src).reshape(-1)
    ex.dram(ins.buffer).index_put_((hit,), src[live], accumulate=ins.accumulate)
    if ex.checking and not ins.accumulate:
        ex.dyn_writes[ins.buffer].append((core, step, hit))


def _strided_pool_key(ex: Execution, item: Item) -> Hashable | None:
    return rp.gather_key(ex, item[2])


_register(DmaLoad, run=_strided_group(_dma_load), record=_record_strided, pool_key=_strided_pool_key,
          batch_key=lambda ins: ("load", ins.src.buffer, ins.src.sizes, ins.src.strides, ins.dst))
_register(DmaStore, run=_strided_group(_dma_store), record=_record_strided, pool_key=_strided_pool_key,
          batch_key=lambda ins: ("store", ins.dst.buffer, ins.dst.sizes, ins.dst.strides, ins.src, ins.accumulate))
_register(DmaGather, run=_one_by_one(_dma_gather))
_register(DmaScatter, run=_one_by_one(_dma_scatter))


# ------------------------------------------------------------------ ring

def _ring_send(ex: Execution, core: int, step: int, ins: RingSend) -> None:
    ex.lx.check_written(core, ins.src, step, "ring", None)
    data = ex.lx.view(core, ins.src).clone()
    for peer in ins.peers:
        if (ins.tag, peer) in ex.mailbox:
            raise ex.fail("ring tag reused", core, step, "ring", f"#{ins.tag} to core {peer}")
        ex.mailbox[(ins.tag, peer)] = data


def _received(ex: Execution, core: int, step: int, ins: RingRecv) -> torch.Tensor:
    data = ex.take((ins.tag, core))
    if data.numel() != ins.dst.numel or data.dtype != torch_dtype(ins.dst.dtype):
        raise ex.fail("ring size mismatch", core, step, "ring",
                      f"#{ins.tag}: {data.numel()} {data.dtype} sent, {ins.dst.numel} {ins.dst.dtype} expected")
    return data


def _ring_recv(ex: Execution, group: Group) -> None:
    """Receives; into the same LX view of consecutive cores: one copy (one stacked
    or broadcast source: a send to many peers is one tensor)."""
    if len(group) == 1:
        c, step, ins = group[0]
        rp.put(ex.lx.view(c, ins.dst), _received(ex, c, step, ins))
        ex.lx.mark(c, ins.dst)
        return
    data = [_received(ex, c, step, ins) for c, step, ins in group]
    where = where_of([g[0] for g in group])
    dst = group[0][2].dst
    rp.deliver(ex.lx.view(where, dst), dst.sizes, data)
    ex.lx.mark(where, dst)


def _record_send(ex: Execution, group: Group) -> rp.Thunk | None:
    # a message its receiver copies straight from this core's LX is not sent
    group = [(c, step, dataclasses.replace(ins, peers=tuple(p for p in ins.peers if (ins.tag, p) not in ex.direct)))
             for c, step, ins in group]
    if not any(g[2].peers for g in group):
        return None
    c, _, ins = group[0]
    if len(group) == 1:
        return rp.send(ex.card.view(c, ins.src), ins.tag, ins.peers)
    return rp.batched_send(ex.card.view(where_of([g[0] for g in group]), ins.src),
                           [(g[2].tag, g[2].peers) for g in group])


def _record_recv(ex: Execution, group: Group) -> rp.Thunk:
    c, _, ins = group[0]
    if (ins.tag, c) in ex.direct:
        return rp.direct_copy(ex, group)
    if len(group) == 1:
        return rp.recv(ex.card.view(c, ins.dst), (ins.tag, c))
    return rp.batched_recv(ex.card.view(where_of([g[0] for g in group]), ins.dst), ins.dst.sizes,
                           [(g[2].tag, g[0]) for g in group])


def _recv_level_key(ex: Execution, item: Item) -> Hashable | None:
    c, _, ins = item
    src = ex.direct.get((ins.tag, c))
    return ("direct", ins.dst, src[1]) if src else ("recv", ins.dst)


def _recv_pool_key(ex: Execution, item: Item) -> Hashable | None:
    c, _, ins = item
    src = ex.direct.get((ins.tag, c))
    if src and grouping.gatherable(ins.dst, src[1]):
        return ("copy", grouping.lx_shape(ins.dst), grouping.lx_shape(src[1]))
    return None


def _barrier(ex: Execution, group: Group) -> None:
    """Barriers are taken by the round scheduler; a replayed launch keeps none."""


_register(RingSend, run=_one_by_one(_ring_send), record=_record_send, batch_key=lambda ins: ("send", ins.src))
_register(RingRecv, run=_ring_recv, record=_record_recv, batch_key=lambda ins: ("recv", ins.dst),
          level_key=_recv_level_key, pool_key=_recv_pool_key)
_register(Barrier, run=_barrier, record=lambda ex, group: None)


# ------------------------------------------------------------------ link

def _link_exchange(ex: Execution, core: int, step: int, ins: LinkExchange) -> None:
    """The card's part of one exchange: its regions sent to their peers (the
    process of that rank), the peers' regions received into its DRAM."""
    plan = ex.p.plan
    if not isinstance(plan, CollectivePlan):
        raise ex.fail("link exchange outside a collective", core, step, "-", "the program names no process group")
    group = link_group(plan.group)
    if (group.rank, group.size) != (plan.rank, plan.ranks):
        raise ex.fail("link exchange in another group", core, step, "-",
                      f"planned as rank {plan.rank} of {plan.ranks}, running as rank {group.rank} of {group.size}")
    sends = [(peer, rp.region(ex.buffers, r).clone()) for peer, r in ins.sends]
    recvs = [(peer, torch.empty(r.sizes, dtype=ex.buffers[r.buffer].dtype)) for peer, r in ins.recvs]
    group.exchange(sends, recvs, ins.tag)
    for (_, r), (_, data) in zip(ins.recvs, recvs):
        rp.region(ex.buffers, r).copy_(data)


_register(LinkExchange, run=_one_by_one(_link_exchange))


# ------------------------------------------------------------------ compute

def _pe(ex: Execution, group: Group) -> None:
    c, step, ins = group[0]
    where = where_of([g[0] for g in group])
    for x in (ins.a, ins.b) + ((ins.acc,) if ins.accumulate else ()):
        ex.lx.check_written(where, x, step, "pe operand", None)
    rp.matmul(ex.lx.view(where, ins.a), ex.lx.view(where, ins.b), ex.lx.view(where, ins.acc), ins.accumulate,
              ex.pe_threads)
    ex.lx.mark(where, ins.acc)


def _record_pe(ex: Execution, group: Group) -> rp.Thunk:
    ins = group[0][2]
    where = where_of([g[0] for g in group])
    view = ex.card.view
    return rp.pe(view(where, ins.a), view(where, ins.b), view(where, ins.acc), ins.accumulate)


def _vec_run(ex: Execution, group: Group, kept: list[Any] | None = None) -> None:
    """Run a group of vector steps: batched over its cores when their operands
    allow one view, else core by core. ``kept`` (a replayed step's slot) keeps
    the memories and tiles built here for the next launch."""
    cores, steps_, instrs = [g[0] for g in group], [g[1] for g in group], [g[2] for g in group]
    ins = instrs[0]
    kernel = ex.p.bodies[ins.body]
    if len(cores) > 1 and (kept is None or kept[0] != "single"):
        where = where_of(cores)
        validated = kept is not None and kept[0] == "batched"
        if validated:
            mem, tile = kept[1]
            mem.lx = ex.lx
        else:
            starts = torch.tensor([[lo for lo, _ in v.box] + [lo for lo, _ in (v.red or ())] +
                                   ([0] * len(kernel.reduction_ranges) if v.red is None else [])
                                   for v in instrs], dtype=torch.int64)
            mem = LxMemory(ex.lx, where, [v.operands for v in instrs], steps_[0], kernel)
            tile = ex.tile(ins, kernel, ins.red, starts, ins.bind)
        try:
            _vec_evaluate(ex, where, steps_[0], ins, kernel, mem, tile, batched=None if validated else instrs)
            if kept is not None and not validated:
                mem.memo, mem.values, mem.fast = {}, {}, {}
                kept[:] = ["batched", (mem, tile)]
            return
        except NotBatchable:
            pass
    if kept is not None and kept[0] == "single":
        parts = kept[1]
    else:
        parts = [(core, step, v, LxMemory(ex.lx, core, v.operands, step, kernel), ex.tile(v, kernel, v.red, None, v.bind))
                 for core, step, v in zip(cores, steps_, instrs)]
        if kept is not None:
            for part in parts:
                part[3].memo, part[3].values, part[3].fast = {}, {}, {}
            kept[:] = ["single", parts]
    for core, step, v, mem, tile in parts:
        mem.lx = ex.lx
        _vec_evaluate(ex, core, step, v, kernel, mem, tile)


def _vec_evaluate(ex: Execution, where: Where, step: int, ins: Vec, kernel: LoopKernel, mem: LxMemory, tile: Any,
                  batched: list[Vec] | None = None) -> None:
    if batched is not None:
        # NotBatchable before any store when the batch's operands are not at one LX view on every core
        for ops in mem.ops.values():
            if any(o.lx != ops[0].lx for o in ops):
                raise NotBatchable()
    try:
        if mem.fast is not None and lx_memory.REPLAY_COMPILED:  # a replayed step: compiled on its first replay, then rerun
            if mem.plan is None:
                mem.plan = compile_evaluation(kernel, mem, tile, phase=ins.phase, memo=mem.values)
            partials = mem.plan()
        else:
            partials = evaluate(kernel, mem, tile, phase=ins.phase, memo=mem.values)
    except KernelFault as exc:
        raise ex.fail("kernel fault", where if isinstance(where, int) else where[0], step, "-", str(exc)) from None
    for pos, comps in ins.partials:
        state = partials[pos]
        for value, lx in zip(state, comps):
            rp.put(ex.lx.view(where, lx), value)
            ex.lx.mark(where, lx)


def _record_vec(ex: Execution, group: Group) -> rp.Thunk:
    kept: list[Any] = [None, None]
    return lambda e: _vec_run(e, group, kept)


def _vec_key(ins: Vec) -> Hashable:
    return ("vec", ins.body, tuple(b - a for a, b in ins.box), tuple(b - a for a, b in (ins.red or ())),
            ins.phase, ins.bind, ins.partials, tuple((o.pos, o.kind, o.lx) for o in ins.operands))


def _addr_gen(ex: Execution, core: int, step: int, ins: AddrGen) -> None:
    kernel = ex.p.bodies[ins.body]
    targets = dict(ins.targets)
    only = index_cone(kernel.body, tuple(sorted(targets)))
    mem = LxMemory(ex.lx, core, ins.operands, step, kernel, targets=targets)
    try:
        evaluate(kernel, mem, ex.tile(ins, kernel, ins.red, None, ins.bind), only=only)
    except KernelFault as exc:
        raise ex.fail("kernel fault", core, step, "-", str(exc)) from None
    missing = set(targets) - set(only)
    if missing:
        raise ex.fail("missing operand", core, step, "-", f"no access at {sorted(missing)}")


def _combine(ex: Execution, core: int, step: int, ins: Combine, kept: list[Any] | None = None) -> None:
    """Combine a reduction's partial states from LX, into LX or through the
    body's finish phase. ``kept`` (a replayed step's slot) keeps the tile and
    the finish phase's memory built on the recording launch: building them
    (index symbols, windows) cost five times the arithmetic."""
    kernel = ex.p.bodies[ins.body]
    recording = kept is not None and kept[0] is None
    if kept is not None and not recording:
        tile, mem = kept
        if mem is not None:
            mem.lx = ex.lx
    else:
        tile = ex.tile(ins, kernel, None)
        mem = None if ins.into else LxMemory(ex.lx, core, ins.operands, step, kernel)
    keep = tile.keep_shape()
    reduced: dict[int, Any] = {}
    for pos, chunks in ins.partials:
        red = kernel.body[pos]
        states = []
        for comps in chunks:
            vals = []
            for lx in comps:
                ex.lx.check_written(core, lx, step, "partials", None)
                vals.append(ex.lx.view(core, lx).reshape(keep))
            states.append(tuple(vals))
        if len(states[0]) != len(partial_dtypes(red)):
            raise ex.fail("partials mismatch", core, step, "partials",
                          f"{len(states[0])} components for a {red.args[2]} reduction")
        if ins.into:
            reduced[pos] = merge_partials(red.args[2], states)
        else:
            reduced[pos] = combine_partials(red.args[2], states, torch_dtype(red.args[0]))
    if ins.into:
        for pos, comps in ins.into:
            for value, lx in zip(reduced[pos], comps):
                rp.put(ex.lx.view(core, lx), value)
                ex.lx.mark(core, lx)
        if recording:
            kept[:] = [tile, None]  # type: ignore[index]
        return
    assert mem is not None
    evaluate(kernel, mem, tile, phase="finish", reduced=reduced, memo=mem.values)
    if recording:  # later launches resolve and keep the memory's readers and writers
        mem.memo, mem.values, mem.fast = {}, {}, {}
        kept[:] = [tile, mem]  # type: ignore[index]


def _combine_group(ex: Execution, group: Group) -> None:
    for c, step, ins in group:
        _combine(ex, c, step, ins)


def _record_combine(ex: Execution, group: Group) -> rp.Thunk:
    if len(group) > 1:
        return lambda e: _combine_group(e, group)
    c, step, ins = group[0]
    slot: list[Any] = [None, None]
    return lambda e: _combine(e, c, step, ins, slot)


_register(Pe, run=_pe, record=_record_pe, batch_key=lambda ins: ("pe", ins))
_register(Vec, run=_vec_run, record=_record_vec, batch_key=_vec_key)
_register(AddrGen, run=_one_by_one(_addr_gen))
_register(Combine, run=_combine_group, record=_record_combine)
