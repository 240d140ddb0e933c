"""Work division and LX tiling of loop-kernel groups (pointwise, reductions,
and what Inductor fused from them).

The group's iteration space is ``N`` rows (its smallest kernel's numel) of
``numel_k / N`` points per kernel. Cores get contiguous row ranges in units of
whole output sticks; a reduction with fewer rows than cores can instead split
its reduction extent across cores (partials combined over the ring). Each
candidate division is costed and the cheapest wins. Within a core, rows are
tiled so that a double-buffered tile fits in LX; operands that do not depend on
the rows (weights of a norm, a bias) are loaded once and shared over the ring.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

import sympy

from spyre_shims.kernel_ir import KernelGroup

from ..machine import Machine
from ..program import CoreStream, Instr, Program
from .analysis import LoopInfo, access_footprint, analyse, itemsize

#: Reductions whose partials combine exactly (so the extent may be split over cores).
SPLITTABLE = frozenset({"sum", "max", "min", "any", "prod", "welford_reduce", "online_softmax_reduce",
                        "argmax", "argmin"})


@dataclasses.dataclass(frozen=True)
class Division:
    """How a group is spread over the card."""

    cores: int  # cores along rows
    rsplit: int = 1  # reduction chunks per row group (cores used = cores * rsplit)

    @property
    def used(self) -> int:
        return self.cores * self.rsplit


@dataclasses.dataclass
class _Access:
    buffer: str
    store: bool
    kernel: int
    info: LoopInfo
    acc: Any
    invariant: bool = False
    lx: bool = False  # served from LX inside the group


@dataclasses.dataclass
class GroupModel:
    """Everything the cost model needs about a group, computed once."""

    group: KernelGroup
    infos: list[LoopInfo]
    rows: int
    mult: list[int]
    unit: int
    accesses: list[_Access]
    internal: set[str]
    epc: float  # vector elements per cycle
    reducing: bool
    kinds: set[str]


def _granularity(infos: list[LoopInfo], mult: list[int], rows: int, m: Machine) -> int:
    """Smallest number of rows whose outputs are whole sticks."""
    g = 1
    for info, k in zip(infos, mult):
        for acc in info.accesses:
            if acc.store:
                per_row = k * acc.itemsize
                need = m.stick_bytes // math.gcd(m.stick_bytes, per_row) if per_row else 1
                g = g * need // math.gcd(g, need)
    return max(1, min(g, rows))


def model_group(group: KernelGroup, m: Machine, sizes: Mapping[sympy.Symbol, int],
                lx_planning: bool = True) -> GroupModel:
    """Work and traffic of a group. ``lx_planning``: keep a group's intermediates
    and re-read operands in LX (off: every sub-kernel reads and writes DRAM, the
    baseline torch-spyre measured without LX planning)."""
    dtypes = {b.name: b.dtype for b in group.buffers}
    infos = [analyse(k, dtypes, sizes) for k in group.kernels]
    rows = min(i.numel for i in infos) if infos else 0
    if rows and all(i.numel % rows == 0 for i in infos):
        mult = [i.numel // rows for i in infos]
    else:  # iteration spaces that do not nest: run as one row
        rows, mult = 1, [i.numel for i in infos]
    internal = {b.name for b in group.buffers if b.role == "internal"} if lx_planning else set()
    unit = _granularity(infos, mult, rows, m) if rows else 1
    accesses: list[_Access] = []
    written: set[str] = set()
    loaded: dict[tuple[str, int, int], int] = {}  # (buffer, footprint of a unit, of all rows)
    for k, info in enumerate(infos):
        for acc in info.accesses:
            lx = lx_planning and (acc.buffer in internal or (not acc.store and acc.buffer in written))
            if lx_planning and not acc.store and not lx and rows:
                # A second load of the same data in the group is served by LX.
                sig = (acc.buffer, access_footprint(info, acc, 0, min(unit, rows) * mult[k], m.stick_bytes)[1],
                       access_footprint(info, acc, 0, rows * mult[k], m.stick_bytes)[1])
                lx = sig in loaded
                loaded.setdefault(sig, k)
            accesses.append(_Access(acc.buffer, acc.store, k, info, acc, lx=lx))
        written |= {a.buffer for a in info.accesses if a.store}
    # Row-invariant loads: one unit touches as much as all rows.
    for a in accesses:
        if not a.store and not a.lx and rows > unit:
            k = mult[a.kernel]
            _, one = access_footprint(a.info, a.acc, 0, unit * k, m.stick_bytes)
            _, two = access_footprint(a.info, a.acc, unit * k, min(2 * unit, rows) * k, m.stick_bytes)
            _, all_ = access_footprint(a.info, a.acc, 0, rows * k, m.stick_bytes)
            a.invariant = one == all_ and one == two
    widths = [itemsize(b.dtype) for b in group.buffers if b.dtype not in ("int64", "int32", "bool")]
    epc = m.vector_bytes_per_cycle / max(2, min(widths) if widths else 2)
    kinds = {k for i in infos for k in i.reduction_kinds}
    return GroupModel(group, infos, rows, mult, unit, accesses, internal, epc, any(i.rnumel > 1 for i in infos),
                      kinds)


def _row_ranges(rows: int, unit: int, cores: int) -> list[tuple[int, int]]:
    units = -(-rows // unit)
    out = []
    for c in range(cores):
        a = min(rows, (c * units // cores) * unit)
        b = min(rows, ((c + 1) * units // cores) * unit)
        out.append((a, b))
    return out


@dataclasses.dataclass
class _CoreWork:
    rows: tuple[int, int]
    dma_bytes: dict[str, int]  # streamed per buffer (loads and stores)
    inv_bytes: dict[str, int]  # row-invariant loads (once per core)
    lx_bytes: int  # bytes produced/consumed in LX only
    cycles: float
    store_bytes: int


def _core_work(gm: GroupModel, m: Machine, rows: tuple[int, int], rfrac: float) -> _CoreWork:
    a, b = rows
    dma: dict[str, int] = {}
    inv: dict[str, int] = {}
    lx = 0
    store = 0
    cycles = 0.0
    sfu_extra = m.sfu_cycles_per_stick - 1
    for k, info in enumerate(gm.infos):
        n = (b - a) * gm.mult[k]
        red = info.rnumel * rfrac
        if info.rnumel == 1:
            n = n * rfrac  # a split reduction's pointwise neighbours split the same way
        cycles += (n * red * (info.vec_pre + info.sfu_pre * sfu_extra) + n * (info.vec_post + info.sfu_post * sfu_extra)) / gm.epc
    for acc in gm.accesses:
        k = gm.mult[acc.kernel]
        _, nbytes = access_footprint(acc.info, acc.acc, a * k, b * k, m.stick_bytes)
        if not acc.acc.reduced and rfrac < 1:
            # This core's share of the reduction extent, in whole sticks.
            nbytes = -(-int(math.ceil(nbytes * rfrac)) // m.stick_bytes) * m.stick_bytes
        if acc.lx:
            lx += nbytes
        elif acc.invariant:
            inv[acc.buffer] = max(inv.get(acc.buffer, 0), nbytes)
        else:
            dma[acc.buffer] = dma.get(acc.buffer, 0) + nbytes
            if acc.store:
                store += nbytes
    return _CoreWork(rows, dma, inv, lx, cycles, store)


def _tiles(work: _CoreWork, m: Machine) -> tuple[int, int]:
    """(number of LX tiles, peak LX bytes) for double-buffered streaming."""
    inv = sum(work.inv_bytes.values())
    stream = sum(work.dma_bytes.values()) + work.lx_bytes
    room = max(m.lx_usable_bytes - inv, m.lx_usable_bytes // 4)
    if stream == 0:
        return 1, inv
    # Double-buffered tiles that fit, and small enough that the first load and
    # the last store (not overlapped with compute) stay short.
    n = max(1, math.ceil(2 * stream / room), math.ceil(stream / TILE_TARGET_BYTES))
    return n, inv + min(stream, 2 * math.ceil(stream / n))


#: Streamed bytes per LX tile the tiler aims for (fill/drain vs per-DMA setup).
TILE_TARGET_BYTES = 64 * 1024


def _estimate(gm: GroupModel, m: Machine, d: Division) -> float:
    """Closed-form time (ns) of a division, for choosing among candidates."""
    ranges = _row_ranges(gm.rows, gm.unit, d.cores)
    total_rd = total_wr = 0.0
    worst = 0.0
    shared_inv = 0.0
    for r in ranges:
        if r[0] >= r[1]:
            continue
        w = _core_work(gm, m, r, 1.0 / d.rsplit)
        tiles, _ = _tiles(w, m)
        dma = sum(w.dma_bytes.values())
        inv = sum(w.inv_bytes.values())
        shared_inv = max(shared_inv, inv)
        total_rd += (dma - w.store_bytes) * d.rsplit
        total_wr += w.store_bytes * (1 if d.rsplit == 1 else 1)
        compute_ns = w.cycles / m.clock_ghz
        dma_ns = dma / m.core_dma_gbps + (tiles * len(w.dma_bytes)) * m.dma_setup_ns
        fill = (dma / tiles) / m.core_dma_gbps if tiles else 0.0
        ring_ns = inv / m.ring_gbps if d.used > 1 else inv / m.core_dma_gbps
        worst = max(worst, max(compute_ns, dma_ns) + fill + ring_ns)
    total_rd += shared_inv
    dram_ns = (total_rd + total_wr) / m.dram_gbps(total_rd, total_wr) if (total_rd + total_wr) else 0.0
    sync = m.sync_ns if d.used > 1 else 0.0
    combine = 0.0
    if d.rsplit > 1:
        combine = gm.rows * 8 * d.rsplit / m.ring_gbps + m.sync_ns
    return m.kernel_launch_ns + max(worst, dram_ns) + sync + combine


def candidates(gm: GroupModel, m: Machine) -> list[Division]:
    units = -(-gm.rows // gm.unit) if gm.rows else 1
    out = []
    k = 1
    while k <= m.cores:
        if k <= units:
            out.append(Division(k))
        k *= 2
    if m.cores not in (d.cores for d in out) and m.cores <= units:
        out.append(Division(m.cores))
    if gm.reducing and gm.kinds <= SPLITTABLE and units < m.cores:
        red = max(i.rnumel for i in gm.infos)
        base = min(units, m.cores)
        r = 2
        while base * r <= m.cores and red // r >= 64:
            out.append(Division(base, r))
            r *= 2
    return out


def choose(gm: GroupModel, m: Machine) -> tuple[Division, dict[Division, float]]:
    """The cheapest division and every candidate's estimate."""
    costs = {d: _estimate(gm, m, d) for d in candidates(gm, m)}
    best = min(costs, key=lambda d: (costs[d], d.used))
    return best, costs


