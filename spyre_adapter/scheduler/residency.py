"""LX residency across kernels: what stays in a core's scratchpad from one
kernel to the next.

Runs once per compiled graph, over its programs in execution order. When a
kernel reads a buffer the previous kernel wrote, and on every core the part it
reads is exactly what that core wrote (the partitions line up), the data can
stay in LX: the consumer's loads of it are served from LX instead of DRAM, as
long as both kernels still fit (producer: working set plus the kept output;
consumer: working set plus the kept input) - otherwise it is spilled as usual.
When no later kernel reads the buffer and it is not a graph output, the
producer's store is elided as well: the value never reaches DRAM.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from spyre_shims.kernel_ir import ExternKernel, KernelGroup

from ..emulator.checks import Extent, _addr_bounds
from ..machine import Machine
from ..program import Program
from .analysis import analyse


@dataclasses.dataclass
class Decision:
    """One buffer kept in LX between two kernels."""

    buffer: str
    producer: str
    consumer: str
    bytes_per_core: dict[int, int]
    store_elided: bool


def _extents(p: Program, buffer: str, store: bool) -> dict[int, Extent] | None:
    """Per core, the address interval of ``buffer`` a program stores (or loads);
    None when it cannot be stated exactly as one interval per core."""
    k = p.kernel
    if isinstance(k, ExternKernel):
        # A matmul's core owns a block of output rows; it is one interval only
        # when the block spans every column (no split of N).
        if not store or k.output.name != buffer or len(k.output.size) != 2:
            return None
        n = int(k.output.size[-1])
        out: dict[int, Extent] = {}
        for s in p.cores:
            if not s.instrs:
                continue
            _, rows, cols, _ = s.ranges
            if tuple(cols) != (0, n) or (p.ksplit > 1 and tuple(s.ranges[3])[0] != 0):
                return None
            out[s.core] = Extent(rows[0] * n, rows[1] * n - 1)
        return out
    if not isinstance(k, KernelGroup) or p.rsplit > 1:
        return None
    dtypes = {b.name: b.dtype for b in k.buffers}
    infos = [analyse(lk, dtypes, {}) for lk in k.kernels]
    out = {}
    for s in p.cores:
        if not s.instrs:
            continue
        ext: Extent | None = None
        for kk, info in enumerate(infos):
            a, b = s.ranges[kk]
            for acc in info.accesses:
                if acc.buffer != buffer or acc.store != store or a >= b:
                    continue
                e = _addr_bounds(info, acc, a, b)
                if e is None:
                    return None
                ext = e if ext is None else Extent(min(ext.lo, e.lo), max(ext.hi, e.hi))
        if ext is not None:
            out[s.core] = ext
    return out


def _reads(p: Program) -> set[str]:
    k = p.kernel
    if isinstance(k, ExternKernel):
        return {b.name for b in k.inputs}
    return {b.name for b in k.buffers if b.role in ("input", "inout")} if isinstance(k, KernelGroup) else set()


#: A consumer may be re-divided to line up with its producer when that costs
#: at most this much more (in its own closed-form estimate).
REPLAN_SLACK = 1.10


def plan_residency(programs: list[Program], graph_outputs: set[str], m: Machine) -> list[Decision]:
    """Mark LX-resident loads (and elided stores) in consecutive programs, in
    place; a loop-group consumer whose division does not line up with its
    producer's is re-divided to match when that is (nearly) as cheap."""
    decisions: list[Decision] = []
    for i in range(len(programs) - 1):
        prod, cons = programs[i], programs[i + 1]
        if prod.kernel is None or cons.kernel is None or not isinstance(cons.kernel, KernelGroup):
            continue
        for buffer in sorted(_written(prod) & _reads(cons)):
            d = _keep(prod, cons, buffer, m)
            if d is None and _alignable(prod, cons):
                aligned = _replan_like(prod, cons, m)
                if aligned is not None and _keep(prod, aligned, buffer, m) is not None:
                    programs[i + 1] = cons = aligned
                    d = _keep(prod, cons, buffer, m)
            if d is None:
                continue
            later = any(buffer in _reads(p) for p in programs[i + 2:] if p.kernel is not None)
            d.store_elided = buffer not in graph_outputs and not later and _all_cores(prod, cons, d)
            _apply(prod, cons, d)
            decisions.append(d)
    return decisions


