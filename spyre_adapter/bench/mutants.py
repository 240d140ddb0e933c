"""Planted bugs: mutated versions of real programs, each of which the emulator
must catch - an error, or numbers that no longer match the reference.

A mutant changes one thing a scheduler could get wrong: a load dropped, a DMA
region shifted by one stick, two cores' regions swapped, a barrier dropped
(everywhere, on one core only, or retagged on one core), a ring message lost or
two of them swapped, a combine missing one chunk, an allocation shrunk into its
neighbour, placed over another live one, across the end of the usable LX or off
its stick boundary, a reused allocation read before it is filled, a core's
share run by a second core too, a store moved before the compute that fills it, one K slice of a
matmul skipped. Steps are removed and inserted with the allocation table kept
in step, so a mutant is caught for the bug it plants. If the emulator's results
came from anywhere but the program, or its checks were weaker, mutants would
survive.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import torch

from spyre_shims.reference import run_kernel

from spyre_adapter.model import isa
from spyre_adapter.model.isa import lx_accesses
from spyre_adapter.model.machine import Machine
from spyre_adapter.model.program import Combine, CoreProgram, Program, itemsize

__all__ = ["OPERATORS", "Mutant", "Outcome", "mutants", "reference_run"]

OPERATORS = ("drop_load", "shift_tile", "swap_cores", "drop_barrier", "shrink_alloc", "store_early", "skip_kslice",
             "retag_barrier", "drop_core_barrier", "lose_message", "swap_messages", "lose_chunk", "overlap_alloc",
             "stale_read", "lx_overflow", "misalign_alloc", "duplicate_core", "past_end")


@dataclasses.dataclass(frozen=True)
class Mutant:
    """One planted bug in a program."""

    operator: str
    kernel: str
    core: int
    step: int
    detail: str
    program: Program


@dataclasses.dataclass(frozen=True)
class Outcome:
    """How the emulator took a mutant: ``killed`` with the error or mismatch that caught it."""

    mutant: Mutant
    killed: bool
    how: str


def _with_core(p: Program, core: int, instrs: Sequence[Any]) -> Program:
    """``p`` with core ``core``'s steps replaced one for one (the allocation table stays valid)."""
    cores = [dataclasses.replace(c, instrs=tuple(instrs)) if c.core == core else c for c in p.cores]
    return dataclasses.replace(p, cores=tuple(cores))


def _spliced(p: Program, core: int, at: int, remove: int, insert: Sequence[Any] = ()) -> Program:
    """``p`` with steps removed or inserted on one core, its allocation table kept in
    step: a mutant is caught for the bug it plants, not for a table it left stale."""
    cores = [c.spliced(at, remove, insert) if c.core == core else c for c in p.cores]
    return dataclasses.replace(p, cores=tuple(cores))


def _sites(p: Program, which: Callable[[isa.Step[Any], Any], bool]) -> list[tuple[int, int, Any]]:
    """(core, step, instruction) of every step ``which(record, step)`` picks."""
    return [(c.core, i, ins) for c in p.cores for i, ins in enumerate(c.instrs) if which(isa.step(ins), ins)]


def _drop_load(p: Program, rng: random.Random) -> Iterator[Mutant]:
    sites = _sites(p, lambda rec, ins: rec.dma == "in")
    for core, i, ins in rng.sample(sites, len(sites)):
        yield Mutant("drop_load", p.name, core, i, f"drop {type(ins).__name__}", _spliced(p, core, i, 1))


