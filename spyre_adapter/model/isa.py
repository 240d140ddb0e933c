"""The Spyre instruction set: one record per step type, the single place that
says what a step of a program does.

Each record (a :class:`Step` subclass, registered in :data:`ISA` by the step's
dataclass from :mod:`.program`) answers, for a step of its type:

* the LX views it names (:meth:`Step.views`, :meth:`Step.map_views`), which it
  reads and which it writes (:meth:`Step.lx_accesses`);
* the DRAM it reads and writes (:meth:`Step.dram_accesses`), the strided region
  of a DMA (:meth:`Step.region`), and the step with its DRAM buffers renamed;
* its listing text (:meth:`Step.describe`);
* its cost: the engine lane it occupies, its fixed compute time and the DRAM
  bytes it moves (:meth:`Step.engine`, :meth:`Step.duration`, :meth:`Step.dram_bytes`);
* the static rules particular to it (:meth:`Step.check`); the rules every view
  obeys are checked over :meth:`Step.views` by :mod:`.rules`;
* how it orders cores (:attr:`Step.sync`: a barrier, a ring send or receive).

The emulator registers how it executes and records each of the same types
(:mod:`spyre_adapter.emulator.steps`); ``tests/adapter/model/test_isa.py``
checks that every type has every part. A new step type is a dataclass in
:mod:`.program`, a record here and a registration there.
"""

from __future__ import annotations

import abc
import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar, Generic, Literal, Protocol, TypeVar

from spyre_shims import kernel_ir as kir

from spyre_adapter.model.costs import pe_ns, vec_cycles
from spyre_adapter.model.loop_steps import as_run, count, map_code
from spyre_adapter.model.machine import Machine
from spyre_adapter.model.program import (AddrGen, Alloc, Barrier, Box, CollectivePlan, Combine, DmaGather, DmaLoad,
                                         DmaScatter, DmaStore, Instruction, LinkExchange, Loop, Lx, Operand, Pe,
                                         Program, Region, RingRecv, RingSend, Vec, buffer_dtypes, itemsize)
from spyre_adapter.model.traffic import region_sticks

__all__ = ["Step", "Checks", "ISA", "STEP_TYPES", "step", "views", "map_views", "lx_accesses", "dram_accesses",
           "describe", "engine", "lane", "duration", "dram_bytes", "renamed", "buffer_of", "transfer", "dram_buffers", "with_buffers",
           "listing"]

S = TypeVar("S")
#: How a step orders cores: a barrier, the two halves of a ring transfer, or not at all.
Sync = Literal["none", "barrier", "send", "recv"]
#: Which way a step moves data between DRAM and LX.
Dma = Literal["none", "in", "out"]
Views = list[Lx]
#: A DRAM access: a strided region, or a buffer name standing for a data-dependent set of its elements.
DramRef = Region | str


class Checks(Protocol):
    """What the static rules (:func:`spyre_adapter.model.rules.static_check`) offer
    a step's own checks."""

    def dma_lx(self, lx: Lx, buffer: str) -> None:
        """The LX side of a DMA starts on a stick boundary."""

    def dma_region(self, region: Region, lx: Lx, write: bool, accumulate: bool) -> None:
        """A strided DMA: a known buffer, matching element count and dtype, inside
        the tensor, counted in the core's span and in the race check."""

    def link_region(self, region: Region, write: bool) -> None:
        """A region a link exchange moves: a known buffer, inside the tensor, in
        the race check."""


