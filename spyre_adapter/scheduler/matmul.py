"""Work division and tiling of the matmul family (mm, bmm, addmm, baddbmm).

A core grid ``batch x M x N x K`` is chosen by the cost model. Cores that share
an operand block (the same rows of A, or the same columns of B) read it from
DRAM once and pass it along the ring; a K split produces fp32 partial sums that
are reduced over the ring. Inside a core, an output tile accumulates in LX in
fp32 while A and B k-slices stream through double-buffered LX slots.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
from collections.abc import Callable, Mapping, Sequence

import sympy

from spyre_shims import index as sidx
from spyre_shims import kernel_ir as kir
from spyre_shims.kernel_ir import ExternKernel
from spyre_shims.reference import concrete

from spyre_adapter.model.errors import DoesNotFit
from spyre_adapter.model.gc_pause import gc_paused
from spyre_adapter.model.machine import Machine
from spyre_adapter.model.program import CoreProgram, MatmulPlan, Program, Resident, itemsize
from spyre_adapter.model.rules import first_violation
from spyre_adapter.model.structure import structure_digest, structure_sizes
from spyre_adapter.model.timing import Timeline, extrapolate, lower_bound_ns, remember, simulate
from spyre_adapter.scheduler.loops import plan_group
from spyre_adapter.scheduler.matmul_program import build as build_program
from spyre_adapter.scheduler.matmul_program import build_k_looped, build_looped, k_looped, loop_pays
from spyre_adapter.scheduler.matmul_program import per_core as _per_core
from spyre_adapter.scheduler.matmul_program import span_excess, tile_loops
from spyre_adapter.scheduler.search import autotuning
from spyre_adapter.scheduler.size_buckets import BucketChoices, bucket_of


@dataclasses.dataclass(frozen=True)
class MatmulShape:
    batch: int
    m: int
    n: int
    k: int
    isz: int
    out_isz: int
    bias: str  # "" | "row" (broadcast over M) | "full"


#: Loop orders inside a core. "c": the output tile stays in LX while A and B
#: k-slices stream through; "b": a B column panel stays in LX while row tiles of
#: A stream past it; "a": an A row panel stays while column tiles of B stream.
ORDERS = ("c", "b", "a")


@dataclasses.dataclass(frozen=True)
class Grid:
    gb: int
    gm: int
    gn: int
    gk: int
    tm: int
    tn: int
    tk: int
    share: bool = True
    order: str = "c"

    @property
    def cores(self) -> int:
        return self.gb * self.gm * self.gn * self.gk


def shape_of(kernel: ExternKernel, sizes: Mapping[sympy.Symbol, int]) -> MatmulShape:
    dims = {b.name + str(i): [concrete(s, sizes) for s in b.size] for i, b in enumerate(kernel.inputs)}
    ins = list(dims.values())
    if kernel.op in ("mm", "bmm"):
        a, b = ins[0], ins[1]
        bias = ""
    else:
        a, b = ins[1], ins[2]
        bias_dims = ins[0]
        bias = "full" if len(bias_dims) >= 2 and bias_dims[-2] > 1 else "row"
    batch = a[0] if len(a) == 3 else 1
    m_, k_ = a[-2], a[-1]
    n_ = b[-1]
    src = kernel.inputs[1] if kernel.op in ("addmm", "baddbmm") else kernel.inputs[0]
    return MatmulShape(batch, m_, n_, k_, itemsize(src.dtype), itemsize(kernel.output.dtype), bias)


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _round_up(a: int, b: int) -> int:
    return _cdiv(a, b) * b


@dataclasses.dataclass(frozen=True)
class Cost:
    total_ns: float
    compute_ns: float
    dram_bytes: float
    dram_ns: float
    ring_ns: float
    lx_bytes: int
    #: per core, the program's size: each step's operand slices, loaded or received
    #: from every core sharing them (what building, checking and simulating grow with)
    instrs: int = 1


def _mac_rate(s: MatmulShape, m: Machine) -> float:
    # The PE arrays are 16-bit; fp32 operands are emulated at a quarter of the rate.
    return m.sustained_mac_per_ns_per_core / (4.0 if s.isz >= 4 else 1.0)


def _lx_bytes(s: MatmulShape, g: Grid, kb: int, tm: int, tn: int, tk: int) -> int:
    # fp32 accumulator and the output tile, each double-buffered across output tiles
    acc = 2 * tm * tn * (4 + s.out_isz)
    bias = tn * s.out_isz * (tm if s.bias == "full" else 1) if s.bias else 0
    if g.order == "b":
        return acc + kb * tn * s.isz + 2 * tm * tk * s.isz + bias
    if g.order == "a":
        return acc + tm * kb * s.isz + 2 * tk * tn * s.isz + bias
    return acc + 2 * (tm * tk + tk * tn) * s.isz + bias


def cost(s: MatmulShape, g: Grid, m: Machine) -> Cost | None:
    """Closed-form time of a grid and loop order, or None when it does not fit LX.

    The slowest of four lanes, each with what it cannot overlap:

    * DRAM (shared by every core): all reads and writes, then the last step's
      compute and the K split's partial-sum chain, which wait for the last load;
    * the PE array: the first operand slices (fill), every step's compute, a
      stationary panel that DRAM cannot deliver within the first pass, the K
      chain, then the last output tile's write (tail);
    * each core's DMA engine: its own bytes plus a descriptor setup per operand
      slice, then the same epilogue as DRAM;
    * the ring: operand blocks received from the sharing cores and partial sums.

    Summing fill, body and tail instead (as before 2026-12-06) charged the first
    loads and the last writes twice in DRAM-bound programs: the closed form then
    ranked the simulated best division of a 256x1024x1024 GEMM 157th.
    """
    bb, mb, nb, kb = _per_core(s, g, m)
    tm, tn, tk = min(g.tm, mb), min(g.tn, nb), min(g.tk, kb)
    lx = _lx_bytes(s, g, kb, tm, tn, tk)
    if lx > m.lx_usable_bytes:
        return None
    n_mt, n_nt = _cdiv(mb, tm), _cdiv(nb, tn)
    a_reads = 1 if g.order == "a" else n_nt  # times a core streams its A block
    b_reads = 1 if g.order == "b" else n_mt
    a_core = bb * mb * kb * s.isz * a_reads
    b_core = bb * kb * nb * s.isz * b_reads
    c_core = bb * mb * nb * s.out_isz
    # DRAM: a shared operand block is read once per sharing group.
    a_share, b_share = (g.gn, g.gm) if g.share else (1, 1)
    dram_rd = (a_core * g.cores / a_share + b_core * g.cores / b_share)
    if s.bias:
        dram_rd += (s.batch if s.bias == "full" else 1) * (s.m if s.bias == "full" else 1) * s.n * s.out_isz
    dram_wr = c_core * g.cores / g.gk
    bw = m.dram_gbps(dram_rd, dram_wr)
    dram_ns = (dram_rd + dram_wr) / bw
    own = a_core / a_share + b_core / b_share + c_core / g.gk
    dma_ns = own / min(m.core_dma_gbps, bw)
    recv = a_core * (1 - 1 / a_share) + b_core * (1 - 1 / b_share)
    partial = (mb * nb * 4 * (g.gk - 1) / g.gk) if g.gk > 1 else 0.0
    ring_ns = (recv + partial) / m.ring_gbps
    eff = m.pe_efficiency(tm)
    compute_ns = bb * _round_up(mb, m.pe_rows) * nb * kb / (_mac_rate(s, m) * eff)
    fill = g.cores * (tm * tk / a_share + tk * tn / b_share) * s.isz / m.dram_read_gbps
    # A stationary panel is loaded during the first pass over the other
    # operand: if DRAM cannot deliver it within that pass, the PEs wait.
    stall = 0.0
    if g.order == "b":
        stall = max(0.0, b_core * g.cores / b_share / m.dram_read_gbps - compute_ns / n_mt)
    elif g.order == "a":
        stall = max(0.0, a_core * g.cores / a_share / m.dram_read_gbps - compute_ns / n_nt)
    tail = g.cores / g.gk * tm * tn * s.out_isz / m.dram_write_gbps
    # Every step (one k-slice of one output tile) sets up two operand DMAs.
    steps = bb * n_mt * n_nt * max(1, _cdiv(kb, tk))
    setup = steps * 2 * m.dma_setup_ns
    # The last output tile's fp32 partials pass the K split's cores one hop and one add at a time.
    k_chain = (g.gk - 1) * tm * tn * 4 * (1 / m.ring_gbps + 1 / (m.vector_bytes_per_cycle * m.clock_ghz))
    epilogue = compute_ns / steps + k_chain
    body = max(dram_ns + epilogue, fill + compute_ns + stall + k_chain + tail, dma_ns + setup + epilogue, ring_ns)
    total = m.kernel_launch_ns + body + (m.sync_ns if g.cores > 1 else 0.0)
    return Cost(total, compute_ns, dram_rd + dram_wr, dram_ns, ring_ns, lx, steps * (a_share + b_share))


def _pow2_upto(n: int, cap: int) -> list[int]:
    out, k = [], 1
    while k <= min(n, cap):
        out.append(k)
        k *= 2
    return out


def grids(s: MatmulShape, m: Machine) -> list[Grid]:
    """Candidate grids and tilings (whole sticks of N per core, whole PE passes of M)."""
    stick = m.stick_elems(s.out_isz)
    out = []
    for gb, gm, gn, gk in itertools.product(_pow2_upto(s.batch, m.cores), _pow2_upto(_cdiv(s.m, 1), m.cores),
                                            _pow2_upto(max(1, _cdiv(s.n, stick)), m.cores),
                                            _pow2_upto(max(1, s.k // 256), m.cores)):
        if gb * gm * gn * gk > m.cores:
            continue
        g0 = Grid(gb, gm, gn, gk, 0, 0, 0)
        bb, mb, nb, kb = _per_core(s, g0, m)
        for tm in {min(mb, t) for t in (32, 64, 128, 256, 512, 1024)}:
            for tn in {min(nb, t) for t in (64, 128, 256, 512, 1024)}:
                for tk in {min(kb, t) for t in (64, 128, 256, 512)}:
                    for order in ORDERS:
                        out.append(Grid(gb, gm, gn, gk, tm, tn, tk, order=order))
    return out


def choose(s: MatmulShape, m: Machine, share: bool = True, max_cores: int | None = None,
           naive: bool = False) -> tuple[Grid, Cost]:
    """The first-ranked grid (see :func:`rank`)."""
    return candidates(s, m, share, max_cores, naive)[0]


def candidates(s: MatmulShape, m: Machine, share: bool = True, max_cores: int | None = None,
               naive: bool = False) -> list[tuple[Grid, Cost]]:
    """Grids to consider, best first: every fitting one, or for ``naive`` the
    even-split baseline (all cores, 64x64x64 tiles, output-stationary, no K split)."""
    ranked = rank(s, m, share and not naive, max_cores)
    if naive:
        even = []
        for g, c in ranked:
            _, mb, nb, kb = _per_core(s, g, m)
            if g.gk == 1 and g.order == "c" and (g.tm, g.tn, g.tk) == (min(64, mb), min(64, nb), min(64, kb)):
                even.append((g, c))
        most = max((g.cores for g, _ in even), default=0)
        ranked = [gc for gc in even if gc[0].cores == most][:1]
    if not ranked:
        raise DoesNotFit(f"no tiling of the {s.m}x{s.n}x{s.k} matmul (batch {s.batch}, {s.isz}-byte elements) "
                         "fits in one core's LX", f"lx_usable_bytes={m.lx_usable_bytes} per core")
    return ranked


def rank(s: MatmulShape, m: Machine, share: bool = True, max_cores: int | None = None) -> list[tuple[Grid, Cost]]:
    """Every grid that fits, by the closed form: those within ``TIE_SLACK`` of the
    cheapest (and not filling LX) first, the smallest program first; then cheapest first."""
    return list(_rank(s, m, share, max_cores))


# Residency re-plans the same matmul for several producer options: rank once.
@functools.lru_cache(maxsize=256)
def _rank(s: MatmulShape, m: Machine, share: bool, max_cores: int | None) -> tuple[tuple[Grid, Cost], ...]:
    out = []
    for g in grids(s, m):
        if max_cores is not None and g.cores > max_cores:
            continue
        g = dataclasses.replace(g, share=share)
        c = cost(s, g, m)
        if c is not None:
            out.append((g, c))
    out.sort(key=lambda gc: (round(gc[1].total_ns), -gc[0].tm * gc[0].tn * gc[0].tk, gc[0].cores))
    if out:
        # Within TIE_SLACK of the best estimate the closed form cannot tell
        # grids apart; the smallest program comes first there: less to build,
        # check, simulate and replay. Tilings that fill LX to the brim by this
        # count often do not fit once built (ring staging and alignment): they
        # keep their place by estimate.
        limit = out[0][1].total_ns * (1 + TIE_SLACK)
        near = [c.total_ns <= limit and c.lx_bytes <= LX_ROOMY * m.lx_usable_bytes for _, c in out]
        first = sorted((gc for gc, n in zip(out, near) if n), key=lambda gc: (gc[1].instrs, round(gc[1].total_ns)))
        out = first + [gc for gc, n in zip(out, near) if not n]
    return tuple(out)


@dataclasses.dataclass
class _Built:
    """A built candidate program: its order of building, and its simulated time
    once known (``bound``: what no simulation of it can undercut). A large
    candidate is timed from simulated prefixes (:func:`extrapolated`) and
    built whole only when it is chosen (``program`` None until then); the
    timeline so found (``timeline``) then stands for the whole program's."""

    index: int
    program: Program | None
    bound: float
    time: float | None = None
    grid: Grid | None = None
    cost: Cost | None = None
    #: whether ``time`` is simulated (a lone last candidate is not: its bound stands in)
    simulated: bool = False
    #: the timeline extrapolated from prefixes, for a candidate timed so
    timeline: Timeline | None = None


