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
import torch

from spyre_shims.kernel_ir import KernelGroup

from spyre_adapter.model.bodies import accesses, indirect_levels
from spyre_adapter.model.errors import DoesNotFit, EmulatorError
from spyre_adapter.model.machine import Machine
from spyre_adapter.model.program import Candidate, LoopPlan, Program, Resident, itemsize
from spyre_adapter.model.rules import first_violation
from spyre_adapter.model.structure import structure_digest
from spyre_adapter.model.timing import simulate
from spyre_adapter.scheduler.loop_program import Hold, LoopDivision, NeedsPhases, build, row_ranges
from spyre_adapter.scheduler.lx_alloc import LxFull
from spyre_adapter.scheduler.size_buckets import BucketChoices, bucket_of, sizes_key
from spyre_shims import index as sidx
from spyre_shims.reference import concrete
from spyre_adapter.scheduler.analysis import (Intervals, LoopInfo, access_footprint, analyse, boxes, merged,
                                              stick_intervals, union_footprint)

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
    numels = {b.name: int(concrete(b.storage_numel, sizes)) for b in group.buffers}
    infos = [analyse(k, dtypes, sizes, numels) for k in group.kernels]
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
    gm = GroupModel(group, infos, rows, mult, unit, accesses, internal, epc, any(i.rnumel > 1 for i in infos), kinds)
    gm.load_groups = _load_groups(gm)  # asked for by every core of every candidate division
    gm.key = (structure_digest(group), m, sizes_key(sizes), lx_planning)
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


#: A load every core needs whole is broadcast once over the ring only when it is
#: this small a share of LX (it stays resident for the whole kernel).
SHARED_LX_FRACTION = 0.125


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


def choose(gm: GroupModel, m: Machine) -> tuple[Division, dict[Division, float]]:
    """The cheapest division and every candidate's estimate."""
    costs = {d: _estimated(gm, m, d) for d in candidates(gm, m)}
    best = min(costs, key=lambda d: (costs[d], d.used))
    return best, costs


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


#: Largest number of chunks one core cuts a row into.
MAX_CHUNKS = 4096


def plan_group(group: KernelGroup, m: Machine, sizes: Mapping[sympy.Symbol, int], name: str,
               force: Division | None = None, lx_planning: bool = True, residency: Residency | None = None) -> Program:
    """Schedule a loop-kernel group onto the card: the cheapest division (by its
    closed-form estimate) whose program can be built and obeys every hardware
    rule (``force``: that division only; ``lx_planning`` off: every kernel of the
    group reads and writes DRAM, the baseline torch-spyre measured without LX
    planning; ``residency``: LX windows shared with neighbouring kernels)."""
    gm = model_group(group, m, sizes, lx_planning)
    if force is None and _data_dependent_stores(group):
        # Which elements a scatter writes depends on the data: two cores could
        # write one element (max_unpool's overlapping windows), a race on the card.
        force = Division(1)
    # Every operand of a tile needs at least one stick, twice (double buffering).
    least = 2 * m.stick_bytes * len(gm.accesses)
    if least > m.lx_usable_bytes:
        raise DoesNotFit(f"a tile of this group needs at least {least} B of LX ({len(gm.accesses)} operands, "
                         "one stick each, double-buffered)", f"lx_usable_bytes={m.lx_usable_bytes} per core", name)
    bucket = bucket_of(sizes) if force is None and residency is None else None
    if bucket is not None:
        # Run-time sizes: the division (or grid) is chosen once for their bucket
        # and built here for the exact sizes.
        recipe = _bucket_recipe(group, m, bucket, name, lx_planning)
        if recipe is not None:
            try:
                return _build_recipe(gm, m, recipe, name, sizes, lx_planning)
            except DoesNotFit:
                pass  # what the bucket chose does not build at these sizes: choose here
    costs = {force: _estimated(gm, m, force)} if force is not None else choose(gm, m)[1]
    order = sorted(costs, key=lambda d: (costs[d], d.used))
    cand = tuple(Candidate(d.cores, d.rsplit, round(c, 1)) for d, c in sorted(costs.items(), key=lambda t: t[1]))
    reasons = []
    for d in order:
        try:
            p = _build_division(gm, m, d, name, sizes, costs[d], cand, not lx_planning, residency)
        except DoesNotFit as exc:
            reasons.append(f"{d.cores}x{d.rsplit}: {exc}")
            continue
        # (without LX planning a one-kernel group has nothing to plan across kernels)
        if force is None and residency is None and (lx_planning or len(group.kernels) == 1):
            p = _better_grid(gm, m, p, costs[d], name, sizes, cand)
        return p
    if residency is None and force is None:
        for grid in grid_divisions(gm, m):
            try:
                return _finishing(_build_grid(gm, m, grid, name, sizes, cand), m)
            except DoesNotFit as exc:
                reasons.append(f"grid {'x'.join(map(str, grid))}: {exc}")
    shown = reasons[:3] + [r for r in reasons[3:] if r.startswith("grid")][:1]  # the grids' reason too
    raise DoesNotFit("no division of the loop group fits the machine",
                     f"{m.cores} cores, lx_usable_bytes={m.lx_usable_bytes} per core, "
                     f"span_bytes_per_core={m.span_bytes_per_core}", name, shown)