class Step(abc.ABC, Generic[S]):
    """The record of one step type (see the module docstring)."""

    #: the step's dataclass
    type: ClassVar[type]
    #: its ordering role
    sync: ClassVar[Sync] = "none"
    #: DRAM <-> LX direction of a DMA
    dma: ClassVar[Dma] = "none"
    #: the engine lane the timing model runs it on
    lane: ClassVar[str]
    #: steps that meet other processes (a card's peers): run in program order among
    #: themselves, whatever order their data allows, so every card meets them alike
    serial: ClassVar[bool] = False

    @abc.abstractmethod
    def views(self, ins: S) -> Views:
        """Every LX view the step names."""

    @abc.abstractmethod
    def map_views(self, ins: S, fn: Callable[[Any], Any]) -> S:
        """The step with each LX view ``v`` replaced by ``fn(v)``."""

    @abc.abstractmethod
    def lx_accesses(self, ins: S, bodies: Sequence[kir.LoopKernel]) -> tuple[Views, Views]:
        """(LX views it reads, LX views it writes)."""

    def dram_accesses(self, ins: S) -> tuple[list[DramRef], list[DramRef]]:
        """(DRAM it reads, DRAM it writes)."""
        return [], []

    def region(self, ins: S) -> Region | None:
        """The strided DRAM region a DMA moves (None: none, or data-dependent)."""
        return None

    def with_region(self, ins: S, region: Region) -> S:
        """The DMA with another DRAM region."""
        raise TypeError(f"{type(ins).__name__} has no DRAM region")

    def transfer(self, ins: S) -> tuple[Region, Lx] | None:
        """A strided DMA's (DRAM region, LX view); None for every other step."""
        return None

    def renamed(self, ins: S, names: Mapping[str, str]) -> S:
        """The step with its DRAM buffer names mapped by ``names``."""
        return ins

    @abc.abstractmethod
    def describe(self, ins: S, bodies: Sequence[kir.LoopKernel]) -> tuple[str, str, str]:
        """(mnemonic, what it reads, what it writes) for the listing."""

    def engine(self, ins: S) -> str:
        """The engine queue it waits in (DMA loads: one per DRAM buffer)."""
        return self.lane

    def duration(self, ins: S, p: Program, m: Machine, memo: dict[int, list[str]]) -> float:
        """Fixed compute time in ns (transfers take theirs from the bandwidth model)."""
        return 0.0

    def dram_bytes(self, ins: S, dtypes: Mapping[str, str], stick: int, dynamic: int | None) -> int:
        """DRAM bytes moved, in whole sticks (``dynamic``: what a data-dependent
        transfer touched when it ran)."""
        return 0

    def check(self, ins: S, checks: Checks) -> None:
        """The static rules particular to this step type."""

    def buffer(self, ins: S, p: Program, lx: Lx | None) -> str:
        """What an error about the step (or its view ``lx``) names as the buffer."""
        return "-"


# ------------------------------------------------------------------ listing text

def _lx(v: Lx) -> str:
    lo, hi = v.byte_range()
    shape = "x".join(map(str, v.sizes)) or "1"
    return f"LX[{lo:#08x}:{hi:#08x}] {v.dtype}[{shape}]"


def _region(r: Region) -> str:
    lo, hi = r.bounds()
    shape = "x".join(map(str, r.sizes)) or "1"
    return f"{r.buffer}[{lo}..{hi}] {shape}/{','.join(map(str, r.strides))}"


def _box(box: Box | None) -> str:
    return "x".join(f"{a}:{b}" for a, b in box) if box else "-"


def _body_name(ins: Vec | AddrGen | Combine, bodies: Sequence[kir.LoopKernel]) -> str:
    return bodies[ins.body].name if ins.body < len(bodies) else f"body{ins.body}"


# ------------------------------------------------------------------ DMA

class _Strided(Step[S]):
    """DMA between a strided DRAM region and an LX view."""

    def buffer(self, ins: Any, p: Program, lx: Lx | None) -> str:
        return str(self.region(ins).buffer)  # type: ignore[union-attr]

    def dram_bytes(self, ins: Any, dtypes: Mapping[str, str], stick: int, dynamic: int | None) -> int:
        r = self.region(ins)
        assert r is not None
        return region_sticks(r, itemsize(dtypes[r.buffer]), stick) * stick

    def renamed(self, ins: Any, names: Mapping[str, str]) -> Any:
        r = self.region(ins)
        assert r is not None
        return self.with_region(ins, dataclasses.replace(r, buffer=names.get(r.buffer, r.buffer)))


class _DmaLoad(_Strided[DmaLoad]):
    type = DmaLoad
    dma = "in"
    lane = "dma_in"

    def views(self, ins: DmaLoad) -> Views:
        return [ins.dst]

    def map_views(self, ins: DmaLoad, fn: Callable[[Any], Any]) -> DmaLoad:
        return DmaLoad(ins.src, fn(ins.dst))

    def lx_accesses(self, ins: DmaLoad, bodies: Sequence[kir.LoopKernel]) -> tuple[Views, Views]:
        return [], [ins.dst]

    def dram_accesses(self, ins: DmaLoad) -> tuple[list[DramRef], list[DramRef]]:
        return [ins.src], []

    def region(self, ins: DmaLoad) -> Region:
        return ins.src

    def with_region(self, ins: DmaLoad, region: Region) -> DmaLoad:
        return DmaLoad(region, ins.dst)

    def transfer(self, ins: DmaLoad) -> tuple[Region, Lx]:
        return ins.src, ins.dst

    def describe(self, ins: DmaLoad, bodies: Sequence[kir.LoopKernel]) -> tuple[str, str, str]:
        return "dma.ld", _region(ins.src), _lx(ins.dst)

    def engine(self, ins: DmaLoad) -> str:
        return "dma_in:" + ins.src.buffer

    def check(self, ins: DmaLoad, checks: Checks) -> None:
        checks.dma_lx(ins.dst, ins.src.buffer)
        checks.dma_region(ins.src, ins.dst, False, False)


