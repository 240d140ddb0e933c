"""Planted bugs: mutated versions of real programs, each of which the emulator
must catch - an error, or numbers that no longer match the reference.

A mutant changes one thing a scheduler could get wrong: a load dropped, a DMA
region shifted by one stick, two cores' regions swapped, a barrier dropped, an
allocation shrunk into its neighbour, a store moved before the compute that
fills it, one K slice of a matmul skipped. If the emulator's results came from
anywhere but the program, mutants would survive.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import torch

from spyre_shims.reference import KernelFault, run_kernel

from spyre_adapter.emulator import Card, execute
from spyre_adapter.model import isa
from spyre_adapter.model.isa import lx_accesses
from spyre_adapter.model.machine import Machine
from spyre_adapter.model.program import CoreProgram, Program, itemsize
from spyre_adapter.model.rules import EmulatorError

__all__ = ["OPERATORS", "Mutant", "Outcome", "mutants", "judge"]

OPERATORS = ("drop_load", "shift_tile", "swap_cores", "drop_barrier", "shrink_alloc", "store_early", "skip_kslice")


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
    cores = [dataclasses.replace(c, instrs=tuple(instrs)) if c.core == core else c for c in p.cores]
    return dataclasses.replace(p, cores=tuple(cores))


def _sites(p: Program, which: Callable[[isa.Step[Any], Any], bool]) -> list[tuple[int, int, Any]]:
    """(core, step, instruction) of every step ``which(record, step)`` picks."""
    return [(c.core, i, ins) for c in p.cores for i, ins in enumerate(c.instrs) if which(isa.step(ins), ins)]


def _drop_load(p: Program, rng: random.Random) -> Iterator[Mutant]:
    sites = _sites(p, lambda rec, ins: rec.dma == "in")
    for core, i, ins in rng.sample(sites, len(sites)):
        instrs = list(p.core(core).instrs)
        del instrs[i]
        yield Mutant("drop_load", p.name, core, i, f"drop {type(ins).__name__}", _with_core(p, core, instrs))


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
        cores = [dataclasses.replace(c, instrs=tuple(i for i in c.instrs
                                                     if not (isa.step(i).sync == "barrier" and i.tag == tag)))
                 for c in p.cores]
        yield Mutant("drop_barrier", p.name, -1, -1, f"barrier #{tag} dropped", dataclasses.replace(p, cores=tuple(cores)))


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
        instrs.insert(j, st)
        yield Mutant("store_early", p.name, core, i, f"store moved before step {j}", _with_core(p, core, instrs))


def _skip_kslice(p: Program, rng: random.Random) -> Iterator[Mutant]:
    sites = _sites(p, lambda rec, ins: rec.lane == "pe")
    for core, i, ins in rng.sample(sites, len(sites)):
        instrs = list(p.core(core).instrs)
        del instrs[i]
        yield Mutant("skip_kslice", p.name, core, i, "one PE step (a K slice) skipped", _with_core(p, core, instrs))


def mutants(p: Program, m: Machine, per_operator: int, seed: int = 0) -> list[Mutant]:
    """Up to ``per_operator`` mutants of each applicable kind."""
    rng = random.Random(seed)
    dtypes = {b.name: b.dtype for b in p.kernel.buffers} if p.kernel is not None else {}
    dtypes.update({n: dt for n, dt, _ in p.workspace})
    gens: dict[str, Callable[[], Iterator[Mutant]]] = {
        "drop_load": lambda: _drop_load(p, rng), "shift_tile": lambda: _shift_tile(p, m, dtypes, rng),
        "swap_cores": lambda: _swap_cores(p, rng), "drop_barrier": lambda: _drop_barrier(p, rng),
        "shrink_alloc": lambda: _shrink_alloc(p, m, rng), "store_early": lambda: _store_early(p, rng),
        "skip_kslice": lambda: _skip_kslice(p, rng),
    }
    out = []
    for op in OPERATORS:
        for n, mut in enumerate(gens[op]()):
            if n == per_operator:
                break
            out.append(mut)
    return out


def _mismatch(got: torch.Tensor, want: torch.Tensor, atol: float, rtol: float) -> str | None:
    g, w = got.double(), want.double()
    nan = torch.isnan(g) != torch.isnan(w)
    bad = nan | ((g - w).abs() > atol + rtol * w.abs()) & ~torch.isnan(w)
    if bool(bad.any()):
        return f"{int(bad.sum())} wrong values"
    return None


def judge(mut: Mutant, inputs: Mapping[str, torch.Tensor], reference: Mapping[str, torch.Tensor],
          outputs: Sequence[str], m: Machine, atol: float = 1e-2, rtol: float = 1e-2) -> Outcome:
    """Run a mutant on copies of ``inputs``: killed by an error, or by outputs that
    differ from ``reference`` beyond the tolerance."""
    bufs = {k: v.clone() for k, v in inputs.items()}
    try:
        execute(mut.program, bufs, Card(m))
    except (EmulatorError, KernelFault, RuntimeError, IndexError, ValueError) as exc:
        return Outcome(mut, True, f"{type(exc).__name__}: {str(exc)[:160]}")
    for name in outputs:
        why = _mismatch(bufs[name], reference[name], atol, rtol)
        if why:
            return Outcome(mut, True, f"{name}: {why}")
    return Outcome(mut, False, "same results as the reference")


def reference_run(kernel: Any, inputs: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The kernel's reference semantics on copies of ``inputs``."""
    bufs = {k: v.clone() for k, v in inputs.items()}
    run_kernel(kernel, bufs)
    return bufs