def _finishing(q: Program, m: Machine) -> Program:
    """``q``, whose timing simulation finishes: a grid of a phased group can order
    a ring transfer across a barrier, and a program that cannot finish is no division."""
    try:
        simulate(q, m, keep_events=False)
    except EmulatorError as exc:
        raise DoesNotFit(f"its program cannot finish ({exc})") from None
    return q


def _obeying(p: Program, m: Machine, numels: Mapping[str, int]) -> Program:
    """``p``, which obeys every hardware rule; else this division does not fit."""
    bad = first_violation(p, m, numels)
    if bad is not None:
        raise DoesNotFit(f"its program breaks a hardware rule ({bad})")
    return p


@dataclasses.dataclass(frozen=True)
class _Recipe:
    """What a group's plan at a size bucket chose: a row division or a grid, with
    the estimates it was chosen by (at the bucket's sizes)."""

    division: Division | None
    grid: tuple[int, ...]
    estimate_ns: float
    candidates: tuple[Candidate, ...]


#: Recipes by (structure, machine, bucket, LX planning).
_RECIPES: BucketChoices[_Recipe] = BucketChoices()


def _bucket_recipe(group: KernelGroup, m: Machine, bucket: Mapping[sympy.Symbol, int], name: str,
                   lx_planning: bool) -> _Recipe | None:
    """The division or grid :func:`plan_group` chooses at ``bucket`` (planned
    there once, with every check of a plan)."""
    def plan_at_bucket() -> _Recipe | None:
        plan = plan_group(group, m, bucket, name, lx_planning=lx_planning).plan
        return None if not isinstance(plan, LoopPlan) else _Recipe(
            None if plan.grid else Division(plan.row_cores, plan.rsplit), plan.grid, plan.estimate_ns, plan.candidates)
    return _RECIPES.get((structure_digest(group), m, sizes_key(bucket), lx_planning), plan_at_bucket)


def _build_recipe(gm: GroupModel, m: Machine, recipe: _Recipe, name: str, sizes: Mapping[sympy.Symbol, int],
                  lx_planning: bool) -> Program:
    """The program of a bucket's choice at the exact sizes; its plan keeps the
    bucket's estimates. A grid is simulated to the end first: never hand out
    one that cannot finish."""
    if recipe.division is not None:
        return _build_division(gm, m, recipe.division, name, sizes, recipe.estimate_ns, recipe.candidates,
                               not lx_planning)
    return _finishing(_build_grid(gm, m, recipe.grid, name, sizes, recipe.candidates), m)


def _data_dependent_stores(group: KernelGroup) -> bool:
    """Whether a kernel of the group stores (without accumulating) at an index
    computed from loaded data."""
    for lk in group.kernels:
        levels = indirect_levels(lk.body)
        if any(a.store and not a.atomic and a.pos in levels for a in accesses(lk.body)):
            return True
    return False


@dataclasses.dataclass(frozen=True)
class Residency:
    """LX windows a group shares with its neighbours (see :func:`.loop_program.build`)."""

    lx_in: tuple[Resident, ...] = ()
    keep: tuple[tuple[str, tuple[tuple[int, Hold], ...]], ...] = ()
    reserved: tuple[tuple[int, tuple[tuple[int, int], ...]], ...] = ()
    carry: tuple[Resident, ...] = ()