class _DmaStore(_Strided[DmaStore]):
    type = DmaStore
    dma = "out"
    lane = "dma_out"

    def views(self, ins: DmaStore) -> Views:
        return [ins.src]

    def map_views(self, ins: DmaStore, fn: Callable[[Any], Any]) -> DmaStore:
        return DmaStore(fn(ins.src), ins.dst, ins.accumulate)

    def lx_accesses(self, ins: DmaStore, bodies: Sequence[kir.LoopKernel]) -> tuple[Views, Views]:
        return [ins.src], []

    def dram_accesses(self, ins: DmaStore) -> tuple[list[DramRef], list[DramRef]]:
        return ([ins.dst] if ins.accumulate else []), [ins.dst]

    def region(self, ins: DmaStore) -> Region:
        return ins.dst

    def with_region(self, ins: DmaStore, region: Region) -> DmaStore:
        return DmaStore(ins.src, region, ins.accumulate)

    def transfer(self, ins: DmaStore) -> tuple[Region, Lx]:
        return ins.dst, ins.src

    def describe(self, ins: DmaStore, bodies: Sequence[kir.LoopKernel]) -> tuple[str, str, str]:
        return ("dma.st+" if ins.accumulate else "dma.st"), _lx(ins.src), _region(ins.dst)

    def check(self, ins: DmaStore, checks: Checks) -> None:
        checks.dma_lx(ins.src, ins.dst.buffer)
        checks.dma_region(ins.dst, ins.src, True, ins.accumulate)


class _Indexed(Step[S]):
    """DMA through data-dependent element indices held in LX."""

    def buffer(self, ins: Any, p: Program, lx: Lx | None) -> str:
        return str(ins.buffer)

    def renamed(self, ins: Any, names: Mapping[str, str]) -> Any:
        return dataclasses.replace(ins, buffer=names.get(ins.buffer, ins.buffer))

    def dram_bytes(self, ins: Any, dtypes: Mapping[str, str], stick: int, dynamic: int | None) -> int:
        # counted when it ran; without that, a stick per element bounds it
        return dynamic if dynamic is not None else ins.addrs.numel * stick


class _DmaGather(_Indexed[DmaGather]):
    type = DmaGather
    dma = "in"
    lane = "dma_in"

    def views(self, ins: DmaGather) -> Views:
        return [ins.addrs, ins.dst]

    def map_views(self, ins: DmaGather, fn: Callable[[Any], Any]) -> DmaGather:
        return DmaGather(ins.buffer, fn(ins.addrs), fn(ins.dst))

    def lx_accesses(self, ins: DmaGather, bodies: Sequence[kir.LoopKernel]) -> tuple[Views, Views]:
        return [ins.addrs], [ins.dst]

    def dram_accesses(self, ins: DmaGather) -> tuple[list[DramRef], list[DramRef]]:
        return [ins.buffer], []

    def describe(self, ins: DmaGather, bodies: Sequence[kir.LoopKernel]) -> tuple[str, str, str]:
        return "dma.gather", f"{ins.buffer}[@{_lx(ins.addrs)}]", _lx(ins.dst)

    def engine(self, ins: DmaGather) -> str:
        return "dma_in:" + ins.buffer

    def check(self, ins: DmaGather, checks: Checks) -> None:
        checks.dma_lx(ins.dst, ins.buffer)


