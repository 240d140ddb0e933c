"""The closed-form model of a loop-kernel group's divisions: the group's rows
and each kernel's points per row (:func:`model_group`), what a core moves and
computes under a division, the operands cores load alike (sent over the ring
instead), and the estimate each candidate division is chosen by (:func:`choose`).
Nothing here builds a program: :mod:`.loops` builds the cheapest divisions and
keeps the first that obeys every rule.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

import sympy
import torch

from spyre_shims import index as sidx
from spyre_shims.kernel_ir import KernelGroup
from spyre_shims.reference import concrete

from spyre_adapter.model.costs import lane_cycles
from spyre_adapter.model.machine import Machine
from spyre_adapter.model.program import itemsize
from spyre_adapter.model.structure import structure_digest, structure_sizes
from spyre_adapter.scheduler.analysis import (Intervals, LoopInfo, access_footprint, analyse, merged, stick_intervals,
                                              union_footprint)
from spyre_adapter.scheduler.loop_layout import SHARED_LX_FRACTION  # the builder's rule, estimated
from spyre_adapter.scheduler.loop_program import row_ranges

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
    #: streamed loads by (buffer, kernel), see :func:`_load_groups`
    load_groups: dict[tuple[str, int], list[_Access]] = dataclasses.field(default_factory=dict)
    #: what the model is a function of: the group's structure, machine, sizes and LX planning
    key: tuple[Any, ...] = ()


def _granularity(infos: list[LoopInfo], mult: list[int], rows: int, m: Machine, internal: set[str]) -> int:
    """Smallest number of rows whose outputs are whole sticks (an intermediate
    kept in LX is never a DMA, so its row width does not count)."""
    g = 1
    for info, k in zip(infos, mult):
        for acc in info.accesses:
            if acc.store and acc.buffer not in internal:
                # A row is k contiguous elements, unless the row index is the store's
                # unit-stride one (a column of x.softmax(0)): then rows sit side by side.
                per_row = (1 if _row_is_innermost(info, acc) else k) * acc.itemsize
                need = m.stick_bytes // math.gcd(m.stick_bytes, per_row) if per_row else 1
                g = g * need // math.gcd(g, need)
    return max(1, min(g, rows))


def _row_is_innermost(info: LoopInfo, acc: Any) -> bool:
    """The access steps by one element along the row index (``i0``) and also
    moves with another iteration variable: neighbouring rows are neighbouring
    elements, and one row spans several sticks."""
    if len(info.ranges) < 2:
        return False
    aff = sidx.affine(acc.expr, info.kernel.index_vars()[0])
    return aff is not None and aff[1][0] == 1 and any(c != 0 for c in aff[1][1:])


def _bytes_per_row(infos: list[LoopInfo], mult: list[int], internal: set[str]) -> int:
    """DRAM bytes one row of the group streams at most (every access counted)."""
    return sum(k * max(1, info.rnumel) * acc.itemsize
               for info, k in zip(infos, mult) for acc in info.accesses if acc.buffer not in internal)


def model_group(group: KernelGroup, m: Machine, sizes: Mapping[sympy.Symbol, int],
                lx_planning: bool = True) -> GroupModel:
    """Work and traffic of a group. ``lx_planning``: keep a group's intermediates
    and re-read operands in LX (off: every sub-kernel reads and writes DRAM, the
    baseline torch-spyre measured without LX planning)."""
    dtypes = {b.name: b.dtype for b in group.buffers}
    numels = {b.name: int(concrete(b.storage_numel, sizes)) for b in group.buffers}
    infos = [analyse(k, dtypes, sizes, numels) for k in group.kernels]
    rows = min(i.numel for i in infos) if infos else 0
    if rows and all(i.numel % rows == 0 for i in infos):
        mult = [i.numel // rows for i in infos]
    else:  # iteration spaces that do not nest: run as one row
        rows, mult = 1, [i.numel for i in infos]
    internal = {b.name for b in group.buffers if b.role == "internal"} if lx_planning else set()
    unit = _granularity(infos, mult, rows, m, internal) if rows else 1
    if rows and internal:
        whole = _granularity(infos, mult, rows, m, set())
        if whole != unit and 2 * whole * _bytes_per_row(infos, mult, internal) <= m.lx_usable_bytes:
            unit = whole  # whole sticks of the LX-kept intermediate too: fewer, larger divisions to plan
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
    gm = GroupModel(group, infos, rows, mult, unit, accesses, internal, epc, any(i.rnumel > 1 for i in infos), kinds)
    gm.load_groups = _load_groups(gm)  # asked for by every core of every candidate division
    gm.key = (structure_digest(group), m, structure_sizes(group, sizes), lx_planning)
    return gm


@dataclasses.dataclass
class _CoreWork:
    rows: tuple[int, int]
    loads: dict[str, int]  # streamed loads per buffer
    stores: dict[str, int]  # streamed stores per buffer
    inv_bytes: dict[str, int]  # row-invariant / shared loads (once per core, kept in LX)
    lx_bytes: int  # bytes produced/consumed in LX only
    cycles: float

    @property
    def dma_bytes(self) -> int:
        return sum(self.loads.values()) + sum(self.stores.values())

    @property
    def store_bytes(self) -> int:
        return sum(self.stores.values())

    @property
    def channels(self) -> int:
        return len(self.loads) + len(self.stores)


def _kernel_ranges(gm: GroupModel, rows: tuple[int, int], rchunk: int, rsplit: int) -> list[tuple[int, int]]:
    """Per kernel, the flat iteration range a core runs; pointwise neighbours of
    a split reduction take the core's chunk of the rows."""
    out = []
    for k in gm.mult:
        a, b = rows[0] * k, rows[1] * k
        if k > 1 and rsplit > 1:
            a, b = _chunk(a, b, rchunk, rsplit), _chunk(a, b, rchunk + 1, rsplit)
        out.append((a, b))
    return out