def _shift_tile(p: Program, m: Machine, dtypes: Mapping[str, str], rng: random.Random) -> Iterator[Mutant]:
    sites = _sites(p, lambda rec, ins: rec.transfer(ins) is not None)
    for core, i, ins in rng.sample(sites, len(sites)):
        region = isa.transfer(ins)[0]  # type: ignore[index]
        shift = max(1, m.stick_bytes // itemsize(dtypes[region.buffer]))
        moved = dataclasses.replace(region, offset=region.offset + shift)
        new = isa.step(ins).with_region(ins, moved)
        instrs = list(p.core(core).instrs)
        instrs[i] = new
        yield Mutant("shift_tile", p.name, core, i, f"{type(ins).__name__} of {region.buffer} one stick later",
                     _with_core(p, core, instrs))


def _past_end(p: Program, m: Machine, dtypes: Mapping[str, str], rng: random.Random) -> Iterator[Mutant]:
    """The transfer that reaches a buffer's last element moved one stick on: the
    off-by-one of a last tile, which reads or writes past the tensor."""
    sites = _sites(p, lambda rec, ins: rec.transfer(ins) is not None)
    end: dict[str, int] = {}
    for _, _, ins in sites:
        region = isa.transfer(ins)[0]  # type: ignore[index]
        end[region.buffer] = max(end.get(region.buffer, -1), region.bounds()[1])
    last = [(c, i, ins) for c, i, ins in sites
            if isa.transfer(ins)[0].bounds()[1] == end[isa.transfer(ins)[0].buffer]]  # type: ignore[index]
    for core, i, ins in rng.sample(last, len(last)):
        region = isa.transfer(ins)[0]  # type: ignore[index]
        shift = max(1, m.stick_bytes // itemsize(dtypes[region.buffer]))
        instrs = list(p.core(core).instrs)
        instrs[i] = isa.step(ins).with_region(ins, dataclasses.replace(region, offset=region.offset + shift))
        yield Mutant("past_end", p.name, core, i, f"{type(ins).__name__} of {region.buffer}'s last elements one "
                     "stick later", _with_core(p, core, instrs))


def _swap_cores(p: Program, rng: random.Random) -> Iterator[Mutant]:
    """Two cores' n-th DMA regions of the same shape (and different data) exchanged."""
    by_core = {c.core: [(i, ins) for i, ins in enumerate(c.instrs) if isa.transfer(ins) is not None]
               for c in p.cores}
    pairs = []
    cores = [c for c, v in by_core.items() if v]
    for a in cores:
        for b in cores:
            if a < b:
                for n, ((ia, x), (ib, y)) in enumerate(zip(by_core[a], by_core[b])):
                    rx, ry = isa.transfer(x)[0], isa.transfer(y)[0]  # type: ignore[index]
                    if isa.step(x) is isa.step(y) and rx != ry and rx.sizes == ry.sizes and rx.buffer == ry.buffer:
                        pairs.append((a, ia, x, b, ib, y))
    for a, ia, x, b, ib, y in rng.sample(pairs, len(pairs)):
        rec = isa.step(x)
        xa = rec.with_region(x, isa.transfer(y)[0])  # type: ignore[index]
        yb = rec.with_region(y, isa.transfer(x)[0])  # type: ignore[index]
        ia_instrs, ib_instrs = list(p.core(a).instrs), list(p.core(b).instrs)
        ia_instrs[ia], ib_instrs[ib] = xa, yb
        q = _with_core(_with_core(p, a, ia_instrs), b, ib_instrs)
        yield Mutant("swap_cores", p.name, a, ia, f"{type(x).__name__} regions of cores {a} and {b} swapped", q)


def _drop_barrier(p: Program, rng: random.Random) -> Iterator[Mutant]:
    tags = sorted({ins.tag for _, _, ins in _sites(p, lambda rec, ins: rec.sync == "barrier")})
    for tag in rng.sample(tags, len(tags)):
        q = p
        for core, i, _ in reversed(_sites(p, lambda rec, ins: rec.sync == "barrier" and ins.tag == tag)):
            q = _spliced(q, core, i, 1)
        yield Mutant("drop_barrier", p.name, -1, -1, f"barrier #{tag} dropped", q)


def _touches(c: CoreProgram, bodies: Any, lo: int, hi: int, first: int, last: int, write: bool) -> list[int]:
    """Instructions in [first, last] that write (or read) LX bytes in [lo, hi)."""
    out = []
    for i in range(max(first, 0), min(last, len(c.instrs) - 1) + 1):
        reads, writes = lx_accesses(c.instrs[i], bodies)
        for v in (writes if write else reads):
            a, b = v.byte_range()
            if a < hi and lo < b:
                out.append(i)
                break
    return out


def _shift_views(ins: Any, lo: int, hi: int, delta: int) -> Any:
    """``ins`` with every LX view starting in [lo, hi) moved down by ``delta`` bytes."""
    def mv(v: Any) -> Any:
        return dataclasses.replace(v, addr=v.addr - delta) if lo <= v.addr < hi else v

    return isa.map_views(ins, mv)


def _shrink_alloc(p: Program, m: Machine, rng: random.Random) -> Iterator[Mutant]:
    """An allocation given half its bytes: the allocation placed right above it,
    live at the same time, moves down into its tail."""
    sites = []
    for c in p.cores:
        allocs = sorted(c.allocs, key=lambda a: a.addr)
        for a in allocs:
            if a.nbytes < 2 * m.stick_bytes:
                continue
            delta = (a.nbytes // 2) // m.stick_bytes * m.stick_bytes
            tail = (a.addr + a.nbytes - delta, a.addr + a.nbytes)
            for b in allocs:
                # b placed right above a, written while a's tail is still to be read
                if b.addr != -(-(a.addr + a.nbytes) // m.stick_bytes) * m.stick_bytes:
                    continue
                writes = _touches(c, p.bodies, b.addr, b.addr + delta, b.first, b.last, True)
                reads = _touches(c, p.bodies, *tail, a.first, a.last, False)
                if any(r > w for w in writes for r in reads):
                    sites.append((c.core, a, b, delta))
    for core, a, b, delta in rng.sample(sites, len(sites)):
        instrs = list(p.core(core).instrs)
        for i in range(max(b.first, 0), min(b.last, len(instrs) - 1) + 1):
            instrs[i] = _shift_views(instrs[i], b.addr, b.addr + b.nbytes, delta)
        yield Mutant("shrink_alloc", p.name, core, b.first,
                     f"{a.name} given {a.nbytes - delta} of its {a.nbytes} B: {b.name} placed over its tail",
                     _with_core(p, core, instrs))


def _store_early(p: Program, rng: random.Random) -> Iterator[Mutant]:
    """A store moved before the step that writes what it stores."""
    sites = []
    for c in p.cores:
        for i, ins in enumerate(c.instrs):
            moved = isa.transfer(ins)
            if moved is None or isa.step(ins).dma != "out":
                continue
            lo, hi = moved[1].byte_range()
            for j in range(i - 1, -1, -1):
                _, writes = lx_accesses(c.instrs[j], p.bodies)
                if any(w.byte_range()[0] < hi and lo < w.byte_range()[1] for w in writes):
                    sites.append((c.core, i, j))
                    break
    for core, i, j in rng.sample(sites, len(sites)):
        instrs = list(p.core(core).instrs)
        st = instrs.pop(i)
        instrs.insert(j, st)  # a permutation of steps j..i: the table's ranges still cover them
        yield Mutant("store_early", p.name, core, i, f"store moved before step {j}", _with_core(p, core, instrs))


def _skip_kslice(p: Program, rng: random.Random) -> Iterator[Mutant]:
    sites = _sites(p, lambda rec, ins: rec.lane == "pe")
    for core, i, ins in rng.sample(sites, len(sites)):
        yield Mutant("skip_kslice", p.name, core, i, "one PE step (a K slice) skipped", _spliced(p, core, i, 1))


def _shared_barriers(p: Program) -> list[tuple[int, int, Any]]:
    """Barrier steps whose tag more than one core holds (the ones that order cores)."""
    sites = _sites(p, lambda rec, ins: rec.sync == "barrier")
    holders: dict[int, set[int]] = {}
    for core, _, ins in sites:
        holders.setdefault(ins.tag, set()).add(core)
    return [(core, i, ins) for core, i, ins in sites if len(holders[ins.tag]) > 1]


def _retag_barrier(p: Program, rng: random.Random) -> Iterator[Mutant]:
    """One core's barrier given a tag no other core holds: the same count of
    barriers everywhere, but that core no longer waits for the others."""
    sites = _shared_barriers(p)
    fresh = 1 + max((ins.tag for _, _, ins in _sites(p, lambda rec, ins: rec.sync == "barrier")), default=0)
    for core, i, ins in rng.sample(sites, len(sites)):
        yield Mutant("retag_barrier", p.name, core, i, f"barrier #{ins.tag} retagged #{fresh}",
                     _spliced(p, core, i, 1, (dataclasses.replace(ins, tag=fresh),)))


def _drop_core_barrier(p: Program, rng: random.Random) -> Iterator[Mutant]:
    """One core skips one barrier (its trailing one first): the others' barrier
    releases without it."""
    sites = _shared_barriers(p)
    last = {core: i for core, i, _ in sites}
    sites.sort(key=lambda s: (last[s[0]] != s[1], rng.random()))
    for core, i, ins in sites:
        yield Mutant("drop_core_barrier", p.name, core, i, f"core {core} skips barrier #{ins.tag}",
                     _spliced(p, core, i, 1))


def _lose_message(p: Program, rng: random.Random) -> Iterator[Mutant]:
    """A ring message that never arrives: the receive is gone and the sender no
    longer addresses that core."""
    recvs = _sites(p, lambda rec, ins: rec.sync == "recv")
    sends = {(ins.tag, peer): (core, i) for core, i, ins in _sites(p, lambda rec, ins: rec.sync == "send")
             for peer in ins.peers}
    for core, i, ins in rng.sample(recvs, len(recvs)):
        src = sends.get((ins.tag, core))
        if src is None:
            continue
        q = _spliced(p, core, i, 1)
        at = src[1] - (1 if src[0] == core and src[1] > i else 0)  # the sender's step, after the removal
        send = q.core(src[0]).instrs[at]
        peers = tuple(x for x in send.peers if x != core)
        q = _spliced(q, src[0], at, 1, (dataclasses.replace(send, peers=peers),) if peers else ())
        yield Mutant("lose_message", p.name, core, i, f"ring message #{ins.tag} to core {core} lost", q)


def _swap_messages(p: Program, rng: random.Random) -> Iterator[Mutant]:
    """Two ring messages a core receives land in each other's place."""
    pairs = []
    for c in p.cores:
        recvs = [(i, ins) for i, ins in enumerate(c.instrs) if isa.step(ins).sync == "recv"]
        for (i, x), (j, y) in zip(recvs, recvs[1:]):
            if x.dst != y.dst and x.dst.sizes == y.dst.sizes and x.dst.dtype == y.dst.dtype:
                pairs.append((c.core, i, x, j, y))
    for core, i, x, j, y in rng.sample(pairs, len(pairs)):
        instrs = list(p.core(core).instrs)
        instrs[i], instrs[j] = dataclasses.replace(x, dst=y.dst), dataclasses.replace(y, dst=x.dst)
        yield Mutant("swap_messages", p.name, core, i, f"ring messages #{x.tag} and #{y.tag} swap places",
                     _with_core(p, core, instrs))


def _lose_chunk(p: Program, rng: random.Random) -> Iterator[Mutant]:
    """A split reduction's merge misses one chunk's partial state."""
    sites = [(core, i, ins) for core, i, ins in _sites(p, lambda rec, ins: isinstance(ins, Combine))
             if any(len(chunks) > 1 for _, chunks in ins.partials)]
    for core, i, ins in rng.sample(sites, len(sites)):
        partials = tuple((pos, chunks[:-1] if len(chunks) > 1 else chunks) for pos, chunks in ins.partials)
        yield Mutant("lose_chunk", p.name, core, i, "a combine merges one chunk fewer",
                     _spliced(p, core, i, 1, (dataclasses.replace(ins, partials=partials),)))


def _moved_alloc(p: Program, core: int, b: Any, addr: int) -> Program:
    """``p`` with allocation ``b`` of ``core`` (its table entry and every view into
    it over its live steps) moved to ``addr``."""
    c = p.core(core)
    delta = b.addr - addr
    instrs = list(c.instrs)
    for i in range(max(b.first, 0), min(b.last, len(instrs) - 1) + 1):
        instrs[i] = _shift_views(instrs[i], b.addr, b.addr + b.nbytes, delta)
    allocs = tuple(dataclasses.replace(x, addr=addr) if x is b else x for x in c.allocs)
    cores = tuple(dataclasses.replace(k, instrs=tuple(instrs), allocs=allocs) if k.core == core else k
                  for k in p.cores)
    return dataclasses.replace(p, cores=cores)


def _overlap_alloc(p: Program, m: Machine, rng: random.Random) -> Iterator[Mutant]:
    """An allocation placed over another allocation live at the same time: what
    an allocator that forgets a slot does."""
    sites = []
    for c in p.cores:
        for a in c.allocs:
            for b in c.allocs:
                if a is not b and b.nbytes <= a.nbytes and b.addr != a.addr and a.first <= b.first <= a.last:
                    sites.append((c.core, a, b))
    for core, a, b in rng.sample(sites, len(sites)):
        yield Mutant("overlap_alloc", p.name, core, b.first, f"{b.name} placed over {a.name} while both are live",
                     _moved_alloc(p, core, b, a.addr))


def _free_at(c: CoreProgram, b: Any, addr: int) -> bool:
    """Whether ``b`` moved to ``addr`` shares no byte with an allocation live with it."""
    return not any(x is not b and x.addr < addr + b.nbytes and addr < x.addr + x.nbytes
                   and x.first <= b.last and b.first <= x.last for x in c.allocs)


def _lx_overflow(p: Program, m: Machine, rng: random.Random) -> Iterator[Mutant]:
    """An allocation placed across the end of the usable LX (what an allocator
    that forgets the reserved top does): the card has the bytes, the rules do not
    allow them."""
    sites = []
    for c in p.cores:
        for b in c.allocs:
            addr = (m.lx_usable_bytes - b.nbytes // 2) // m.stick_bytes * m.stick_bytes
            if b.nbytes >= 2 * m.stick_bytes and addr + b.nbytes <= m.lx_bytes and _free_at(c, b, addr):
                sites.append((c.core, b, addr))
    for core, b, addr in rng.sample(sites, len(sites)):
        yield Mutant("lx_overflow", p.name, core, b.first, f"{b.name} placed across the end of the usable LX",
                     _moved_alloc(p, core, b, addr))


def _dma_inside(c: CoreProgram, b: Any) -> bool:
    """Whether a DMA moves data into or out of allocation ``b`` (only a DMA's LX side must sit on a stick)."""
    for i in range(max(b.first, 0), min(b.last, len(c.instrs) - 1) + 1):
        moved = isa.transfer(c.instrs[i])
        if moved is not None and b.addr <= moved[1].addr < b.addr + b.nbytes:
            return True
    return False


def _misalign_alloc(p: Program, m: Machine, rng: random.Random) -> Iterator[Mutant]:
    """An allocation a DMA fills or drains moved off its stick boundary by half a
    stick (every view into it moved along, so the data stay consistent): a DMA
    cannot start there."""
    sites = []
    for c in p.cores:
        for b in c.allocs:
            addr = b.addr + m.stick_bytes // 2
            if addr + b.nbytes <= m.lx_usable_bytes and _free_at(c, b, addr) and _dma_inside(c, b):
                sites.append((c.core, b, addr))
    for core, b, addr in rng.sample(sites, len(sites)):
        yield Mutant("misalign_alloc", p.name, core, b.first, f"{b.name} moved half a stick off its boundary",
                     _moved_alloc(p, core, b, addr))


def _duplicate_core(p: Program, m: Machine, rng: random.Random) -> Iterator[Mutant]:
    """A core's whole share given to an idle core as well (a planner that hands out
    one tile twice): both write the same DRAM bytes, with the same values."""
    busy = {c.core for c in p.cores if c.instrs}
    idle = [k for k in range(m.cores) if k not in busy]
    sites = [c for c in p.cores if c.instrs and any(isa.step(i).dma == "out" for i in c.instrs)
             and all(isa.step(i).sync == "none" for i in c.instrs)]
    if not idle:
        return
    for c in rng.sample(sites, len(sites)):
        twin = dataclasses.replace(c, core=idle[0])
        cores = tuple(k for k in p.cores if k.core != idle[0]) + (twin,)
        yield Mutant("duplicate_core", p.name, c.core, -1, f"core {c.core}'s share run by core {idle[0]} too",
                     dataclasses.replace(p, cores=cores))


def _stale_read(p: Program, rng: random.Random) -> Iterator[Mutant]:
    """The step that fills an allocation which reuses bytes of an earlier one is
    dropped: its readers find what the previous owner left."""
    sites = []
    for c in p.cores:
        for y in c.allocs:
            if not 0 <= y.first < len(c.instrs) or isa.step(c.instrs[y.first]).dma != "in":
                continue
            if any(x.last < y.first and x.addr < y.addr + y.nbytes and y.addr < x.addr + x.nbytes for x in c.allocs):
                sites.append((c.core, y))
    for core, y in rng.sample(sites, len(sites)):
        yield Mutant("stale_read", p.name, core, y.first, f"the load filling {y.name} (reused bytes) dropped",
                     _spliced(p, core, y.first, 1))


def mutants(p: Program, m: Machine, per_operator: int, seed: int = 0) -> list[Mutant]:
    """Up to ``per_operator`` mutants of each applicable kind (of the program
    unrolled: the operators edit steps by their place in a core's stream)."""
    p = p.unrolled()
    rng = random.Random(seed)
    dtypes = {b.name: b.dtype for b in p.kernel.buffers} if p.kernel is not None else {}
    dtypes.update({n: dt for n, dt, _ in p.workspace})
    gens: dict[str, Callable[[], Iterator[Mutant]]] = {
        "drop_load": lambda: _drop_load(p, rng), "shift_tile": lambda: _shift_tile(p, m, dtypes, rng),
        "swap_cores": lambda: _swap_cores(p, rng), "drop_barrier": lambda: _drop_barrier(p, rng),
        "shrink_alloc": lambda: _shrink_alloc(p, m, rng), "store_early": lambda: _store_early(p, rng),
        "skip_kslice": lambda: _skip_kslice(p, rng),
        "retag_barrier": lambda: _retag_barrier(p, rng), "drop_core_barrier": lambda: _drop_core_barrier(p, rng),
        "lose_message": lambda: _lose_message(p, rng), "swap_messages": lambda: _swap_messages(p, rng),
        "lose_chunk": lambda: _lose_chunk(p, rng), "overlap_alloc": lambda: _overlap_alloc(p, m, rng),
        "stale_read": lambda: _stale_read(p, rng), "lx_overflow": lambda: _lx_overflow(p, m, rng),
        "misalign_alloc": lambda: _misalign_alloc(p, m, rng), "duplicate_core": lambda: _duplicate_core(p, m, rng),
        "past_end": lambda: _past_end(p, m, dtypes, rng),
    }
    out = []
    for op in OPERATORS:
        for n, mut in enumerate(gens[op]()):
            if n == per_operator:
                break
            out.append(mut)
    return out


def reference_run(kernel: Any, inputs: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The kernel's reference semantics on copies of ``inputs``."""
    bufs = {k: v.clone() for k, v in inputs.items()}
    run_kernel(kernel, bufs)
    return bufs