class _DmaScatter(_Indexed[DmaScatter]):
    type = DmaScatter
    dma = "out"
    lane = "dma_out"

    def views(self, ins: DmaScatter) -> Views:
        return [ins.src, ins.addrs]

    def map_views(self, ins: DmaScatter, fn: Callable[[Any], Any]) -> DmaScatter:
        return DmaScatter(fn(ins.src), ins.buffer, fn(ins.addrs), ins.accumulate)

    def lx_accesses(self, ins: DmaScatter, bodies: Sequence[kir.LoopKernel]) -> tuple[Views, Views]:
        return [ins.src, ins.addrs], []

    def dram_accesses(self, ins: DmaScatter) -> tuple[list[DramRef], list[DramRef]]:
        return ([ins.buffer] if ins.accumulate else []), [ins.buffer]

    def describe(self, ins: DmaScatter, bodies: Sequence[kir.LoopKernel]) -> tuple[str, str, str]:
        return ("dma.scatter+" if ins.accumulate else "dma.scatter"), _lx(ins.src), f"{ins.buffer}[@{_lx(ins.addrs)}]"

    def check(self, ins: DmaScatter, checks: Checks) -> None:
        checks.dma_lx(ins.src, ins.buffer)


# ------------------------------------------------------------------ ring

class _RingSend(Step[RingSend]):
    type = RingSend
    sync = "send"
    lane = "ring_tx"

    def views(self, ins: RingSend) -> Views:
        return [ins.src]

    def map_views(self, ins: RingSend, fn: Callable[[Any], Any]) -> RingSend:
        return RingSend(ins.peers, fn(ins.src), ins.tag)

    def lx_accesses(self, ins: RingSend, bodies: Sequence[kir.LoopKernel]) -> tuple[Views, Views]:
        return [ins.src], []

    def describe(self, ins: RingSend, bodies: Sequence[kir.LoopKernel]) -> tuple[str, str, str]:
        return f"ring.send ->{','.join(map(str, ins.peers))} #{ins.tag}", _lx(ins.src), ""


class _RingRecv(Step[RingRecv]):
    type = RingRecv
    sync = "recv"
    lane = "ring_rx"

    def views(self, ins: RingRecv) -> Views:
        return [ins.dst]

    def map_views(self, ins: RingRecv, fn: Callable[[Any], Any]) -> RingRecv:
        return RingRecv(ins.peer, fn(ins.dst), ins.tag)

    def lx_accesses(self, ins: RingRecv, bodies: Sequence[kir.LoopKernel]) -> tuple[Views, Views]:
        return [], [ins.dst]

    def describe(self, ins: RingRecv, bodies: Sequence[kir.LoopKernel]) -> tuple[str, str, str]:
        return f"ring.recv <-{ins.peer} #{ins.tag}", "", _lx(ins.dst)


class _Barrier(Step[Barrier]):
    type = Barrier
    sync = "barrier"
    lane = "sync"

    def views(self, ins: Barrier) -> Views:
        return []

    def map_views(self, ins: Barrier, fn: Callable[[Any], Any]) -> Barrier:
        return ins

    def lx_accesses(self, ins: Barrier, bodies: Sequence[kir.LoopKernel]) -> tuple[Views, Views]:
        return [], []

    def describe(self, ins: Barrier, bodies: Sequence[kir.LoopKernel]) -> tuple[str, str, str]:
        return f"barrier #{ins.tag}", "", ""


# ------------------------------------------------------------------ link

def link_hops(p: Program, m: Machine, peer: int) -> int:
    """Link hops from this card to ``peer`` (one through the switch; on a ring of
    cards the shorter way round)."""
    plan = p.plan
    if m.link_topology == "switch" or not isinstance(plan, CollectivePlan):
        return 1
    d = (peer - plan.rank) % plan.ranks
    return max(1, min(d, plan.ranks - d))