#: Candidates the closed form puts at this many steps (all cores) or more are timed
#: by extrapolating simulated prefixes of their program, not simulated whole.
EXTRAPOLATE_MIN_STEPS = 150_000


def prefix_tiles(s: MatmulShape, g: Grid, m: Machine) -> tuple[int, tuple[int, int, int]] | None:
    """(output tiles per core, three prefixes in tiles) for timing the program of
    ``g`` from its prefixes, or None when it is too short to gain from it. The
    prefixes end on whole passes of the stationary panel after the first two
    (on pairs of tiles from the first when nothing is stationary):
    with the first pass in (its tiles wait for the panel's loads) a difference
    of two prefixes was up to 2.8 % off one steady pass, and within a pass the
    time per tile is not steady at all (11 % off)."""
    tiles, period = tile_loops(s, g, m)
    if g.order == "c":
        # Nothing stationary: no panel to wait for, and from the first pair of tiles
        # (their operands alternate two LX slots) every pair is alike: prefixes of
        # 2, 4 and 6 tiles time 8192^3's candidates to the 0.1 ns of the prefixes
        # of 4, 6 and 8 tiles, at two thirds of the simulation.
        cuts = (2, 4, 6)
    else:
        # With one pass (the panel stays for the whole program: a one-dimensional
        # division's), tiles after the first are alike: a tile a step
        # (2048x14336x4096 on 32x1, "a": every prefix of 2-6 tiles 117.8 us apart,
        # extrapolated to the whole simulation's 3349.2 us).
        step = 1 if period == tiles else max(2, period)
        cuts = (2 * step, 3 * step, 4 * step)
    return (tiles, cuts) if sum(cuts) < tiles else None


