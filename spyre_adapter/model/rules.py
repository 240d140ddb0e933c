"""The hardware rules every Spyre program must respect, checked on the
program itself (its instructions, not what a planner declares): LX views inside
the usable capacity and aligned, DMA LX addresses on stick boundaries, DMA
regions inside their tensor, each core's span of each tensor, and no two cores
writing the same DRAM bytes (or parts of one stick), or one reading what
another writes, between the same barriers.

The scheduler uses them to pass over divisions that break a rule; the emulator
enforces them before it runs a program."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping

import torch

from spyre_adapter.model.machine import Machine
from spyre_adapter.model.program import (AddrGen, Barrier, Combine, DmaGather, DmaLoad, DmaScatter, DmaStore,
                                         Instruction, Lx, Pe, Program, Region, RingRecv, RingSend, Vec, itemsize)
from spyre_adapter.model.traffic import region_stick_set

__all__ = ["EmulatorError", "static_check", "overlaps", "lx_views", "buffer_dtypes"]


class EmulatorError(RuntimeError):
    """A program broke a hardware rule or read what it never wrote."""

    def __init__(self, kind: str, kernel: str, core: int, step: int, buffer: str, detail: str) -> None:
        self.kind, self.kernel, self.core, self.step, self.buffer = kind, kernel, core, step, buffer
        self.detail = detail
        super().__init__(f"{kind} in kernel {kernel}, core {core}, step {step}, buffer {buffer}: {detail}")



def _buffer_name(p: Program, ins: Instruction, lx: Lx | None = None) -> str:
    if isinstance(ins, DmaLoad):
        return ins.src.buffer
    if isinstance(ins, DmaStore):
        return ins.dst.buffer
    if isinstance(ins, (DmaGather, DmaScatter)):
        return ins.buffer
    if isinstance(ins, (Vec, AddrGen, Combine)) and lx is not None:
        body = p.bodies[ins.body].body
        for o in ins.operands:
            if o.lx == lx:
                return str(body[o.pos].args[0])
        return "partials"
    if isinstance(ins, Pe):
        return "pe operands"
    return "-"


def lx_views(ins: Instruction) -> list[Lx]:
    if isinstance(ins, DmaLoad):
        return [ins.dst]
    if isinstance(ins, DmaStore):
        return [ins.src]
    if isinstance(ins, DmaGather):
        return [ins.addrs, ins.dst]
    if isinstance(ins, DmaScatter):
        return [ins.src, ins.addrs]
    if isinstance(ins, RingSend):
        return [ins.src]
    if isinstance(ins, RingRecv):
        return [ins.dst]
    if isinstance(ins, Pe):
        return [ins.a, ins.b, ins.acc]
    if isinstance(ins, (Vec, AddrGen)):
        out = [o.lx for o in ins.operands]
        if isinstance(ins, Vec):
            out += [x for _, comps in ins.partials for x in comps]
        else:
            out += [t for _, t in ins.targets]
        return out
    if isinstance(ins, Combine):
        return [o.lx for o in ins.operands] + [x for _, ch in ins.partials for comps in ch for x in comps] + \
            [x for _, comps in ins.into for x in comps]
    return []


def buffer_dtypes(p: Program) -> dict[str, str]:
    out = {name: dt for name, dt, _ in p.workspace}
    if p.kernel is not None:
        for b in p.kernel.buffers:
            out[b.name] = b.dtype
    return out


def static_check(p: Program, m: Machine, numels: Mapping[str, int]) -> dict[int, int]:
    """The data-independent rules of a program; returns each core's LX peak
    (the highest byte its instructions touch). ``numels``: elements of every
    DRAM buffer the program addresses."""
    dtypes = buffer_dtypes(p)
    peaks: dict[int, int] = {}
    held = {(r.core, r.addr, r.addr + (r.hi - r.lo) * itemsize(r.dtype)) for r in p.lx_in}
    spans: dict[tuple[int, str], list[int]] = {}
    stores: dict[str, list[tuple[int, int, Region]]] = defaultdict(list)  # buffer -> (core, epoch, region)
    loads: dict[str, list[tuple[int, int, Region]]] = defaultdict(list)
    for c in p.cores:
        epoch = 0
        peak = max((hi for core, lo, hi in held if core == c.core), default=0)
        for step, ins in enumerate(c.instrs):
            if isinstance(ins, Barrier):
                epoch += 1
                continue
            for v in lx_views(ins):
                if any(s < 0 for s in v.strides) or len(v.sizes) != len(v.strides):
                    raise EmulatorError("malformed LX view", p.name, c.core, step, _buffer_name(p, ins, v), str(v))
                lo, hi = v.byte_range()
                if lo % v.itemsize:
                    raise EmulatorError("misaligned LX view", p.name, c.core, step, _buffer_name(p, ins, v),
                                        f"{v.dtype} view at byte {lo}")
                if lo < 0 or hi > m.lx_usable_bytes:
                    raise EmulatorError("allocation over capacity", p.name, c.core, step, _buffer_name(p, ins, v),
                                        f"LX bytes {lo}..{hi} beyond the {m.lx_usable_bytes} B usable")
                peak = max(peak, hi)
            if isinstance(ins, (DmaLoad, DmaStore, DmaGather, DmaScatter)):
                lxv = ins.dst if isinstance(ins, (DmaLoad, DmaGather)) else ins.src
                if lxv.addr % m.stick_bytes:
                    raise EmulatorError("misaligned sticks", p.name, c.core, step, _buffer_name(p, ins),
                                        f"DMA LX address {lxv.addr} is not on a {m.stick_bytes}-byte stick")
            if isinstance(ins, (DmaLoad, DmaStore)):
                r = ins.src if isinstance(ins, DmaLoad) else ins.dst
                lxv = ins.dst if isinstance(ins, DmaLoad) else ins.src
                if r.buffer not in numels:
                    raise EmulatorError("unknown buffer", p.name, c.core, step, r.buffer, "not an argument")
                if r.numel != lxv.numel or lxv.dtype != dtypes.get(r.buffer):
                    raise EmulatorError("DMA shape mismatch", p.name, c.core, step, r.buffer,
                                        f"{r.numel} {dtypes.get(r.buffer)} elements vs LX {lxv.numel} {lxv.dtype}")
                if any(s < 0 for s in r.strides):
                    raise EmulatorError("malformed DMA region", p.name, c.core, step, r.buffer, "negative stride")
                lo, hi = r.bounds()
                if r.numel and (lo < 0 or hi >= numels[r.buffer]):
                    raise EmulatorError("DMA outside a tensor's bytes", p.name, c.core, step, r.buffer,
                                        f"elements {lo}..{hi} of {numels[r.buffer]}")
                if r.numel:
                    sp = spans.setdefault((c.core, r.buffer), [lo, hi])
                    sp[0], sp[1] = min(sp[0], lo), max(sp[1], hi)
                    if isinstance(ins, DmaLoad):
                        loads[r.buffer].append((c.core, epoch, r))
                    elif not ins.accumulate:  # accumulating stores add atomically
                        stores[r.buffer].append((c.core, epoch, r))
        peaks[c.core] = peak
    for (core, buf), (lo, hi) in spans.items():
        nbytes = (hi - lo + 1) * itemsize(dtypes[buf])
        if nbytes > m.span_bytes_per_core:
            raise EmulatorError("per-core span exceeded", p.name, core, -1, buf,
                                f"{nbytes} B > {m.span_bytes_per_core} B")
    _check_dram_races(p, m, stores, loads, dtypes)
    return peaks


def _byte_intervals(r: Region, isz: int) -> tuple[torch.Tensor, torch.Tensor]:
    first, last = region_stick_set(r, isz, isz)  # "sticks" of one element: element intervals
    return first * isz, (last + 1) * isz - 1


def overlaps(items: list[tuple[int, torch.Tensor, torch.Tensor]]) -> tuple[int, int, int] | None:
    """First overlap between intervals of different owners: (owner a, owner b, byte)."""
    if len(items) < 2:
        return None
    own = torch.cat([torch.full_like(f, o) for o, f, _ in items])
    first = torch.cat([f for _, f, _ in items])
    last = torch.cat([l_ for _, _, l_ in items])
    order = first.argsort()
    own, first, last = own[order], first[order], last[order]
    reach, arg = torch.cummax(last, 0)
    hit = (first[1:] <= reach[:-1]) & (own[1:] != own[arg[:-1]])
    if bool(hit.any()):
        k = int(hit.nonzero()[0]) + 1
        return int(own[arg[k - 1]]), int(own[k]), int(first[k])
    return None


def _check_dram_races(p: Program, m: Machine, stores: dict, loads: dict, dtypes: dict[str, str]) -> None:
    for buf, items in stores.items():
        isz = itemsize(dtypes[buf])
        by_epoch: dict[int, list] = defaultdict(list)
        for core, epoch, r in items:
            by_epoch[epoch].append((core, r))
        for epoch, rs in by_epoch.items():
            if len({c for c, _ in rs}) < 2:
                continue
            exact = [(c, *_byte_intervals(r, isz)) for c, r in rs]
            hit = overlaps(exact)
            if hit:
                raise EmulatorError("cross-core write conflict", p.name, hit[1], -1, buf,
                                    f"cores {hit[0]} and {hit[1]} both write byte {hit[2]} between the same barriers")
            sticks = [(c, f // m.stick_bytes, l_ // m.stick_bytes) for c, f, l_ in exact]
            hit = overlaps(sticks)
            if hit:
                raise EmulatorError("misaligned sticks", p.name, hit[1], -1, buf,
                                    f"cores {hit[0]} and {hit[1]} write parts of stick {hit[2]}: "
                                    "a core's share must be whole sticks")
        for core, epoch, r in loads.get(buf, ()):
            others = [(c, r2) for c, e, r2 in items if e == epoch and c != core]
            if not others:
                continue
            hit = overlaps([(core, *_byte_intervals(r, isz))] + [(c, *_byte_intervals(r2, isz)) for c, r2 in others])
            if hit:
                raise EmulatorError("unordered DRAM access", p.name, core, -1, buf,
                                    f"reads byte {hit[2]} that core {hit[0] if hit[0] != core else hit[1]} writes "
                                    "between the same barriers (a barrier is missing)")