def _red_range(info: LoopInfo, rchunk: int, rsplit: int) -> tuple[int, int] | None:
    """A core's chunk of a split reduction's extent (None: the whole extent)."""
    if rsplit == 1 or info.rnumel == 1:
        return None
    return (info.rnumel * rchunk // rsplit, info.rnumel * (rchunk + 1) // rsplit)


def _load_groups(gm: GroupModel) -> dict[tuple[str, int], list[_Access]]:
    """Streamed loads by (buffer, kernel): loads of one buffer in one kernel move
    the union of what they touch once (rotate-half reads the same rows twice)."""
    groups: dict[tuple[str, int], list[_Access]] = {}
    for acc in gm.accesses:
        if not acc.store and not acc.lx and not acc.invariant:
            groups.setdefault((acc.buffer, acc.kernel), []).append(acc)
    return groups


def _group_bytes(m: Machine, accs: list[_Access], rng: tuple[int, int],
                 red: tuple[int, int] | None) -> int:
    first = accs[0]
    return union_footprint(first.info, [a.acc for a in accs], rng[0], rng[1], m.stick_bytes, red)


def _core_work(gm: GroupModel, m: Machine, rows: tuple[int, int], rchunk: int = 0, rsplit: int = 1,
               shared: frozenset[tuple[str, int]] = frozenset()) -> _CoreWork:
    """What one core moves and computes. ``shared``: (buffer, kernel) loads every
    core needs whole, loaded once and broadcast over the ring like row-invariant ones."""
    rfrac = 1.0 / rsplit
    ranges = _kernel_ranges(gm, rows, rchunk, rsplit)
    reds = [_red_range(info, rchunk, rsplit) for info in gm.infos]
    loads: dict[str, int] = {}
    stores: dict[str, int] = {}
    inv: dict[str, int] = {}
    lx = 0
    cycles = 0.0
    sfu_extra = m.sfu_cycles_per_stick - 1
    for k, info in enumerate(gm.infos):
        n = (rows[1] - rows[0]) * gm.mult[k]
        red = info.rnumel * rfrac
        if info.rnumel == 1:
            n = n * rfrac  # a split reduction's pointwise neighbours split the same way
        cycles += (n * red * (info.vec_pre + info.sfu_pre * sfu_extra) + n * (info.vec_post + info.sfu_post * sfu_extra)) / gm.epc
        cycles += n * red * lane_cycles(info.kernel, m)
    for acc in gm.accesses:
        if not (acc.store or acc.lx or acc.invariant):
            continue  # streamed loads: by group below
        rng = ranges[acc.kernel]
        _, nbytes = access_footprint(acc.info, acc.acc, rng[0], rng[1], m.stick_bytes, reds[acc.kernel])
        if acc.store and acc.acc.reduced and rsplit > 1:
            nbytes //= rsplit  # partials are combined over the ring; the row group stores once
        if acc.lx:
            lx += nbytes
        elif acc.invariant:
            inv[acc.buffer] = max(inv.get(acc.buffer, 0), nbytes)
        else:
            stores[acc.buffer] = stores.get(acc.buffer, 0) + nbytes
    for key, accs in gm.load_groups.items():
        k = key[1]
        nbytes = _group_bytes(m, accs, ranges[k], reds[k])
        if key in shared:
            inv[key[0]] = max(inv.get(key[0], 0), nbytes)
        else:
            loads[key[0]] = loads.get(key[0], 0) + nbytes
    return _CoreWork(rows, loads, stores, inv, lx, cycles)




def _shared_loads(gm: GroupModel, m: Machine, d: Division) -> frozenset[tuple[str, int]]:
    """Streamed loads that every core of division ``d`` needs whole (RoPE's cos and
    sin across heads, a per-head table): one DMA and a ring broadcast instead of
    one DRAM read per core."""
    if d.used == 1:
        return frozenset()
    ranges = [r for r in row_ranges(gm.rows, gm.unit, d.cores) if r[0] < r[1]]
    out = set()
    for key, accs in gm.load_groups.items():
        k = key[1]
        info = gm.infos[k]
        whole = _group_bytes(m, accs, (0, gm.rows * gm.mult[k]), None)
        if whole == 0 or whole > SHARED_LX_FRACTION * m.lx_usable_bytes:
            continue
        if all(_group_bytes(m, accs, rng, _red_range(info, rc, d.rsplit)) == whole
               for r in ranges for rc in range(d.rsplit)
               for rng in [_kernel_ranges(gm, r, rc, d.rsplit)[k]]):
            out.add(key)
    return frozenset(out)


def _tiles(work: _CoreWork, m: Machine) -> tuple[int, int]:
    """(number of LX tiles, peak LX bytes) for double-buffered streaming."""
    inv = sum(work.inv_bytes.values())
    stream = work.dma_bytes + work.lx_bytes
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
    ranges = row_ranges(gm.rows, gm.unit, d.cores)
    total_rd = total_wr = 0.0
    worst = 0.0
    shared_inv = 0.0
    shared = _shared_loads(gm, m, d)
    duplicates = _duplicate_reads(gm, m, d, shared) if d.rsplit == 1 else {}
    for c, r in enumerate(ranges):
        if r[0] >= r[1]:
            continue
        w = _core_work(gm, m, r, 0, d.rsplit, shared)
        tiles, _ = _tiles(w, m)
        dma = w.dma_bytes
        inv = sum(w.inv_bytes.values())
        shared_inv = max(shared_inv, inv)
        received = sum(w.loads.get(buf, 0) for buf in duplicates.get(c, {}))  # over the ring, not DRAM
        total_rd += (dma - w.store_bytes) * d.rsplit - received
        total_wr += w.store_bytes * (1 if d.rsplit == 1 else 1)
        compute_ns = w.cycles / m.clock_ghz
        dma_ns = dma / m.core_dma_gbps + (tiles * w.channels) * m.dma_setup_ns
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


#: Estimates by (group model key, division). An estimate depends on the group's
#: structure only (buffer names are labels): residency re-plans a group with its
#: division forced, and identical layers ask for the same divisions.
_ESTIMATES: dict[tuple[Any, ...], float] = {}
_MAX_ESTIMATES = 1 << 16


def _estimated(gm: GroupModel, m: Machine, d: Division) -> float:
    """:func:`_estimate`, once per group structure, machine, sizes and division."""
    if not gm.key or gm.key[1] != m:
        return _estimate(gm, m, d)
    key = (gm.key, d)
    got = _ESTIMATES.get(key)
    if got is None:
        if len(_ESTIMATES) >= _MAX_ESTIMATES:
            _ESTIMATES.clear()
        got = _ESTIMATES[key] = _estimate(gm, m, d)
    return got


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


def estimates(gm: GroupModel, m: Machine) -> dict[Division, float]:
    """Every candidate division's estimate."""
    return {d: _estimated(gm, m, d) for d in candidates(gm, m)}


def choose(gm: GroupModel, m: Machine) -> tuple[Division, dict[Division, float]]:
    """The cheapest division and every candidate's estimate."""
    costs = estimates(gm, m)
    return ranked(gm, m, costs)[0], costs


def ranked(gm: GroupModel, m: Machine, costs: Mapping[Division, float]) -> list[Division]:
    """Divisions cheapest first. Among divisions the estimate ties (a DRAM-bound
    group on 4 or on 32 cores) more cores come first, up to one streamed tile
    (``TILE_TARGET_BYTES``) of DRAM traffic per core: a tie means the shared DRAM
    rate binds, and more cores keep more requests in flight where the model's
    rate is optimistic (torch-spyre's 8 and 16-core reductions reached 0.54 of
    the 32-core bandwidth; the lane cost models 1 to 4 cores); below a tile per
    core, more cores add only fixed costs (and steps to plan and check), so fewer
    come first."""
    moved = _core_work(gm, m, (0, gm.rows)).dma_bytes if gm.rows else 0
    useful = max(1, moved // TILE_TARGET_BYTES)
    return sorted(costs, key=lambda d: (costs[d], -min(d.used, useful), d.used))


def _read_signatures(gm: GroupModel, m: Machine, rows: tuple[int, int], rchunk: int, rsplit: int,
                     shared: frozenset[tuple[str, int]]) -> dict[str, bytes | None]:
    """Per streamed buffer, the exact stick set a core reads (canonical bytes; None
    when it can only be bounded). Equal signatures: two cores read the same data."""
    ranges = _kernel_ranges(gm, rows, rchunk, rsplit)
    per_buffer: dict[str, list[Intervals]] = {}
    for (buf, k), accs in gm.load_groups.items():
        if (buf, k) in shared:
            continue
        red = _red_range(gm.infos[k], rchunk, rsplit)
        per_buffer.setdefault(buf, []).extend(
            stick_intervals(a.info, a.acc, *ranges[k], m.stick_bytes, red) for a in accs)
    out: dict[str, bytes | None] = {}
    for buf, ivs in per_buffer.items():
        if any(iv is None for iv in ivs):
            out[buf] = None
            continue
        f, last = merged((torch.cat([iv[0] for iv in ivs]), torch.cat([iv[1] for iv in ivs])))  # type: ignore[index]
        out[buf] = f.numpy().tobytes() + b"|" + last.numpy().tobytes() if f.numel() else None
    return out


def _duplicate_reads(gm: GroupModel, m: Machine, d: Division,
                     shared: frozenset[tuple[str, int]]) -> dict[int, dict[str, int]]:
    """Per core index (in stream order), the buffers it reads exactly as an earlier
    core does, with that core: it loads them and this one receives them over the ring."""
    if d.used == 1:
        return {}
    seen: dict[tuple[str, bytes], int] = {}
    out: dict[int, dict[str, int]] = {}
    core = 0
    for rows in row_ranges(gm.rows, gm.unit, d.cores):
        for rc in range(d.rsplit):
            if rows[0] < rows[1]:
                for buf, sig in _read_signatures(gm, m, rows, rc, d.rsplit, shared).items():
                    if sig is None:
                        continue
                    if (buf, sig) in seen:
                        out.setdefault(core, {})[buf] = seen[(buf, sig)]
                    else:
                        seen[(buf, sig)] = core
            core += 1
    return out


def _chunk(a: int, b: int, k: int, parts: int, align: int = 128) -> int:
    """Boundary k of ``parts`` chunks of [a, b), on multiples of ``align`` elements
    (whole sticks for every dtype)."""
    if k >= parts:
        return b
    return min(b, a + ((b - a) * k // parts) // align * align)


def _tile_rows(gm: GroupModel, m: Machine, d: Division) -> int:
    """Rows per tile: double-buffered tiles that fit LX beside the operands kept
    for the whole kernel, and small enough that the first load and the last
    store (not overlapped with compute) stay short."""
    ranges = [r for r in row_ranges(gm.rows, gm.unit, d.cores) if r[0] < r[1]]
    if not ranges:
        return gm.unit
    r = max(ranges, key=lambda r: r[1] - r[0])
    w = _core_work(gm, m, r, 0, d.rsplit, _shared_loads(gm, m, d))
    tiles, _ = _tiles(w, m)
    units = -(-(r[1] - r[0]) // gm.unit)
    return max(1, -(-units // tiles)) * gm.unit


def _row_bytes(gm: GroupModel, m: Machine) -> int:
    """LX bytes one unit of rows streams through (all kernels, whole reductions)."""
    w = _core_work(gm, m, (0, min(gm.rows, gm.unit)))
    return w.dma_bytes + w.lx_bytes + sum(w.inv_bytes.values())