def _check_span(gm: GroupModel, m: Machine, d: Division) -> None:
    """A row division some core of which would address more than the per-core
    span of a tensor (from the accesses' affine bounds, before building)."""
    for rows in row_ranges(gm.rows, gm.unit, d.cores):
        if rows[0] >= rows[1]:
            continue
        for a in gm.accesses:
            vars_ = list(a.info.kernel.index_vars()[0]) + list(a.info.kernel.index_vars()[1])
            aff = sidx.affine(a.acc.expr, vars_)
            if aff is None:
                continue
            lo = hi = None
            for box in boxes(list(a.info.ranges), rows[0] * gm.mult[a.kernel], rows[1] * gm.mult[a.kernel]):
                full = list(box) + ([(0, 1)] * len(a.info.red) if a.acc.reduced else [(0, r) for r in a.info.red])
                b_lo = aff[0] + sum(c * (x if c > 0 else y - 1) for c, (x, y) in zip(aff[1], full))
                b_hi = aff[0] + sum(c * (y - 1 if c > 0 else x) for c, (x, y) in zip(aff[1], full))
                lo = b_lo if lo is None else min(lo, b_lo)
                hi = b_hi if hi is None else max(hi, b_hi)
            if lo is not None and (hi - lo + 1) * a.acc.itemsize > m.span_bytes_per_core:
                raise DoesNotFit(f"per-core span of {a.buffer}: {(hi - lo + 1) * a.acc.itemsize} B",
                                 f"span_bytes_per_core={m.span_bytes_per_core}")