#: Most two successive passes' simulated times may differ (relative) for a
#: program to be timed by extrapolating them.
STEADY_TOLERANCE = 0.005


def extrapolated(kernel: ExternKernel, s: MatmulShape, g: Grid, m: Machine, sizes: Mapping[sympy.Symbol, int],
                 name: str, share: bool, plan: MatmulPlan) -> Timeline | None:
    """The simulated timeline of the program of grid ``g`` (event-free), from three
    of its prefixes (every core's first output tiles): the last two differ by one
    pass, which times each pass left (and its bytes and busy times). The first
    two must differ by as much (the program is in its steady state), else the
    answer is None, as it is for a program too short for prefixes
    (:func:`prefix_tiles`): then simulate it whole. Within 1 % of the whole
    program's simulation where both were run (test_matmul.py), at about half the
    cost of building and simulating it. (The store times of one prefix's events
    are no substitute: cores drift, and a pass read off them was up to 16 % off.)"""
    cut = prefix_tiles(s, g, m)
    if cut is None:
        return None
    tiles, (p1, p2, p3) = cut
    def prefix(tiles: int) -> Program:  # its K walks as loops where they are long
        got = build_k_looped(kernel, s, g, m, sizes, name, share, plan, tiles) if k_looped(s, g, m) else None
        return got or build_program(kernel, s, g, m, sizes, name, share, plan, tiles=tiles)

    runs = [simulate(prefix(p), m, keep_events=False) for p in (p1, p2, p3)]
    t1, t2, t3 = (r.total_ns for r in runs)
    if abs((t3 - t2) - (t2 - t1)) > STEADY_TOLERANCE * (t3 - t2):
        return None
    return extrapolate(runs[1], runs[2], (tiles - p3) / (p3 - p2))


