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

from spyre_shims import index as sidx
from spyre_shims.kernel_ir import KernelGroup
from spyre_shims.reference import KernelFault, concrete

from spyre_adapter.model.bodies import accesses, indirect_levels
from spyre_adapter.model.costs import lane_reductions
from spyre_adapter.model.errors import DoesNotFit, EmulatorError
from spyre_adapter.model.gc_pause import gc_paused
from spyre_adapter.model.machine import Machine
from spyre_adapter.model.program import Candidate, LoopPlan, Program, Resident
from spyre_adapter.model.rules import first_violation
from spyre_adapter.model.structure import structure_digest, structure_sizes
from spyre_adapter.model.timing import simulate
from spyre_adapter.scheduler.analysis import boxes
from spyre_adapter.scheduler.loop_estimates import (Division, GroupModel, _estimated, _row_bytes, _tile_rows, estimates,
                                                    model_group, ranked)
from spyre_adapter.scheduler.loop_program import Hold, LoopDivision, NeedsPhases, build, row_ranges
from spyre_adapter.scheduler.lx_alloc import LxFull
from spyre_adapter.scheduler.size_buckets import BucketChoices, bucket_of

#: Largest number of chunks one core cuts a row into.
MAX_CHUNKS = 4096


#: At a size bucket, a division whose program keeps one structure over the
#: bucket is taken over a faster one when its estimate is within this factor of
#: the best: a decode then binds that program at every size of the bucket
#: instead of planning one per token. 1.15 is the spread the closed-form
#: estimates themselves have against simulation (up to 15 %, see the planner's
#: max-autotune notes), so the choice is within what the estimates can tell apart.
STABLE_SLACK = 1.15


def within_slack(stable: float, best: float, m: Machine) -> bool:
    """Whether a time ``stable`` (ns) of a division that keeps one structure over a
    bucket is close enough to the ``best`` one's to be preferred: within
    :data:`STABLE_SLACK`, or by no more than one barrier's release
    (``m.sync_ns``), the smallest fixed cost of a launch on several cores. A
    decode kernel of a microsecond (a KV cache append over two heads: 1.12 us
    on the two cores that keep the heads whole, 0.79 us on 32 that cut them)
    otherwise pays a plan every token to save a third of a microsecond."""
    return stable <= STABLE_SLACK * best or stable - best <= m.sync_ns


@gc_paused
def plan_group(group: KernelGroup, m: Machine, sizes: Mapping[sympy.Symbol, int], name: str,
               force: Division | None = None, lx_planning: bool = True, residency: Residency | None = None,
               below: GroupModel | None = None) -> Program:
    """Schedule a loop-kernel group onto the card: the cheapest division (by its
    closed-form estimate) whose program can be built and obeys every hardware
    rule (``force``: that division only; ``lx_planning`` off: every kernel of the
    group reads and writes DRAM, the baseline torch-spyre measured without LX
    planning; ``residency``: LX windows shared with neighbouring kernels;
    ``below``: the group's model one size lower in the bucket these sizes top,
    which prefers divisions that keep one structure over the bucket)."""
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
    if bucket is None and below is None and force is None and residency is None and sizes:
        below = _model_below(group, m, sizes, lx_planning)  # a bucket's own sizes: its top
    if bucket is not None:
        # Run-time sizes: the division (or grid) is chosen once for their bucket
        # and built here for the exact sizes.
        recipe = _bucket_recipe(group, m, bucket, name, lx_planning)
        if recipe is not None:
            try:
                return _build_recipe(gm, m, recipe, name, sizes, lx_planning)
            except DoesNotFit:
                pass  # what the bucket chose does not build at these sizes: choose here
    costs = {force: _estimated(gm, m, force)} if force is not None else estimates(gm, m)
    order = ranked(gm, m, costs)
    cand = tuple(Candidate(d.cores, d.rsplit, round(c, 1)) for d, c in sorted(costs.items(), key=lambda t: t[1]))
    reasons: list[str] = []
    grids = force is None and residency is None and (lx_planning or len(group.kernels) == 1)
    if below is not None and residency is None and order:
        # A bucket's top: first the divisions that keep one structure over the
        # bucket, tiles included (cores take whole slabs and so do their tiles).
        for d in _stable_first(gm, below, order, costs, m):
            try:
                p = _build_division(gm, m, d, name, sizes, costs[d], cand, not lx_planning)
                tiles = _stable_tiles(gm, below, d, _plan_tiles(p))
                if not tiles:
                    continue
                if tiles != _plan_tiles(p):
                    p = _build_division(gm, m, d, name, sizes, costs[d], cand, not lx_planning, tiles=tiles)
            except DoesNotFit:
                continue
            # (without LX planning a one-kernel group has nothing to plan across kernels)
            return _better_grid(gm, m, p, costs[d], name, sizes, cand, below) if grids else p
    for d in order:
        try:
            p = _build_division(gm, m, d, name, sizes, costs[d], cand, not lx_planning, residency)
        except DoesNotFit as exc:
            reasons.append(f"{d.cores}x{d.rsplit}: {exc}")
            continue
        return _better_grid(gm, m, p, costs[d], name, sizes, cand) if grids else p
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