def plan_group(group: KernelGroup, m: Machine, sizes: Mapping[sympy.Symbol, int], name: str,
               force: Division | None = None, lx_planning: bool = True) -> Program:
    """Schedule a loop-kernel group onto the card (``force``: a fixed division
    instead of the cheapest; ``lx_planning``: see :func:`model_group`)."""
    gm = model_group(group, m, sizes, lx_planning)
    if gm.rows == 0:
        return Program(name, "loop", group, [], {"cores": 0}, {str(k): v for k, v in sizes.items()})
    best, costs = choose(gm, m) if force is None else (force, {force: _estimate(gm, m, force)})
    ranges = _row_ranges(gm.rows, gm.unit, best.cores)
    streams: list[CoreStream] = []
    core = 0
    for rr in ranges:
        for rc in range(best.rsplit):
            streams.append(_stream(gm, m, core, rr, rc, best.rsplit))
            core += 1
    if best.rsplit > 1:
        _combine_partials(streams, gm, m, best)
    if best.used > 1:
        for s in streams:
            if s.instrs:
                s.instrs.append(Instr("barrier", note="end of kernel"))
    division = {"cores": best.used, "row_cores": best.cores, "rsplit": best.rsplit, "rows": gm.rows,
                "unit_rows": gm.unit, "candidates": {f"{d.cores}x{d.rsplit}": round(c) for d, c in costs.items()}}
    prog = Program(name, "loop", group, streams, division, {str(k): v for k, v in sizes.items()},
                   flops=_vector_ops(gm), compulsory_bytes=compulsory_bytes(gm, m), rsplit=best.rsplit)
    return prog