def _prefix_time(kernel: ExternKernel, s: MatmulShape, g: Grid, c: Cost, m: Machine,
                 sizes: Mapping[sympy.Symbol, int], name: str, share: bool, plan: MatmulPlan) -> Timeline | None:
    """:func:`extrapolated` for a candidate long enough to gain from it, else None."""
    if c.instrs * g.cores < EXTRAPOLATE_MIN_STEPS:
        return None
    return extrapolated(kernel, s, g, m, sizes, name, share, plan)


def _built(kernel: ExternKernel, s: MatmulShape, g: Grid, m: Machine, sizes: Mapping[sympy.Symbol, int], name: str,
           share: bool, plan: MatmulPlan, a_held: Sequence[Resident] = ()) -> Program:
    """The whole program of grid ``g``: each tile's K walk as a loop where it is
    long (:func:`~.matmul_program.k_looped`), else its tile walk as a loop where
    building it so pays (:func:`~.matmul_program.loop_pays`: long walks, such as
    a long-context prefill's), else unrolled."""
    if k_looped(s, g, m):
        p = build_k_looped(kernel, s, g, m, sizes, name, share, plan, a_held=a_held)
        if p is not None:
            return p
    if not a_held and loop_pays(s, g, m):
        p = build_looped(kernel, s, g, m, sizes, name, share, plan)
        if p is not None:
            return p
    return build_program(kernel, s, g, m, sizes, name, share, plan, a_held)


