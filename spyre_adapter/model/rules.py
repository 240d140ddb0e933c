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

from spyre_adapter.model import isa
from spyre_adapter.model.errors import EmulatorError
from spyre_adapter.model.machine import Machine
from spyre_adapter.model.program import Instruction, Lx, Program, Region, itemsize
from spyre_adapter.model.traffic import region_stick_set

__all__ = ["EmulatorError", "static_check", "first_violation", "overlaps", "buffer_dtypes"]


def buffer_dtypes(p: Program) -> dict[str, str]:
    out = {name: dt for name, dt, _ in p.workspace}
    if p.kernel is not None:
        for b in p.kernel.buffers:
            out[b.name] = b.dtype
    return out


class _StaticChecks:
    """The static rules of one program, step by step: what every view obeys here,
    what a step type adds through its record (:meth:`spyre_adapter.model.isa.Step.check`)."""

    def __init__(self, p: Program, m: Machine, numels: Mapping[str, int]) -> None:
        self.p, self.m, self.numels = p, m, numels
        self.dtypes = buffer_dtypes(p)
        self.core = self.step = self.epoch = 0
        self.spans: dict[tuple[int, str], list[int]] = {}
        self.stores: dict[str, list[tuple[int, int, Region]]] = defaultdict(list)  # buffer -> (core, epoch, region)
        self.loads: dict[str, list[tuple[int, int, Region]]] = defaultdict(list)

    def fail(self, kind: str, buffer: str, detail: str) -> EmulatorError:
        return EmulatorError(kind, self.p.name, self.core, self.step, buffer, detail)

    def views(self, ins: Instruction) -> int:
        """Every LX view of ``ins`` well formed, aligned to its dtype and inside the
        usable LX; returns the highest byte they touch."""
        peak = 0
        for v in isa.views(ins):
            if any(s < 0 for s in v.strides) or len(v.sizes) != len(v.strides):
                raise self.fail("malformed LX view", isa.buffer_of(self.p, ins, v), str(v))
            lo, hi = v.byte_range()
            if lo % v.itemsize:
                raise self.fail("misaligned LX view", isa.buffer_of(self.p, ins, v), f"{v.dtype} view at byte {lo}")
            if lo < 0 or hi > self.m.lx_usable_bytes:
                raise self.fail("allocation over capacity", isa.buffer_of(self.p, ins, v),
                                f"LX bytes {lo}..{hi} beyond the {self.m.lx_usable_bytes} B usable")
            peak = max(peak, hi)
        return peak

    def dma_lx(self, lx: Lx, buffer: str) -> None:
        if lx.addr % self.m.stick_bytes:
            raise self.fail("misaligned sticks", buffer,
                            f"DMA LX address {lx.addr} is not on a {self.m.stick_bytes}-byte stick")

    def dma_region(self, r: Region, lx: Lx, write: bool, accumulate: bool) -> None:
        if r.buffer not in self.numels:
            raise self.fail("unknown buffer", r.buffer, "not an argument")
        if r.numel != lx.numel or lx.dtype != self.dtypes.get(r.buffer):
            raise self.fail("DMA shape mismatch", r.buffer,
                            f"{r.numel} {self.dtypes.get(r.buffer)} elements vs LX {lx.numel} {lx.dtype}")
        if any(s < 0 for s in r.strides):
            raise self.fail("malformed DMA region", r.buffer, "negative stride")
        lo, hi = r.bounds()
        if r.numel and (lo < 0 or hi >= self.numels[r.buffer]):
            raise self.fail("DMA outside a tensor's bytes", r.buffer, f"elements {lo}..{hi} of {self.numels[r.buffer]}")
        if r.numel:
            sp = self.spans.setdefault((self.core, r.buffer), [lo, hi])
            sp[0], sp[1] = min(sp[0], lo), max(sp[1], hi)
            if not write:
                self.loads[r.buffer].append((self.core, self.epoch, r))
            elif not accumulate:  # accumulating stores add atomically
                self.stores[r.buffer].append((self.core, self.epoch, r))