def stable_division(gm: GroupModel, below: GroupModel, d: Division) -> bool:
    """Whether division ``d`` cuts the rows at the same places relative to the
    size at both models' sizes (adjacent sizes of a bucket): each core gets whole
    slabs of the iteration dimensions outside the first one that moves with the
    size, in whole units, so its rows move affinely with the size and its tiles
    cut the same boxes; a reduction is split only where it does not change with
    the size. Rows that do not change with the size divide the same way at both."""
    if gm.unit != below.unit or gm.mult != below.mult:
        return False
    if d.rsplit > 1 and [i.rnumel for i in gm.infos] != [i.rnumel for i in below.infos]:
        return False
    if gm.rows == below.rows:
        return True
    slabs = _slabs(gm, below)
    return slabs is not None and slabs % d.cores == 0 and _whole_units(gm, below, slabs, slabs // d.cores)


def _slabs(gm: GroupModel, below: GroupModel) -> int | None:
    """How many slabs the rows are at both models' sizes: the product of the row
    kernel's iteration dimensions outside the first one that differs between
    them (None: no such kernel or dimension)."""
    k = next((k for k, x in enumerate(gm.mult) if x == 1), None)
    if k is None:
        return None
    top, under = [int(x) for x in gm.infos[k].ranges], [int(x) for x in below.infos[k].ranges]
    moved = next((j for j, (a, b) in enumerate(zip(top, under)) if a != b), None)
    if moved is None or len(top) != len(under):
        return None
    slabs = math.prod(top[:moved])
    return slabs if gm.rows % slabs == 0 and below.rows % slabs == 0 else None


def _whole_units(gm: GroupModel, below: GroupModel, slabs: int, per_piece: int) -> bool:
    """Whether ``per_piece`` slabs are whole units of rows at both models' sizes."""
    return all((rows // slabs * per_piece) % gm.unit == 0 for rows in (gm.rows, below.rows))


def _plan_tiles(p: Program) -> int:
    return p.plan.tiles if isinstance(p.plan, LoopPlan) else 0


def _stable_tiles(gm: GroupModel, below: GroupModel, d: Division, tiles: int) -> int:
    """Tiles per core for a stable division over a bucket whose top needed
    ``tiles``: at least that many, each whole slabs in whole units (0: no such
    count, as many as fit at each size)."""
    if gm.rows == below.rows:
        return tiles
    slabs = _slabs(gm, below)
    if slabs is None:
        return 0
    per_core = slabs // d.cores
    return next((t for t in range(max(tiles, 1), per_core + 1)
                 if per_core % t == 0 and _whole_units(gm, below, slabs, per_core // t)), 0)


def stable_grid(gm: GroupModel, below: GroupModel, grid: tuple[int, ...]) -> bool:
    """Whether a grid splits only dimensions whose extent is the same at both
    models' sizes (a dimension of the run-time size split over cores moves a
    row from core to core as the size grows)."""
    shape, under = _pointwise_shape(gm), _pointwise_shape(below)
    return len(shape) == len(under) == len(grid) and all(
        g == 1 or int(a) == int(b) for g, a, b in zip(grid, shape, under))


def _stable_first(gm: GroupModel, below: GroupModel, order: list[Division], costs: Mapping[Division, float],
                  m: Machine) -> list[Division]:
    """The divisions of ``order`` that keep one structure over the bucket and
    estimate close enough to the best (:func:`within_slack`), in ``order``'s order."""
    best = min(costs[d] for d in order)
    return [d for d in order if within_slack(costs[d], best, m) and stable_division(gm, below, d)]


@dataclasses.dataclass(frozen=True)
class _Recipe:
    """What a group's plan at a size bucket chose: a row division or a grid, with
    the estimates it was chosen by (at the bucket's sizes), and the tiles per
    core of a row division there (0: as many as fit at each size)."""

    division: Division | None
    grid: tuple[int, ...]
    estimate_ns: float
    candidates: tuple[Candidate, ...]
    tiles: int = 0


#: Recipes by (structure, machine, bucket, LX planning).
_RECIPES: BucketChoices[_Recipe] = BucketChoices()


def _bucket_recipe(group: KernelGroup, m: Machine, bucket: Mapping[sympy.Symbol, int], name: str,
                   lx_planning: bool) -> _Recipe | None:
    """The division or grid :func:`plan_group` chooses at ``bucket`` (planned
    there once, with every check of a plan)."""
    def plan_at_bucket() -> _Recipe | None:
        below = _model_below(group, m, bucket, lx_planning)
        plan = plan_group(group, m, bucket, name, lx_planning=lx_planning, below=below).plan
        if not isinstance(plan, LoopPlan):
            return None
        division = None if plan.grid else Division(plan.row_cores, plan.rsplit)
        # A stable division keeps the top's tile count over the bucket (the tile
        # rows then move with the size; as many tiles as fit would change with it).
        tiles = 0
        if division is not None and below is not None:
            gm = model_group(group, m, bucket, lx_planning)
            if stable_division(gm, below, division):
                tiles = _stable_tiles(gm, below, division, plan.tiles)
        return _Recipe(division, plan.grid, plan.estimate_ns, plan.candidates, tiles)
    return _RECIPES.get((structure_digest(group), m, structure_sizes(group, bucket), lx_planning), plan_at_bucket)


def _model_below(group: KernelGroup, m: Machine, bucket: Mapping[sympy.Symbol, int],
                 lx_planning: bool) -> GroupModel | None:
    """The group's model one size below the bucket's top (every run-time size
    less one; None when that leaves the bucket or the group cannot be modelled there)."""
    if any(v < 4 for v in bucket.values()):
        return None
    try:
        return model_group(group, m, {k: v - 1 for k, v in bucket.items()}, lx_planning)
    except (DoesNotFit, KernelFault, ValueError, ZeroDivisionError):
        return None


def _build_recipe(gm: GroupModel, m: Machine, recipe: _Recipe, name: str, sizes: Mapping[sympy.Symbol, int],
                  lx_planning: bool) -> Program:
    """The program of a bucket's choice at the exact sizes; its plan keeps the
    bucket's estimates. A grid is simulated to the end first: never hand out
    one that cannot finish."""
    if recipe.division is not None:
        return _build_division(gm, m, recipe.division, name, sizes, recipe.estimate_ns, recipe.candidates,
                               not lx_planning, tiles=recipe.tiles)
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
                    residency: Residency | None = None, tiles: int = 0) -> Program:
    """``tiles``: this many tiles per core (the bucket's), where they fit; 0: as
    many as LX needs at these sizes."""
    r = residency or Residency()
    keep = {buf: dict(per_core) for buf, per_core in r.keep}
    reserved = {c: list(rs) for c, rs in r.reserved}
    tile_rows = _tile_rows(gm, m, d)
    if tiles > 0:
        units = -(-max(1, gm.rows // max(d.cores, 1)) // gm.unit)
        tile_rows = max(1, -(-units // tiles)) * gm.unit
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
        if per_core == 1 and not phased and fields["tiles"] <= 1 and _lane_bound(gm):
            p = _pipelined(gm, m, d, name, sizes, fields, r, keep, reserved, tile_rows, p)
        return _obeying(p, m, {**numels, **{n: k for n, _, k in p.workspace}})


def _lane_bound(gm: GroupModel) -> bool:
    """A group with a reduction along the stick (whether chunking it pays is
    settled by simulating both programs)."""
    return any(info.rnumel > 1 and lane_reductions(info.kernel.body, len(info.red)) for info in gm.infos)


def _pipelined(gm: GroupModel, m: Machine, d: Division, name: str, sizes: Mapping[sympy.Symbol, int],
               fields: dict[str, Any], r: Residency, keep: dict[str, Any], reserved: dict[int, Any],
               tile_rows: int, p: Program) -> Program:
    """``p`` runs each core's rows as one tile: its reductions along the stick
    start only when the whole tile has arrived. The same division with each row's
    reduction cut in consecutive chunks per core overlaps loading one chunk with
    reducing the last; it is kept when it simulates :data:`PIPELINE_GAIN` faster
    (a multi-pass group, softmax, reloads what it cannot keep and usually is not)."""
    longest = max((i.rnumel for i in gm.infos), default=1)
    chunks = 4
    if chunks * 128 > longest:
        return p
    try:
        alt = build(gm.group, m, sizes, name, max(gm.rows, 1), gm.unit, gm.mult,
                    LoopDivision(d.cores, d.rsplit, chunks, tile_rows, False), fields, r.lx_in, keep, reserved, r.carry)
    except (NeedsPhases, LxFull, DoesNotFit):
        return p
    # More steps cost emulation time on every launch: worth it only for a real gain.
    if simulate(alt, m, keep_events=False).total_ns < PIPELINE_GAIN * simulate(p, m, keep_events=False).total_ns:
        return alt
    return p


#: A chunked row reduction replaces the one-tile program when it simulates at least this much faster.
PIPELINE_GAIN = 0.95


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
                 sizes: Mapping[sympy.Symbol, int], cand: tuple[Candidate, ...],
                 below: GroupModel | None = None) -> Program:
    """``p``, or the fastest 2-D grid program when ``p`` simulates well over its
    estimate and a grid is faster (both by the timing model). ``below``: ``p``
    keeps one structure over a size bucket (see :func:`plan_group`); a grid that
    does not must then be faster by more than :func:`within_slack` allows."""
    grids = _grid_candidates(gm, m)
    if not grids:
        return p
    best_t = simulate(p, m, keep_events=False).total_ns
    if best_t <= GRID_TRIGGER * estimate:
        return p
    stable_t = best_t
    for grid in grids:
        try:
            q = _build_grid(gm, m, grid, name, sizes, cand)
            t = simulate(q, m, keep_events=False).total_ns
        except DoesNotFit:
            continue
        except EmulatorError:  # a grid of a phased group can order a ring transfer across a barrier
            continue
        if below is not None and not stable_grid(gm, below, grid) and within_slack(stable_t, t, m):
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