@gc_paused
def plan_matmul(kernel: ExternKernel, m: Machine, sizes: Mapping[sympy.Symbol, int], name: str,
                share: bool = True, max_cores: int | None = None, naive: bool = False,
                a_held: Sequence[Resident] = ()) -> Program:
    """Schedule a matmul-family extern kernel: the closed form ranks every grid
    that fits, the best few are built, checked against the hardware rules and
    simulated, and the fastest wins.

    ``naive`` is the benchmark's "even split" baseline: the output divided
    evenly over every core, 64x64x64 tiles, no operand shared over the ring,
    no stationary operand and no K split (each tile re-reads its operands).
    ``a_held``: the A operand's rows an earlier kernel left in LX (see
    :mod:`.residency`); A is then streamed from there, never from DRAM.
    """
    s = shape_of(kernel, sizes)
    if min(s.batch, s.m, s.n) == 0:
        return Program(name, "matmul", kernel, (), tuple(CoreProgram(c, ()) for c in range(m.cores)),
                       MatmulPlan((0, 0, 0, 0), (0, 0, 0), "c", share, 1.0, 0.0),
                       tuple((str(k), v) for k, v in sizes.items()))
    if s.k == 0:
        return _empty_sum(kernel, m, sizes, name)
    ranked = candidates(s, m, share, max_cores, naive)
    numels = {b.name: int(concrete(b.storage_numel, sizes)) for b in kernel.buffers}

    def plan_of(g: Grid, c: Cost) -> MatmulPlan:
        tile = _clamped((g.tm, g.tn, g.tk), s, g, m)
        return MatmulPlan((g.gb, g.gm, g.gn, g.gk), tile, g.order, share and not naive,
                          round(m.pe_efficiency(tile[0]), 3), round(c.total_ns, 1), len(ranked))

    bucket = bucket_of(sizes) if not naive and not a_held else None
    if bucket is not None:
        # Run-time sizes: the core grid, loop order and tile are chosen at their
        # bucket (see .size_buckets); that tiling (the grid's best-ranked one where
        # it does not fit) is built here and checked, and planning continues below
        # only if it does not fit.
        chosen = _bucket_grid(kernel, m, bucket, name, share, max_cores)
        grid, top_tile = chosen if chosen is not None else (None, ())
        fits = [(g, c) for g, c in ranked if (g.gb, g.gm, g.gn, g.gk, g.order) == grid
                and _stick_exclusive(kernel, s, g, m, sizes)]
        # The bucket top's tiling where it fits these sizes too (the best-ranked
        # one of the grid otherwise): one tiling over the bucket keeps one program
        # structure, which a size template binds instead of planning each size (a
        # decode's P @ V over the KV length, tiles of 64: one K tile at 66
        # positions and two at 128 changed the structure inside the bucket).
        g_c = next((gc for gc in fits if _clamped((gc[0].tm, gc[0].tn, gc[0].tk), s, gc[0], m)
                    == _clamped(top_tile, s, gc[0], m)),
                   fits[0] if fits else None)
        if g_c is not None:
            try:
                prog = _built(kernel, s, g_c[0], m, sizes, name, share, plan_of(*g_c))
            except DoesNotFit:
                prog = None
            if prog is not None and first_violation(prog, m, numels) is None:
                return prog
    built: list[_Built] = []
    order = itertools.count()
    reasons: list[str] = []
    best: _Built | None = None

    def settle() -> _Built | None:
        # The hardware rules are checked on the fastest built program first (checking
        # costs as much as building); one that breaks a rule gives way to the next.
        # Ties go to the one built first. A program is simulated only when its
        # lower bound does not already show it slower than the fastest known, and
        # a last one left is not simulated at all (there is nothing to order).
        tried: set[int] = set()
        while True:
            known = [b for b in built if b.time is not None and b.index not in tried]
            first = min(known, key=lambda b: (b.time, b.index), default=None)
            unknown = [b for b in built if b.time is None]
            maybe = [b for b in unknown if first is None or b.bound <= first.time]  # type: ignore[operator]
            if first is None and len(unknown) == 1:
                first = unknown[0]
            elif maybe:
                nxt = min(maybe, key=lambda b: (b.bound, b.index))
                nxt.time = simulate(nxt.program, m, keep_events=False).total_ns
                nxt.simulated = True
                continue
            if first is None:
                break
            tried.add(first.index)
            if first.time is None:
                first.time = first.bound  # the last one left: only ``tried`` reads it again
            if first.program is None:  # timed from prefixes: built whole now it is chosen
                assert first.grid is not None and first.cost is not None
                try:
                    first.program = _built(kernel, s, first.grid, m, sizes, name, share and not naive,
                                                  plan_of(first.grid, first.cost), a_held)
                except DoesNotFit as exc:
                    reasons.append(str(exc))
                    continue
                if first.timeline is not None:  # (its time is known: not simulated again when measured)
                    remember(first.program, m, first.timeline)
            bad = first_violation(first.program, m, numels)
            if bad is not None:
                reasons.append(str(bad))
                continue
            return first
        built.clear()  # every one broke a rule: build the next candidates
        return None

    limit = 1 if a_held else REFINE  # with held rows only the best grid that lines up (residency tries many)
    for g, c in ranked:
        if len(reasons) > 3 * REFINE:
            break
        if built and (len(built) == limit or (not a_held and c.total_ns > REFINE_SLACK * ranked[0][1].total_ns)):
            best = settle()
            if best is not None:
                break
        if not _stick_exclusive(kernel, s, g, m, sizes) or (a_held and not _rows_line_up(s, g, m, a_held)):
            continue
        try:
            tl = None if a_held else _prefix_time(kernel, s, g, c, m, sizes, name, share and not naive, plan_of(g, c))
            if tl is not None:
                built.append(_Built(next(order), None, tl.total_ns, tl.total_ns, g, c, simulated=True, timeline=tl))
                continue
            prog = _built(kernel, s, g, m, sizes, name, share and not naive, plan_of(g, c), a_held)
        except DoesNotFit as exc:
            reasons.append(str(exc))
            continue
        built.append(_Built(next(order), prog, lower_bound_ns(prog, m), grid=g, cost=c))
    if best is None and built:
        best = settle()
    if best is None:
        raise DoesNotFit(f"no grid of the {s.m}x{s.n}x{s.k} matmul fits the machine",
                         f"{m.cores} cores, lx_usable_bytes={m.lx_usable_bytes} per core", name,
                         reasons[:2] or ["no candidate"])
    if not naive and not a_held:
        best = _polish(kernel, s, m, sizes, name, share, ranked, best, numels, plan_of)
        if autotuning():
            best = _seeded(kernel, s, m, sizes, name, share, ranked, best, numels, plan_of)
    assert best.program is not None  # settle builds what it returns
    return best.program