class _LinkExchange(Step[LinkExchange]):
    type = LinkExchange
    lane = "link"
    serial = True

    def views(self, ins: LinkExchange) -> Views:
        return []

    def map_views(self, ins: LinkExchange, fn: Callable[[Any], Any]) -> LinkExchange:
        return ins

    def lx_accesses(self, ins: LinkExchange, bodies: Sequence[kir.LoopKernel]) -> tuple[Views, Views]:
        return [], []

    def dram_accesses(self, ins: LinkExchange) -> tuple[list[DramRef], list[DramRef]]:
        return [r for _, r in ins.sends], [r for _, r in ins.recvs]

    def renamed(self, ins: LinkExchange, names: Mapping[str, str]) -> LinkExchange:
        def moved(pairs: tuple[tuple[int, Region], ...]) -> tuple[tuple[int, Region], ...]:
            return tuple((peer, dataclasses.replace(r, buffer=names.get(r.buffer, r.buffer))) for peer, r in pairs)
        return LinkExchange(moved(ins.sends), moved(ins.recvs), ins.tag)

    def describe(self, ins: LinkExchange, bodies: Sequence[kir.LoopKernel]) -> tuple[str, str, str]:
        return (f"link.exchange #{ins.tag}", " ".join(f"{_region(r)}->card{peer}" for peer, r in ins.sends),
                " ".join(f"card{peer}->{_region(r)}" for peer, r in ins.recvs))

    def duration(self, ins: LinkExchange, p: Program, m: Machine, memo: dict[int, list[str]]) -> float:
        # Full duplex: the sends and the receives move at once, each direction at
        # the card's link rate; one latency per hop of the farthest peer (the
        # matching exchange on every peer is assumed to start when this one does).
        dtypes = buffer_dtypes(p)
        sent = sum(r.numel * itemsize(dtypes[r.buffer]) for _, r in ins.sends)
        got = sum(r.numel * itemsize(dtypes[r.buffer]) for _, r in ins.recvs)
        hops = max((link_hops(p, m, peer) for peer, _ in (*ins.sends, *ins.recvs)), default=1)
        return hops * m.link_latency_ns + max(sent, got) / m.link_gbps

    def dram_bytes(self, ins: LinkExchange, dtypes: Mapping[str, str], stick: int, dynamic: int | None) -> int:
        return sum(region_sticks(r, itemsize(dtypes[r.buffer]), stick) * stick
                   for _, r in (*ins.sends, *ins.recvs))

    def check(self, ins: LinkExchange, checks: Checks) -> None:
        for _, r in ins.sends:
            checks.link_region(r, False)
        for _, r in ins.recvs:
            checks.link_region(r, True)

    def buffer(self, ins: LinkExchange, p: Program, lx: Lx | None) -> str:
        return next((r.buffer for _, r in (*ins.sends, *ins.recvs)), "-")


# ------------------------------------------------------------------ compute

class _Pe(Step[Pe]):
    type = Pe
    lane = "pe"

    def views(self, ins: Pe) -> Views:
        return [ins.a, ins.b, ins.acc]

    def map_views(self, ins: Pe, fn: Callable[[Any], Any]) -> Pe:
        return Pe(fn(ins.a), fn(ins.b), fn(ins.acc), ins.accumulate)

    def lx_accesses(self, ins: Pe, bodies: Sequence[kir.LoopKernel]) -> tuple[Views, Views]:
        return ([ins.a, ins.b, ins.acc] if ins.accumulate else [ins.a, ins.b]), [ins.acc]

    def describe(self, ins: Pe, bodies: Sequence[kir.LoopKernel]) -> tuple[str, str, str]:
        return "pe.mma" + ("+" if ins.accumulate else ""), f"{_lx(ins.a)} @ {_lx(ins.b)}", _lx(ins.acc)

    def duration(self, ins: Pe, p: Program, m: Machine, memo: dict[int, list[str]]) -> float:
        a, b = ins.a, ins.b
        batch = a.sizes[0] if len(a.sizes) == 3 else 1
        return pe_ns(a.sizes[-2], b.sizes[-1], a.sizes[-1], a.itemsize, m, batch)

    def buffer(self, ins: Pe, p: Program, lx: Lx | None) -> str:
        return "pe operands"


def _ops_map(ops: tuple[Operand, ...], fn: Callable[[Any], Any]) -> tuple[Operand, ...]:
    return tuple(Operand(o.pos, o.kind, fn(o.lx), o.base) for o in ops)


def _comps_map(items: tuple[tuple[int, tuple[Any, ...]], ...], fn: Callable[[Any], Any]) -> tuple:
    return tuple((pos, tuple(fn(x) for x in comps)) for pos, comps in items)


def _split_operands(ins: Vec | AddrGen | Combine, bodies: Sequence[kir.LoopKernel]) -> tuple[Views, Views]:
    """An operand bound to a load is read; one bound to a store is written."""
    body = bodies[ins.body].body
    reads = [o.lx for o in ins.operands if body[o.pos].op == "load"]
    writes = [o.lx for o in ins.operands if body[o.pos].op != "load"]
    return reads, writes


def _points(box: Box) -> int:
    n = 1
    for lo, hi in box:
        n *= hi - lo
    return n