def _build_division(gm: GroupModel, m: Machine, d: Division, name: str, sizes: Mapping[sympy.Symbol, int],
                    estimate: float, cand: tuple[Candidate, ...], phased: bool,
                    residency: Residency | None = None) -> Program:
    r = residency or Residency()
    keep = {buf: dict(per_core) for buf, per_core in r.keep}
    reserved = {c: list(rs) for c, rs in r.reserved}
    tile_rows = _tile_rows(gm, m, d)
    per_core = 1
    budget = m.lx_usable_bytes // 2
    if _row_bytes(gm, m) > budget and gm.reducing and not phased:
        per_core = 1 << max(0, math.ceil(math.log2(_row_bytes(gm, m) / budget)))
        tile_rows = gm.unit
    numels = {b.name: int(concrete(b.storage_numel, sizes)) for b in gm.group.buffers}
    _check_span(gm, m, d)
    while True:
        ld = LoopDivision(d.cores, d.rsplit, per_core, tile_rows, phased)
        fields = dict(row_cores=d.cores, rsplit=d.rsplit, rows=gm.rows, unit_rows=gm.unit,
                      tiles=-(-max(1, gm.rows // max(d.cores, 1)) // max(tile_rows, 1)), estimate_ns=round(estimate, 1),
                      candidates=cand)
        try:
            p = build(gm.group, m, sizes, name, max(gm.rows, 1), gm.unit, gm.mult, ld, fields,
                      r.lx_in, keep, reserved, r.carry)
        except NeedsPhases:
            if phased or d.rsplit > 1 or per_core > 1:
                raise DoesNotFit("a kernel reads what another tile produced, and this division cannot run in phases")
            phased = True
            continue
        except LxFull:
            if tile_rows > gm.unit:
                tile_rows = max(gm.unit, (tile_rows // 2) // gm.unit * gm.unit)
                continue
            longest = max((i.rnumel if i.rnumel > 1 else i.numel // max(gm.rows, 1) for i in gm.infos), default=1)
            if per_core < MAX_CHUNKS and not phased and per_core * 2 * 128 <= longest:
                per_core *= 2
                continue
            raise
        return _obeying(p, m, {**numels, **{n: k for n, _, k in p.workspace}})


def _pointwise_shape(gm: GroupModel) -> tuple[Any, ...]:
    """The iteration shape of a group of equal-shaped pointwise kernels; () for
    any other group (a grid splits such a group per dimension)."""
    shape = tuple(gm.infos[0].ranges) if gm.infos else ()
    return () if any(tuple(i.ranges) != shape or i.red for i in gm.infos) else shape


def grid_divisions(gm: GroupModel, m: Machine) -> list[tuple[int, ...]]:
    """Per-dimension splits of a group of equal-shaped pointwise kernels that keep
    every core's span of every tensor within the machine's limit (the fewest
    splits that do, then as many cores as the shape allows)."""
    shape = _pointwise_shape(gm)
    if not shape:
        return []
    accs = [(a.acc, a.acc.itemsize) for a in gm.accesses]
    affs = []
    for acc, isz in accs:
        vars_ = list(gm.infos[0].kernel.index_vars()[0])
        aff = sidx.affine(acc.expr, vars_)
        if aff is None:
            return []
        affs.append(([abs(c) for c in aff[1]], isz))
    split = [1] * len(shape)

    def ext(k: int) -> int:
        return -(-shape[k] // split[k])

    def worst() -> tuple[int, list[int], int]:
        spans = [(sum(c * (ext(k) - 1) for k, c in enumerate(co)) + 1) * isz for co, isz in affs]
        j = max(range(len(spans)), key=lambda x: spans[x])
        return spans[j], affs[j][0], affs[j][1]

    while True:
        span, co, _ = worst()
        if span <= m.span_bytes_per_core:
            break
        k = max(range(len(shape)), key=lambda x: co[x] * (ext(x) - 1))
        if ext(k) <= 1 or math.prod(split) * 2 > m.cores:
            return []
        split[k] *= 2
    out = [tuple(split)]
    more = list(split)
    for k in range(len(shape)):
        while math.prod(more) * 2 <= m.cores and -(-shape[k] // (more[k] * 2)) >= (128 if k == len(shape) - 1 else 1):
            more[k] *= 2
    if tuple(more) != out[0]:
        out.insert(0, tuple(more))
    return out


#: A row division whose simulated time exceeds its closed-form estimate by this
#: factor moves more bytes than the estimate assumed (rows cutting across the
#: sticks of a transposed operand): 2-D grids of the iteration space are tried.
GRID_TRIGGER = 1.25


def _grid_candidates(gm: GroupModel, m: Machine) -> list[tuple[int, ...]]:
    """2-D splits (powers of two, every core) of the two largest dimensions of a
    group of equal-shaped pointwise kernels; none for other groups."""
    shape = _pointwise_shape(gm)
    if len(shape) < 2 or not _crosses_sticks(gm):
        return []
    a, b = sorted(sorted(range(len(shape)), key=lambda k: -int(shape[k]))[:2])
    out = []
    s = 1
    while s <= m.cores:
        t = m.cores // s
        if s <= int(shape[a]) and t <= int(shape[b]):
            grid = [1] * len(shape)
            grid[a], grid[b] = s, t
            out.append(tuple(grid))
        s *= 2
    return out


def _crosses_sticks(gm: GroupModel) -> bool:
    """Whether some access does not run along the innermost iteration dimension
    (a transposed or strided operand): only then can rows of the flattened space
    cut across its sticks. Statically, so other groups pay no simulation."""
    vars_ = list(gm.infos[0].kernel.index_vars()[0])
    for a in gm.accesses:
        aff = sidx.affine(a.acc.expr, vars_)
        if aff is None:
            return True  # not affine: let the simulation decide
        inner = aff[1][-1]
        if inner not in (0, 1) or (inner == 0 and any(c != 0 for c in aff[1][:-1])):
            return True
    return False


def _better_grid(gm: GroupModel, m: Machine, p: Program, estimate: float, name: str,
                 sizes: Mapping[sympy.Symbol, int], cand: tuple[Candidate, ...]) -> Program:
    """``p``, or the fastest 2-D grid program when ``p`` simulates well over its
    estimate and a grid is faster (both by the timing model)."""
    grids = _grid_candidates(gm, m)
    if not grids:
        return p
    best_t = simulate(p, m, keep_events=False).total_ns
    if best_t <= GRID_TRIGGER * estimate:
        return p
    for grid in grids:
        try:
            q = _build_grid(gm, m, grid, name, sizes, cand)
            t = simulate(q, m, keep_events=False).total_ns
        except DoesNotFit:
            continue
        except EmulatorError:  # a grid of a phased group can order a ring transfer across a barrier
            continue
        if t < best_t:
            p, best_t = q, t
    return p


def _build_grid(gm: GroupModel, m: Machine, grid: tuple[int, ...], name: str, sizes: Mapping[sympy.Symbol, int],
                cand: tuple[Candidate, ...]) -> Program:
    per_point = sum(a.acc.itemsize for a in gm.accesses) or 1
    points = max(128, (m.lx_usable_bytes // 3) // per_point)
    numels = {b.name: int(concrete(b.storage_numel, sizes)) for b in gm.group.buffers}
    while True:
        ld = LoopDivision(1, grid=grid, tile_points=points)
        fields = dict(row_cores=1, rsplit=1, rows=gm.rows, unit_rows=gm.unit, tiles=0, grid=grid,
                      candidates=cand)
        try:
            p = build(gm.group, m, sizes, name, max(gm.rows, 1), gm.unit, gm.mult, ld, fields)
        except LxFull:
            if points <= 128:
                raise
            points //= 2
            continue
        return _obeying(p, m, {**numels, **{n: k for n, _, k in p.workspace}})