def _polish(kernel: ExternKernel, s: MatmulShape, m: Machine, sizes: Mapping[sympy.Symbol, int], name: str,
            share: bool, ranked: Sequence[tuple[Grid, Cost]], best: _Built, numels: Mapping[str, int],
            plan_of: Callable[[Grid, Cost], MatmulPlan]) -> _Built:
    """The chosen core grid re-tiled: its ``POLISH`` other tilings (any loop
    order) the closed form ranks fastest among those at most ``POLISH_GROWTH``
    times its size and at most ``POLISH_MAX_INSTRS`` (closed-form instruction
    counts), built, checked and simulated; the fastest program wins (a matmul
    the closed form puts under ``POLISH_MIN_NS`` is left as it is). Near-ties
    rank the smallest program first, and a smaller tile often pipelines better
    (a shorter fill before the first multiply): 2048^3 on its chosen 2x16 grid,
    tk 128 -> 64, simulates 277.8 -> 275.2 us."""
    g = best.grid
    if g is None or best.cost is None or best.cost.total_ns < POLISH_MIN_NS:
        return best
    same = sorted(((g2, c2) for g2, c2 in ranked if (g2.gb, g2.gm, g2.gn, g2.gk) == (g.gb, g.gm, g.gn, g.gk)
                   and (g2.tm, g2.tn, g2.tk, g2.order) != (g.tm, g.tn, g.tk, g.order)
                   and c2.instrs <= min(POLISH_GROWTH * best.cost.instrs, POLISH_MAX_INSTRS)
                   and _stick_exclusive(kernel, s, g2, m, sizes)),
                  key=lambda gc: gc[1].total_ns)[:POLISH]
    return _fastest(kernel, s, m, sizes, name, share, [[gc] for gc in same], best, numels, plan_of)


def _seeded(kernel: ExternKernel, s: MatmulShape, m: Machine, sizes: Mapping[sympy.Symbol, int], name: str,
            share: bool, ranked: Sequence[tuple[Grid, Cost]], best: _Built, numels: Mapping[str, int],
            plan_of: Callable[[Grid, Cost], MatmulPlan]) -> _Built:
    """The chosen program against the stationary one-dimensional divisions: every
    core holds its own rows of A (``order`` "a", N not divided) or its own
    columns of B ("b", M not divided) for the whole K walk, and the other operand
    is read from DRAM once and shared over the ring. The closed form puts them
    within 2 % of the near-ties it cannot order, where simulation tells them
    apart by up to 15 % (2048x4096x4096: estimates 958-973 us, simulated
    992-1147 us; the 1x32 A-stationary division simulates fastest). The first
    tilings (by the closed form) of the ``SEEDS`` such divisions it ranks first,
    among those within ``TIE_SLACK`` of its best estimate, are built and
    simulated (or timed from prefixes); the fastest program wins. Only with
    max-autotune (:mod:`.search`): these programs are large (2048x14336x4096:
    0.98 M steps against 97 k for the division chosen without them)."""
    g = best.grid
    if g is None or best.cost is None or best.cost.total_ns < POLISH_MIN_NS or not share:
        return best
    most = max(g2.cores for g2, _ in ranked)
    near = (1 + TIE_SLACK) * min(c2.total_ns for _, c2 in ranked)  # where the closed form cannot tell
    groups: dict[tuple[int, int, int, str], list[tuple[Grid, Cost]]] = {}
    for g2, c2 in ranked:
        if (c2.total_ns <= near and g2.cores == most and g2.gk == 1
                and ((g2.gn == 1 and g2.order == "a") or (g2.gm == 1 and g2.order == "b"))
                and (g2.gb, g2.gm, g2.gn, g2.order) != (g.gb, g.gm, g.gn, g.order)):
            tilings = groups.setdefault((g2.gb, g2.gm, g2.gn, g2.order), [])
            if len(tilings) < SEED_TILINGS and _stick_exclusive(kernel, s, g2, m, sizes):
                tilings.append((g2, c2))
    return _fastest(kernel, s, m, sizes, name, share, list(groups.values())[:SEEDS], best, numels, plan_of)


def _fastest(kernel: ExternKernel, s: MatmulShape, m: Machine, sizes: Mapping[sympy.Symbol, int], name: str,
             share: bool, alternatives: Sequence[Sequence[tuple[Grid, Cost]]], best: _Built,
             numels: Mapping[str, int], plan_of: Callable[[Grid, Cost], MatmulPlan]) -> _Built:
    """``best`` or the fastest of ``alternatives`` (groups of tilings tried in
    order, each group up to its first that builds and obeys every rule), each
    timed by simulation (or from its prefixes) only when its lower bound does not
    already show it slower."""
    assert best.program is not None
    if alternatives and not best.simulated:  # settle does not simulate a lone candidate
        best.time, best.simulated = simulate(best.program, m, keep_events=False).total_ns, True
    for group in alternatives:
        for g2, c2 in group:
            assert best.time is not None
            try:
                tl = _prefix_time(kernel, s, g2, c2, m, sizes, name, share, plan_of(g2, c2))
                t = None if tl is None else tl.total_ns
                if t is not None and t >= best.time:
                    break
                prog = _built(kernel, s, g2, m, sizes, name, share, plan_of(g2, c2))
            except DoesNotFit:
                continue
            if t is None and lower_bound_ns(prog, m) >= best.time:
                break
            if t is None:
                t = simulate(prog, m, keep_events=False).total_ns
            if t >= best.time:
                break
            if first_violation(prog, m, numels) is not None:  # checked once it would win
                continue
            if tl is not None:  # (its time is known: not simulated again when measured)
                remember(prog, m, tl)
            best = _Built(-1, prog, t, t, g2, c2, simulated=True)
            break
    return best


#: The (batch, M, N, K) core grid and loop order a matmul's plan chose at a
#: size bucket, and its tile, by (structure, machine, bucket, sharing, core limit).
_BUCKET_GRIDS: BucketChoices[tuple[tuple[int, int, int, int, str], tuple[int, ...]]] = BucketChoices()