def _stream(gm: GroupModel, m: Machine, core: int, rows: tuple[int, int], rchunk: int, rsplit: int) -> CoreStream:
    w = _core_work(gm, m, rows, 1.0 / rsplit)
    ranges = []
    for k in gm.mult:
        a, b = rows[0] * k, rows[1] * k
        if k > 1 and rsplit > 1:  # pointwise neighbours of a split reduction: this core's chunk
            a, b = _chunk(a, b, rchunk, rsplit), _chunk(a, b, rchunk + 1, rsplit)
        ranges.append((a, b))
    stream = CoreStream(core, [], ranges=ranges, rchunk=(rchunk, rsplit))
    if rows[0] >= rows[1]:
        return stream
    tiles, peak = _tiles(w, m)
    stream.lx_peak = peak
    ins = stream.instrs
    for buf, nbytes in w.inv_bytes.items():
        owner = core == 0
        if owner or rsplit * len(gm.infos) == 0:
            ins.append(Instr("dma_in", buf, nbytes, note="row-invariant operand, broadcast on the ring"))
        else:
            ins.append(Instr("ring", buf, nbytes, peer=0, note="row-invariant operand from core 0"))
    loads = {a.buffer for a in gm.accesses if not a.store and not a.lx and not a.invariant}
    for t in range(tiles):
        for buf, nbytes in w.dma_bytes.items():
            if buf in loads and not _is_store_only(gm, buf):
                ins.append(Instr("dma_in", buf, _share(nbytes, tiles, t), tile=t))
        ins.append(Instr("vec", "", 0, w.cycles / tiles, tile=t,
                         note=f"{len(gm.infos)} loop kernel(s), rows {rows[0]}:{rows[1]}"))
        for acc in gm.accesses:
            if acc.store and not acc.lx and acc.buffer in w.dma_bytes:
                nbytes = _store_bytes(gm, m, acc.buffer, rows, rsplit)
                ins.append(Instr("dma_out", acc.buffer, _share(nbytes, tiles, t), tile=t))
    return stream