class _Body(Step[S]):
    """A step running (part of) a Kernel IR body over a tile, its loads and stores
    bound to LX operands."""

    lane = "vec"

    def buffer(self, ins: Any, p: Program, lx: Lx | None) -> str:
        if lx is None:
            return "-"
        body = p.bodies[ins.body].body
        for o in ins.operands:
            if o.lx == lx:
                return str(body[o.pos].args[0])
        return "partials"

    def _cycles(self, ins: Vec | AddrGen, p: Program, m: Machine, memo: dict[int, list[str]]) -> float:
        body = p.bodies[ins.body]
        points = _points(ins.box)
        if ins.red is not None:
            rpoints = _points(ins.red)
        else:
            rpoints = 1
            for r in body.reduction_ranges:
                rpoints *= int(r)
        dtypes = memo.setdefault(ins.body, [o.lx.dtype for o in ins.operands] or ["float16"])
        return vec_cycles(body, points, rpoints, m, dtypes)


class _Vec(_Body[Vec]):
    type = Vec

    def views(self, ins: Vec) -> Views:
        return [o.lx for o in ins.operands] + [x for _, comps in ins.partials for x in comps]

    def map_views(self, ins: Vec, fn: Callable[[Any], Any]) -> Vec:
        return Vec(ins.body, ins.box, ins.red, _ops_map(ins.operands, fn), ins.phase, _comps_map(ins.partials, fn),
                   ins.bind)

    def lx_accesses(self, ins: Vec, bodies: Sequence[kir.LoopKernel]) -> tuple[Views, Views]:
        reads, writes = _split_operands(ins, bodies)
        return reads, writes + [x for _, comps in ins.partials for x in comps]

    def describe(self, ins: Vec, bodies: Sequence[kir.LoopKernel]) -> tuple[str, str, str]:
        body = bodies[ins.body] if ins.body < len(bodies) else None
        reads = [_lx(o.lx) for o in ins.operands if body is None or body.body[o.pos].op == "load"]
        writes = [_lx(o.lx) for o in ins.operands if body is not None and body.body[o.pos].op != "load"]
        if ins.phase == "partial":
            writes += [_lx(x) for _, comps in ins.partials for x in comps]
        return (f"vec.{ins.phase} {_body_name(ins, bodies)} {_box(ins.box)}|{_box(ins.red)}", "; ".join(reads),
                "; ".join(writes))

    def duration(self, ins: Vec, p: Program, m: Machine, memo: dict[int, list[str]]) -> float:
        return self._cycles(ins, p, m, memo) / m.clock_ghz


class _AddrGen(_Body[AddrGen]):
    type = AddrGen

    def views(self, ins: AddrGen) -> Views:
        return [o.lx for o in ins.operands] + [x for _, x in ins.targets]

    def map_views(self, ins: AddrGen, fn: Callable[[Any], Any]) -> AddrGen:
        return AddrGen(ins.body, ins.box, ins.red, _ops_map(ins.operands, fn),
                       tuple((pos, fn(x)) for pos, x in ins.targets), ins.bind)

    def lx_accesses(self, ins: AddrGen, bodies: Sequence[kir.LoopKernel]) -> tuple[Views, Views]:
        return [o.lx for o in ins.operands], [t for _, t in ins.targets]

    def describe(self, ins: AddrGen, bodies: Sequence[kir.LoopKernel]) -> tuple[str, str, str]:
        body = bodies[ins.body] if ins.body < len(bodies) else None
        reads = [_lx(o.lx) for o in ins.operands if body is None or body.body[o.pos].op == "load"]
        writes = [_lx(t) for _, t in ins.targets]
        return f"vec.agen {_body_name(ins, bodies)} {_box(ins.box)}", "; ".join(reads), "; ".join(writes)

    def duration(self, ins: AddrGen, p: Program, m: Machine, memo: dict[int, list[str]]) -> float:
        # half the body's arithmetic (the index cone only) plus writing an int64 index per target
        cycles = self._cycles(ins, p, m, memo) / 2
        cycles = cycles + _points(ins.box) * len(ins.targets) / (m.vector_bytes_per_cycle / 8)
        return cycles / m.clock_ghz