def _bucket_grid(kernel: ExternKernel, m: Machine, bucket: Mapping[sympy.Symbol, int], name: str, share: bool,
                 max_cores: int | None) -> tuple[tuple[int, int, int, int, str], tuple[int, ...]] | None:
    """What :func:`plan_matmul` chooses at ``bucket`` (planned there once): the
    grid with its loop order, and the tile."""
    def plan_at_bucket() -> tuple[tuple[int, int, int, int, str], tuple[int, ...]] | None:
        plan = plan_matmul(kernel, m, bucket, name, share, max_cores).plan
        return ((*plan.grid, plan.order), tuple(plan.tile)) if isinstance(plan, MatmulPlan) else None
    return _BUCKET_GRIDS.get((structure_digest(kernel), m, structure_sizes(kernel, bucket), share, max_cores,
                              autotuning()), plan_at_bucket)


def _clamped(tile: Sequence[int], s: MatmulShape, g: Grid, m: Machine) -> tuple[int, int, int]:
    """``tile`` as a plan of grid ``g`` records it at shape ``s`` (no larger than
    each core's share)."""
    _, mb, nb, kb = _per_core(s, g, m)
    return min(tile[0], mb), min(tile[1], nb), min(tile[2], kb)


def plan_grid(kernel: ExternKernel, m: Machine, sizes: Mapping[sympy.Symbol, int], name: str,
              split: tuple[int, int, int, int], share: bool = False, orders: Sequence[str] = ORDERS,
              largest_tiles: bool = False, simulate_best: int = 2) -> Program:
    """A matmul on the fixed core grid ``split`` (batch, M, N, K) - how a baseline
    planner's division is fed into the program builder. The tilings of that grid
    that fit LX are tried in order: ``largest_tiles``, the largest output tile then
    the largest K step (the "LX-sized tiles" of a simple even split, built as is);
    otherwise cheapest first by the closed form, the best ``simulate_best`` built
    ones simulated and the fastest kept."""
    s = shape_of(kernel, sizes)
    gb, gm, gn, gk = split
    stick = m.stick_elems(s.out_isz)
    bb, mb, nb, kb = _per_core(s, Grid(gb, gm, gn, gk, 0, 0, 0), m)
    why = span_excess(kernel, s, Grid(gb, gm, gn, gk, 0, 0, 0), m, sizes)
    if why is not None:  # every tiling of the grid would be built, checked and refused
        raise DoesNotFit(f"the {s.m}x{s.n}x{s.k} matmul on grid {split}: {why}",
                         f"span_bytes_per_core={m.span_bytes_per_core}", name)
    tiles = itertools.product({min(mb, t) for t in (32, 64, 128, 256, 512, 1024, mb)},
                              {min(nb, t) for t in (stick, 128, 256, 512, 1024, nb)},
                              {min(kb, t) for t in (64, 128, 256, 512, 1024, kb)}, orders)
    fits = [(g, c) for g in (Grid(gb, gm, gn, gk, tm, tn, tk, share, o) for tm, tn, tk, o in tiles)
            if (c := cost(s, g, m)) is not None and _stick_exclusive(kernel, s, g, m, sizes)]
    if largest_tiles:
        fits.sort(key=lambda gc: (-gc[0].tm * gc[0].tn, -gc[0].tk, gc[1].total_ns))
    else:
        fits.sort(key=lambda gc: gc[1].total_ns)
    numels = {b.name: int(concrete(b.storage_numel, sizes)) for b in kernel.buffers}
    built: list[tuple[float, Program]] = []
    reasons = []
    for g, c in fits:
        plan = MatmulPlan(split, (g.tm, g.tn, g.tk), g.order, share, round(m.pe_efficiency(g.tm), 3),
                          round(c.total_ns, 1), len(fits))
        try:
            prog = _built(kernel, s, g, m, sizes, name, share, plan)  # as ours is built (K loops)
        except DoesNotFit as exc:
            reasons.append(str(exc))
            continue
        bad = first_violation(prog, m, numels)
        if bad is not None:
            reasons.append(str(bad))
            continue
        if largest_tiles:
            return prog
        built.append((simulate(prog, m, keep_events=False).total_ns, prog))
        if len(built) == simulate_best:
            break
    if not built:
        raise DoesNotFit(f"no tiling of the {s.m}x{s.n}x{s.k} matmul on grid {split} fits the machine",
                         f"lx_usable_bytes={m.lx_usable_bytes} per core", name, reasons[:2] or ["no candidate"])
    return min(built, key=lambda tp: tp[0])[1]