def _chunk(a: int, b: int, k: int, parts: int, align: int = 128) -> int:
    """Boundary k of ``parts`` chunks of [a, b), on multiples of ``align`` elements
    (whole sticks for every dtype)."""
    if k >= parts:
        return b
    return min(b, a + ((b - a) * k // parts) // align * align)


def _is_store_only(gm: GroupModel, buf: str) -> bool:
    return all(a.store for a in gm.accesses if a.buffer == buf)


def _store_bytes(gm: GroupModel, m: Machine, buf: str, rows: tuple[int, int], rsplit: int) -> int:
    total = 0
    for acc in gm.accesses:
        if acc.store and acc.buffer == buf:
            k = gm.mult[acc.kernel]
            total += access_footprint(acc.info, acc.acc, rows[0] * k, rows[1] * k, m.stick_bytes)[1]
    return total // rsplit if rsplit > 1 else total


def _share(total: int, parts: int, k: int) -> int:
    return total * (k + 1) // parts - total * k // parts


def _combine_partials(streams: list[CoreStream], gm: GroupModel, m: Machine, d: Division) -> None:
    """Reduction partials travel over the ring to the row group's first core."""
    per_row = 8 * max(1, len(gm.kinds))
    for s in streams:
        rc, _ = s.rchunk
        if rc and s.instrs:
            nbytes = (s.ranges[0][1] - s.ranges[0][0]) * per_row
            s.instrs.append(Instr("ring", "partials", nbytes, peer=s.core - rc, note="reduction partials"))


def _vector_ops(gm: GroupModel) -> float:
    return float(sum(gm.rows * k * (i.rnumel * i.vec_pre + i.vec_post) for i, k in zip(gm.infos, gm.mult)))


def compulsory_bytes(gm: GroupModel, m: Machine) -> int:
    """Each external input read once, each external output written once (sticks)."""
    per_buf: dict[str, int] = {}
    for acc in gm.accesses:
        if acc.buffer in gm.internal or (not acc.store and acc.lx):
            continue
        k = gm.mult[acc.kernel]
        _, nbytes = access_footprint(acc.info, acc.acc, 0, gm.rows * k, m.stick_bytes)
        key = acc.buffer + ("/w" if acc.store else "/r")
        per_buf[key] = max(per_buf.get(key, 0), nbytes)
    return sum(per_buf.values())