class _Combine(_Body[Combine]):
    type = Combine

    def views(self, ins: Combine) -> Views:
        return [o.lx for o in ins.operands] + [x for _, ch in ins.partials for comps in ch for x in comps] + \
            [x for _, comps in ins.into for x in comps]

    def map_views(self, ins: Combine, fn: Callable[[Any], Any]) -> Combine:
        partials = tuple((pos, tuple(tuple(fn(x) for x in comps) for comps in chunks)) for pos, chunks in ins.partials)
        return Combine(ins.body, ins.box, partials, _ops_map(ins.operands, fn), _comps_map(ins.into, fn))

    def lx_accesses(self, ins: Combine, bodies: Sequence[kir.LoopKernel]) -> tuple[Views, Views]:
        loads, stores = _split_operands(ins, bodies)
        reads = [x for _, chunks in ins.partials for comps in chunks for x in comps] + loads
        return reads, stores + [x for _, comps in ins.into for x in comps]

    def describe(self, ins: Combine, bodies: Sequence[kir.LoopKernel]) -> tuple[str, str, str]:
        reads = [_lx(x) for _, chunks in ins.partials for comps in chunks for x in comps]
        writes = [_lx(o.lx) for o in ins.operands] + [_lx(x) for _, comps in ins.into for x in comps]
        return (f"vec.{'merge' if ins.into else 'combine'} {_body_name(ins, bodies)} {_box(ins.box)}",
                "; ".join(reads), "; ".join(writes))

    def duration(self, ins: Combine, p: Program, m: Machine, memo: dict[int, list[str]]) -> float:
        chunks = max((len(c) for _, c in ins.partials), default=1)
        return _points(ins.box) * chunks * len(ins.partials) * 2 / (m.vector_bytes_per_cycle / 4) / m.clock_ghz


# ------------------------------------------------------------------ the table

#: Step type -> its record.
ISA: dict[type, Step[Any]] = {r.type: r for r in (
    _DmaLoad(), _DmaStore(), _DmaGather(), _DmaScatter(), _RingSend(), _RingRecv(), _Vec(), _Combine(), _AddrGen(),
    _Pe(), _Barrier(), _LinkExchange())}
#: Every step type, in :data:`ISA`'s order.
STEP_TYPES: tuple[type, ...] = tuple(ISA)


def step(ins: Instruction) -> Step[Any]:
    """The record of ``ins``'s type."""
    try:
        return ISA[type(ins)]
    except KeyError:
        raise TypeError(f"not an instruction: {ins!r}") from None


def views(ins: Instruction) -> Views:
    """Every LX view ``ins`` names."""
    return step(ins).views(ins)


def map_views(ins: Instruction, fn: Callable[[Any], Any]) -> Instruction:
    """``ins`` with each LX view replaced by ``fn(view)``."""
    return step(ins).map_views(ins, fn)  # type: ignore[no-any-return]


def lx_accesses(ins: Instruction, bodies: Sequence[kir.LoopKernel]) -> tuple[Views, Views]:
    """(LX views the instruction reads, LX views it writes)."""
    return step(ins).lx_accesses(ins, bodies)


def dram_accesses(ins: Instruction) -> tuple[list[DramRef], list[DramRef]]:
    """(DRAM regions the instruction reads, regions it writes); a buffer name
    stands for a data-dependent set of its elements (gathers, scatters)."""
    return step(ins).dram_accesses(ins)


def describe(ins: Instruction, bodies: Sequence[kir.LoopKernel] = ()) -> tuple[str, str, str]:
    """(mnemonic, what the step reads, what it writes) of one instruction."""
    return step(ins).describe(ins, bodies)


def engine(ins: Instruction) -> str:
    """The engine queue the timing model runs ``ins`` in."""
    return step(ins).engine(ins)


def lane(ins: Instruction) -> str:
    """The engine lane of ``ins`` (DMA loads of every buffer share one lane)."""
    return step(ins).lane


def duration(ins: Instruction, p: Program, m: Machine, memo: dict[int, list[str]]) -> float:
    """Fixed compute time of ``ins`` in ns (``memo``: per body, the dtypes its steps touch)."""
    return step(ins).duration(ins, p, m, memo)


def dram_bytes(ins: Instruction, dtypes: Mapping[str, str], stick: int, dynamic: int | None = None) -> int:
    """Bytes ``ins`` moves through DRAM (whole sticks); ``dynamic``: what a
    gather or scatter touched when it ran (else a stick per element bounds it)."""
    return step(ins).dram_bytes(ins, dtypes, stick, dynamic)


def transfer(ins: Instruction) -> tuple[Region, Lx] | None:
    """A strided DMA's (DRAM region, LX view); None for every other step."""
    return step(ins).transfer(ins)