def _rows_line_up(s: MatmulShape, g: Grid, m: Machine, a_held: Sequence[Resident]) -> bool:
    """Whether every row tile of A lies within one holder's rows (a tile that
    straddles two holders would be read from DRAM); A-stationary orders never do."""
    if g.order == "a":
        return False
    _, mb, _, _ = _per_core(s, g, m)
    tm = min(g.tm, mb)
    starts = {c * mb + t for c in range(g.gm) for t in range(0, mb, tm)} | {s.m}
    return all(r.lo // s.k in starts and r.hi // s.k in starts for r in a_held)


def _stick_exclusive(kernel: ExternKernel, s: MatmulShape, g: Grid, m: Machine,
                     sizes: Mapping[sympy.Symbol, int]) -> bool:
    """Whether every core's block of the output starts on a stick of its own
    (cores never write parts of one stick): checked before building."""
    out = kernel.output
    isz = s.out_isz
    stride = [int(concrete(x, sizes)) for x in out.stride]
    stride = [0] * (3 - len(stride)) + stride
    bb, mb, nb, _ = _per_core(s, g, m)
    for split, block, st in ((g.gb, bb, stride[0]), (g.gm, mb, stride[1]), (g.gn, nb, stride[2])):
        if split > 1 and (block * st * isz) % m.stick_bytes:
            return False
    if g.gn > 1 and (stride[2] != 1 or (stride[1] * isz) % m.stick_bytes and s.m > 1):
        return False
    if g.gm > 1 and g.gn == 1 and stride[2] != 1:
        return False
    return True


#: How many of the best-ranked grids are built and simulated before choosing
#: (only those within REFINE_SLACK of the best estimate).
REFINE = 3
REFINE_SLACK = 1.25
#: How many other tilings of the chosen grid :func:`_polish` tries, and how much
#: bigger than the chosen program they may be (closed-form instruction counts).
POLISH = 2
POLISH_GROWTH = 2
#: About 100k steps (2048^3's tk=64 tiling is 2304): a few seconds to build and
#: simulate. At 8192^3 the re-tiling doubled the program (1.97M steps, 7.7 GB
#: and 3.4x the planning time) for 0.16 % of modeled time (16258 -> 16231 us).
POLISH_MAX_INSTRS = 2560
#: How many stationary one-dimensional divisions :func:`_seeded` tries, and how
#: many of each one's tilings (the closed form's LX estimate can fit a tiling
#: the builder cannot place).
SEEDS = 2
SEED_TILINGS = 2
#: Below this estimate a percent is less than a launch's overhead: not polished
#: (a decode's small matmuls are planned at every new KV-length bucket).
POLISH_MIN_NS = 20_000.0
#: Estimates within this fraction of the best rank by program size first (see _rank).
TIE_SLACK = 0.02
#: Near-ties reordered by program size only when their LX estimate leaves this much room.
LX_ROOMY = 0.85


def _empty_sum(kernel: ExternKernel, m: Machine, sizes: Mapping[sympy.Symbol, int], name: str) -> Program:
    """K = 0: the output is beta * bias (addmm) or zeros - a loop kernel over the output."""
    out = kernel.output
    nd = len(out.size)
    ivars = [sidx.index_symbol(f"i{k}") for k in range(nd)]
    oidx = out.offset + sum(v * st for v, st in zip(ivars, out.stride))
    body: list[kir.Instr] = []
    buffers = [dataclasses.replace(out, role="output")]
    beta = kernel.attr("beta", 1) if kernel.op in ("addmm", "baddbmm") else 0
    if beta != 0:
        bias = kernel.inputs[0]
        bv = ivars[nd - len(bias.size):]
        bidx = bias.offset + sum(v * st for v, st, n in zip(bv, bias.stride, bias.size) if n != 1)
        body.append(kir.Instr("load", (bias.name, bidx), bias.dtype))
        body.append(kir.Instr("constant", (float(beta), "float32"), "float32"))
        body.append(kir.Instr("mul", (kir.Ref(0), kir.Ref(1)), "float32"))
        body.append(kir.Instr("to_dtype", (kir.Ref(2), out.dtype), out.dtype))
        buffers.insert(0, dataclasses.replace(bias, role="input"))
    else:
        body.append(kir.Instr("constant", (0, out.dtype), out.dtype))
    body.append(kir.Instr("store", (out.name, oidx, kir.Ref(len(body) - 1), None)))
    lk = kir.LoopKernel(f"{name}_fill", tuple(out.size), (), tuple(body))
    group = kir.KernelGroup(name, (lk,), tuple(buffers), tuple(b.name for b in buffers))
    return plan_group(group, m, sizes, name)


def replan_with_held_a(p: Program, m: Machine, a_held: Sequence[Resident]) -> Program:
    """Matmul program ``p`` rebuilt on its own grid and tiles, its A rows streamed
    from the LX of the cores holding them (``a_held``) instead of DRAM; an A-stationary
    order becomes output-stationary. Raises :class:`~spyre_adapter.model.errors.DoesNotFit` when
    that program cannot be built or breaks a rule."""
    kernel = p.kernel
    sizes = {sidx.index_symbol(k): v for k, v in p.sizes}
    s = shape_of(kernel, sizes)
    gb, gm, gn, gk = p.plan.grid
    tm, tn, tk = p.plan.tile
    order = "c" if p.plan.order == "a" else p.plan.order
    g = Grid(gb, gm, gn, gk, tm, tn, tk, share=False, order=order)
    if not _rows_line_up(s, g, m, a_held):
        raise DoesNotFit("row tiles straddle the cores holding A", "the held rows' cores", p.name)
    plan = dataclasses.replace(p.plan, order=order)
    prog = _built(kernel, s, g, m, sizes, p.name, p.plan.share, plan, a_held)
    bad = first_violation(prog, m, {b.name: int(concrete(b.storage_numel, sizes)) for b in kernel.buffers})
    if bad is not None:
        raise DoesNotFit(f"the program with A held breaks a hardware rule ({bad})", "", p.name)
    return prog