def _alignable(prod: Program, cons: Program) -> bool:
    return (isinstance(prod.kernel, KernelGroup) and prod.rsplit == 1
            and prod.division.get("rows") == cons.division.get("rows")
            and prod.division.get("row_cores") != cons.division.get("row_cores"))


def _replan_like(prod: Program, cons: Program, m: Machine) -> Program | None:
    from .loops import Division, plan_group

    want = Division(int(prod.division["row_cores"]))
    candidates = cons.division.get("candidates", {})
    best = min(candidates.values(), default=None)
    mine = candidates.get(f"{want.cores}x1")
    if best is None or mine is None or mine > REPLAN_SLACK * best:
        return None
    p = plan_group(cons.kernel, m, {}, cons.name, force=want)
    p.division["candidates"] = candidates
    p.division["aligned_with"] = prod.name
    return p


def _written(p: Program) -> set[str]:
    k = p.kernel
    if isinstance(k, ExternKernel):
        return {k.output.name}
    if isinstance(k, KernelGroup):
        return {b.name for b in k.buffers if b.role in ("output", "inout")}
    return set()


def _keep(prod: Program, cons: Program, buffer: str, m: Machine) -> Decision | None:
    wrote = _extents(prod, buffer, store=True)
    reads = _extents(cons, buffer, store=False)
    if not wrote or not reads:
        return None
    isz = next(b for b in cons.kernel.buffers if b.name == buffer).dtype
    from .analysis import itemsize

    size = itemsize(isz)
    per_core: dict[int, int] = {}
    peaks = {s.core: s.lx_peak for s in cons.cores}
    prod_peaks = {s.core: s.lx_peak for s in prod.cores}
    for core, r in reads.items():
        w = wrote.get(core)
        if w is None or r.lo < w.lo or r.hi > w.hi:
            return None  # this core reads data another core wrote
        nbytes = (w.hi - w.lo + 1) * size
        if peaks.get(core, 0) + nbytes > m.lx_usable_bytes or prod_peaks.get(core, 0) + nbytes > m.lx_usable_bytes:
            return None  # no room to keep it: it goes through DRAM
        per_core[core] = nbytes
    return Decision(buffer, prod.name, cons.name, per_core, False)


def _all_cores(prod: Program, cons: Program, d: Decision) -> bool:
    stored = {s.core for s in prod.cores if any(i.op == "dma_out" and i.buffer == d.buffer for i in s.instrs)}
    return stored <= set(d.bytes_per_core)


def _apply(prod: Program, cons: Program, d: Decision) -> None:
    saved = 0
    for s in cons.cores:
        if s.core not in d.bytes_per_core:
            continue
        s.lx_peak += d.bytes_per_core[s.core]
        for ins in s.instrs:
            if ins.op == "dma_in" and ins.buffer == d.buffer and not ins.resident:
                ins.resident = True
                saved += ins.bytes
    cons.compulsory_bytes = max(cons.compulsory_bytes - saved, 0)
    cons.division.setdefault("lx_resident_inputs", []).append(d.buffer)
    for s in prod.cores:
        if s.core in d.bytes_per_core:
            s.lx_peak += d.bytes_per_core[s.core]
        if d.store_elided:
            for ins in s.instrs:
                if ins.op == "dma_out" and ins.buffer == d.buffer:
                    ins.resident = True
    if d.store_elided:
        prod.division.setdefault("lx_elided_outputs", []).append(d.buffer)
        written = sum(i.bytes for s in prod.cores for i in s.instrs if i.op == "dma_out" and i.buffer == d.buffer)
        prod.compulsory_bytes = max(prod.compulsory_bytes - written, 0)


def summary(decisions: Sequence[Decision]) -> dict[str, Any]:
    """Counts for the report."""
    return {"kept": len(decisions), "stores_elided": sum(d.store_elided for d in decisions),
            "bytes_kept": sum(sum(d.bytes_per_core.values()) for d in decisions)}