def dram_buffers(ins: Instruction) -> tuple[set[str], set[str]]:
    """(names of the DRAM buffers ``ins`` reads, names of those it writes)."""
    reads, writes = step(ins).dram_accesses(ins)
    return ({r if isinstance(r, str) else r.buffer for r in reads},
            {r if isinstance(r, str) else r.buffer for r in writes})


def renamed(ins: Instruction, names: Mapping[str, str]) -> Instruction:
    """``ins`` with its DRAM buffers renamed."""
    return step(ins).renamed(ins, names)  # type: ignore[no-any-return]


def buffer_of(p: Program, ins: Instruction, lx: Lx | None = None) -> str:
    """The buffer an error about ``ins`` (or its view ``lx``) names."""
    return step(ins).buffer(ins, p, lx)


def with_buffers(p: Program, names: dict[str, str], kernel: Any, bodies: tuple[kir.LoopKernel, ...]) -> Program:
    """``p`` for another kernel of identical structure: DRAM buffer names mapped by
    ``names``, the Kernel IR and loop bodies replaced (same positions)."""
    def held(rs: tuple[Any, ...]) -> tuple[Any, ...]:
        return tuple(dataclasses.replace(r, buffer=names.get(r.buffer, r.buffer)) for r in rs)

    cores = tuple(dataclasses.replace(c, instrs=map_code(c.instrs, lambda i: renamed(i, names))) for c in p.cores)
    workspace = tuple((names.get(n, n), dt, k) for n, dt, k in p.workspace)
    return dataclasses.replace(p, kernel=kernel, bodies=bodies, cores=cores, workspace=workspace,
                               lx_in=held(p.lx_in), lx_out=held(p.lx_out))


def listing(p: Program, max_instrs: int | None = None) -> str:
    """An assembly-style listing: the plan, then per core each step with what it
    reads and writes (``max_instrs`` lines per core, default all). A loop is
    shown as a loop: its trip count, the integers it advances each iteration,
    then its body indented, its first iteration's values shown."""
    lines = [f"; program {p.name} ({p.kind}) on {p.cores_used} core(s): {p.plan}"]
    for r in p.lx_in:
        lines.append(f"; lx_in  core {r.core}: {r.buffer}[{r.lo}:{r.hi}] at {r.addr:#08x}")
    for r in p.lx_out:
        lines.append(f"; lx_out core {r.core}: {r.buffer}[{r.lo}:{r.hi}] at {r.addr:#08x}")
    for c in p.cores:
        if not c.instrs:
            continue
        lines.append(f"core {c.core}:" + (f"  ({c.n_steps} steps unrolled)" if c.looped else ""))
        for seq in (c.allocs, c.instrs):
            body: list[str] = []
            _list_code(seq, p.bodies, 0, [0], body)
            shown = body if max_instrs is None else body[:max_instrs]
            lines.extend(shown)
            if len(shown) < len(body):
                lines.append(f"  ... {len(body) - len(shown)} more")
    return "\n".join(lines)


def _list_code(code: Sequence[Any], bodies: Sequence[kir.LoopKernel], depth: int, step: list[int],
               out: list[str]) -> None:
    """Listing lines of a stream (of steps or of allocations): what follows a loop
    shown as it runs, moved by the loop's trip count."""
    pad = "  " * (depth + 1)
    for x in as_run(code):
        if isinstance(x, Loop):
            allocs = all(isinstance(b, Alloc) for b in x.body)
            moves_ = ", ".join(f"{j}.{k}{st:+d}" for j, k, st in x.advance)
            what = "allocation(s)" if allocs else "step(s)"
            at = "     " if allocs else f"{step[0]:5d}"
            out.append(f"{pad}{at}  loop {x.trips} x {len(x.body)} {what}"
                       f"{f'  advancing {moves_}' if moves_ else ''}")
            first = step[0]
            _list_code(x.body, bodies, depth + 1, step, out)
            step[0] = first + x.trips * count(x.body)
            out.append(f"{pad}       end loop")
        elif isinstance(x, Alloc):
            out.append(f"{pad}.alloc {x.name:<24} {x.addr:#08x} {x.nbytes:>8} B  steps {x.first}-{x.last}")
        else:
            op, rd, wr = describe(x, bodies)
            out.append(f"{pad}{step[0]:5d}  {op:<40} {rd:<60} -> {wr}")
            step[0] += 1