def static_check(p: Program, m: Machine, numels: Mapping[str, int]) -> dict[int, int]:
    """The data-independent rules of a program; returns each core's LX peak
    (the highest byte its instructions touch). ``numels``: elements of every
    DRAM buffer the program addresses."""
    c_ = _StaticChecks(p, m, numels)
    peaks: dict[int, int] = {}
    held = {(r.core, r.addr, r.addr + (r.hi - r.lo) * itemsize(r.dtype)) for r in p.lx_in}
    for c in p.cores:
        c_.core, c_.epoch = c.core, 0
        peak = max((hi for core, lo, hi in held if core == c.core), default=0)
        for step, ins in enumerate(c.instrs):
            c_.step = step
            rec = isa.step(ins)
            if rec.sync == "barrier":
                c_.epoch += 1
                continue
            peak = max(peak, c_.views(ins))
            rec.check(ins, c_)
        peaks[c.core] = peak
    for (core, buf), (lo, hi) in c_.spans.items():
        nbytes = (hi - lo + 1) * itemsize(c_.dtypes[buf])
        if nbytes > m.span_bytes_per_core:
            raise EmulatorError("per-core span exceeded", p.name, core, -1, buf,
                                f"{nbytes} B > {m.span_bytes_per_core} B")
    _check_dram_races(p, m, c_.stores, c_.loads, c_.dtypes)
    return peaks


def first_violation(p: Program, m: Machine, numels: Mapping[str, int]) -> EmulatorError | None:
    """The first hardware rule ``p`` breaks (None: it obeys them all): how a planner
    passes over a division whose program it built."""
    try:
        static_check(p, m, numels)
    except EmulatorError as exc:
        return exc
    return None


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


def _bound(r: Region, isz: int, unit: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The one interval of ``unit``-sized pieces (bytes, sticks) spanning ``r``."""
    lo, hi = r.bounds()
    return torch.tensor([lo * isz // unit]), torch.tensor([((hi + 1) * isz - 1) // unit])


def _check_dram_races(p: Program, m: Machine, stores: dict, loads: dict, dtypes: dict[str, str]) -> None:
    # Exact intervals are only built where the regions' spans meet: a large
    # strided region has one interval per run, and most divisions give the
    # cores disjoint spans (planning checks every candidate it builds).
    for buf, items in stores.items():
        isz = itemsize(dtypes[buf])
        exact_of: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}

        def exact(r: Region) -> tuple[torch.Tensor, torch.Tensor]:
            if id(r) not in exact_of:
                exact_of[id(r)] = _byte_intervals(r, isz)
            return exact_of[id(r)]

        by_epoch: dict[int, list] = defaultdict(list)
        for core, epoch, r in items:
            by_epoch[epoch].append((core, r))
        for epoch, rs in by_epoch.items():
            if len({c for c, _ in rs}) < 2 or overlaps([(c, *_bound(r, isz, m.stick_bytes)) for c, r in rs]) is None:
                continue
            spans = [(c, *exact(r)) for c, r in rs]
            hit = overlaps(spans)
            if hit:
                raise EmulatorError("cross-core write conflict", p.name, hit[1], -1, buf,
                                    f"cores {hit[0]} and {hit[1]} both write byte {hit[2]} between the same barriers")
            sticks = [(c, f // m.stick_bytes, l_ // m.stick_bytes) for c, f, l_ in spans]
            hit = overlaps(sticks)
            if hit:
                raise EmulatorError("misaligned sticks", p.name, hit[1], -1, buf,
                                    f"cores {hit[0]} and {hit[1]} write parts of stick {hit[2]}: "
                                    "a core's share must be whole sticks")
        for core, epoch, r in loads.get(buf, ()):
            others = [(c, r2) for c, r2 in by_epoch.get(epoch, ()) if c != core]
            if not others or overlaps([(core, *_bound(r, isz, 1))] + [(c, *_bound(r2, isz, 1)) for c, r2 in others]) is None:
                continue
            hit = overlaps([(core, *exact(r))] + [(c, *exact(r2)) for c, r2 in others])
            if hit:
                raise EmulatorError("unordered DRAM access", p.name, core, -1, buf,
                                    f"reads byte {hit[2]} that core {hit[0] if hit[0] != core else hit[1]} writes "
                                    "between the same barriers (a barrier is missing)")


