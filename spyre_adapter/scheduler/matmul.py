"""Work division and tiling of the matmul family (mm, bmm, addmm, baddbmm).

A core grid ``batch x M x N x K`` is chosen by the cost model. Cores that share
an operand block (the same rows of A, or the same columns of B) read it from
DRAM once and pass it along the ring; a K split produces fp32 partial sums that
are reduced over the ring. Inside a core, an output tile accumulates in LX in
fp32 while A and B k-slices stream through double-buffered LX slots.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Mapping

import sympy

from spyre_shims.kernel_ir import ExternKernel
from spyre_shims.reference import concrete

from ..machine import Machine
from ..machine_spec import DoesNotFitError
from ..program import CoreStream, Instr, Program
from .analysis import itemsize


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


def _per_core(s: MatmulShape, g: Grid, m: Machine) -> tuple[int, int, int, int]:
    stick = m.stick_elems(s.out_isz)
    return (_cdiv(s.batch, g.gb), _round_up(_cdiv(s.m, g.gm), 1),
            _round_up(_cdiv(s.n, g.gn), min(stick, s.n)), _cdiv(s.k, g.gk))


def _mac_rate(s: MatmulShape, m: Machine) -> float:
    # The PE arrays are 16-bit; fp32 operands are emulated at a quarter of the rate.
    return m.sustained_mac_per_ns_per_core / (4.0 if s.isz >= 4 else 1.0)


def _lx_bytes(s: MatmulShape, g: Grid, kb: int, tm: int, tn: int, tk: int) -> int:
    acc = tm * tn * 4  # fp32 accumulator
    bias = tn * s.out_isz if s.bias else 0
    if g.order == "b":
        return acc + kb * tn * s.isz + 2 * tm * tk * s.isz + bias
    if g.order == "a":
        return acc + tm * kb * s.isz + 2 * tk * tn * s.isz + bias
    return acc + 2 * (tm * tk + tk * tn) * s.isz + bias


def cost(s: MatmulShape, g: Grid, m: Machine) -> Cost | None:
    """Closed-form time of a grid and loop order, or None when it does not fit LX.

    Fill (the first operand slices of every core, through shared DRAM) and the
    exposed tail (the last output tile of every core, written together) are
    charged explicitly; in between the slowest of PE, DRAM, DMA and ring wins.
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
    # Fill: every core's first operand slices, through shared DRAM.
    first = g.cores * (tm * tk / a_share + tk * tn / b_share) * s.isz
    fill = first / m.dram_read_gbps
    # A stationary panel is loaded during the first pass over the other
    # operand: if DRAM cannot deliver it within that pass, the PEs wait.
    stall = 0.0
    if g.order == "b":
        stall = max(0.0, b_core * g.cores / b_share / m.dram_read_gbps - compute_ns / n_mt)
    elif g.order == "a":
        stall = max(0.0, a_core * g.cores / a_share / m.dram_read_gbps - compute_ns / n_nt)
    # Tail: the last output tile of every core is written after the last PE step.
    tail = g.cores / g.gk * tm * tn * s.out_isz / m.dram_write_gbps
    # Every step (one k-slice of one output tile) sets up its DMAs and hands a
    # buffer between the DMA and PE engines: small tiles pay for it.
    steps = bb * n_mt * n_nt * max(1, min(8, _cdiv(kb, tk)))
    body = max(compute_ns, dram_ns, dma_ns, ring_ns) + stall + steps * 2 * m.dma_setup_ns
    total = m.kernel_launch_ns + fill + body + tail + (m.sync_ns if g.cores > 1 else 0.0)
    return Cost(total, compute_ns, dram_rd + dram_wr, dram_ns, ring_ns, lx)


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
    """The cheapest grid by the closed form (ties: fewer, larger tiles)."""
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
        raise DoesNotFitError(f"no tiling of the {s.m}x{s.n}x{s.k} matmul (batch {s.batch}, {s.isz}-byte elements) "
                              "fits in one core's LX", f"lx_usable_bytes={m.lx_usable_bytes} per core")
    return ranked


def rank(s: MatmulShape, m: Machine, share: bool = True, max_cores: int | None = None) -> list[tuple[Grid, Cost]]:
    """Every grid that fits, cheapest first by the closed form."""
    out = []
    for g in grids(s, m):
        if max_cores is not None and g.cores > max_cores:
            continue
        g = dataclasses.replace(g, share=share)
        c = cost(s, g, m)
        if c is not None:
            out.append((g, c))
    out.sort(key=lambda gc: (round(gc[1].total_ns), -gc[0].tm * gc[0].tn * gc[0].tk, gc[0].cores))
    return out


def plan_matmul(kernel: ExternKernel, m: Machine, sizes: Mapping[sympy.Symbol, int], name: str,
                share: bool = True, max_cores: int | None = None, naive: bool = False) -> Program:
    """Schedule a matmul-family extern kernel.

    ``naive`` is the benchmark's "even split" baseline: the output divided
    evenly over every core, 64x64x64 tiles, no operand shared over the ring,
    no stationary operand and no K split (each tile re-reads its operands).
    """
    s = shape_of(kernel, sizes)
    if min(s.batch, s.m, s.n, s.k) == 0:
        # Empty output, or an empty sum (zeros, plus the bias for addmm): no work
        # for the PE arrays; the numerics handle it.
        return Program(name, "matmul", kernel, [], {"grid": "empty", "cores": 0}, {str(k): v for k, v in sizes.items()},
                       flops=0.0, compulsory_bytes=0)
    ranked = candidates(s, m, share, max_cores, naive)
    # The closed form ranks; the few best are simulated and the fastest wins.
    from ..emulator.timing import simulate

    best: tuple[float, Program] | None = None
    for g, c in ranked[:REFINE]:
        prog = _program(kernel, s, g, c, m, sizes, name, share and not naive)
        t = simulate(prog, m).total_ns
        prog.division["simulated_ns"] = round(t)
        if best is None or t < best[0]:
            best = (t, prog)
    assert best is not None
    best[1].division["candidates"] = len(ranked)
    return best[1]


#: How many of the best-ranked grids are simulated before choosing.
REFINE = 4


def _program(kernel: ExternKernel, s: MatmulShape, g: Grid, c: Cost, m: Machine,
             sizes: Mapping[sympy.Symbol, int], name: str, share: bool) -> Program:
    bb, mb, nb, kb = _per_core(s, g, m)
    tm, tn, tk = min(g.tm, mb), min(g.tn, nb), min(g.tk, kb)
    a_name = kernel.inputs[-2].name
    b_name = kernel.inputs[-1].name
    streams = []
    eff = m.pe_efficiency(tm)
    rate = _mac_rate(s, m) * eff
    def extent(total: int, block: int, i: int) -> int:
        return max(0, min(total, (i + 1) * block) - i * block)

    def shape(ib: int, im: int, in_: int, ik: int) -> tuple[int, ...]:
        """A core's block shape: cores share operand slices only with cores
        that walk the same sequence of tiles."""
        return (extent(s.batch, bb, ib), extent(s.m, mb, im), extent(s.n, nb, in_), extent(s.k, kb, ik))

    def busy(ib: int, im: int, in_: int, ik: int) -> bool:
        return min(shape(ib, im, in_, ik)) > 0

    core = 0
    for ib, im, in_, ik in itertools.product(range(g.gb), range(g.gm), range(g.gn), range(g.gk)):
        rows = (min(s.m, im * mb), min(s.m, (im + 1) * mb))
        cols = (min(s.n, in_ * nb), min(s.n, (in_ + 1) * nb))
        ks = (min(s.k, ik * kb), min(s.k, (ik + 1) * kb))
        bat = (min(s.batch, ib * bb), min(s.batch, (ib + 1) * bb))
        st = CoreStream(core, [], ranges=[bat, rows, cols, ks])
        mrows, ncols, kext, nbat = rows[1] - rows[0], cols[1] - cols[0], ks[1] - ks[0], bat[1] - bat[0]
        if min(mrows, ncols, kext, nbat) > 0:
            # A shared operand block is loaded in slices by every core of its
            # group and all-gathered over the ring: DRAM reads it once, and no
            # single core's DMA channel carries the whole group.
            mine = shape(ib, im, in_, ik)
            a_group = [core + (j - in_) * g.gk for j in range(g.gn) if shape(ib, im, j, ik) == mine] \
                if share else [core]
            b_group = [core + (j - im) * g.gn * g.gk for j in range(g.gm) if shape(ib, j, in_, ik) == mine] \
                if share else [core]
            n_kt = _cdiv(kext, tk)
            step_k = max(1, n_kt // 8)  # coarsen long K loops to <= 8 steps per output tile
            tile = 0
            mts = [(mt * tm, min(tm, mrows - mt * tm)) for mt in range(_cdiv(mrows, tm))]
            nts = [(nt * tn, min(tn, ncols - nt * tn)) for nt in range(_cdiv(ncols, tn))]
            # Visit output tiles so the stationary operand is reused: "b" walks
            # row tiles inside a column tile, "a" and "c" column tiles inside a row tile.
            pairs = [(mt, nt) for nt in nts for mt in mts] if g.order == "b" else [(mt, nt) for mt in mts for nt in nts]
            for _ in range(nbat):
                first_a: set[int] = set()
                first_b: set[int] = set()
                for (m0, tmr), (n0, tnc) in pairs:
                    for k0 in range(0, n_kt, step_k):
                        kk = min(kext - k0 * tk, step_k * tk)
                        a_b, b_b = tmr * kk * s.isz, kk * tnc * s.isz
                        load_a = g.order != "a" or m0 not in first_a
                        load_b = g.order != "b" or n0 not in first_b
                        for load, name_, nbytes, group in ((load_a, a_name, a_b, a_group),
                                                           (load_b, b_name, b_b, b_group)):
                            if not load:
                                continue
                            mine = nbytes // len(group) + (nbytes % len(group) if core == group[0] else 0)
                            st.instrs.append(Instr("dma_in", name_, mine, tile=tile))
                            if len(group) > 1:
                                st.instrs.append(Instr("ring", name_, nbytes - mine, tile=tile,
                                                       peers=tuple(c2 for c2 in group if c2 != core),
                                                       note=f"all-gather over {len(group)} cores"))
                        macs = _round_up(tmr, m.pe_rows) * tnc * kk
                        st.instrs.append(Instr("pe", "", 0, macs / rate * m.clock_ghz, tile=tile,
                                               note=f"{tmr}x{tnc}x{kk} MACs"))
                        tile += 1
                    first_a.add(m0)
                    first_b.add(n0)
                    last = tile - 1  # the output tile's final k step
                    if g.gk > 1 and ik > 0:
                        st.instrs.append(Instr("ring", "partials", tmr * tnc * 4, tile=last,
                                               peer=core - ik, note="fp32 partial sums"))
                    else:
                        if s.bias:
                            st.instrs.append(Instr("dma_in", kernel.inputs[0].name, tnc * s.out_isz *
                                                   (tmr if s.bias == "full" else 1), tile=last, note="bias"))
                        st.instrs.append(Instr("dma_out", kernel.output.name, tmr * tnc * s.out_isz, tile=last))
            st.lx_peak = c.lx_bytes
            if g.cores > 1:
                st.instrs.append(Instr("barrier", note="end of kernel"))
        streams.append(st)
        core += 1
    compulsory = (s.batch * s.m * s.k + (s.batch if kernel.op in ("bmm", "baddbmm") else 1) * s.k * s.n) * s.isz \
        + s.batch * s.m * s.n * s.out_isz
    if s.bias:
        compulsory += (s.batch * s.m if s.bias == "full" else 1) * s.n * s.out_isz
    division = {"grid": f"b{g.gb} m{g.gm} n{g.gn} k{g.gk}", "tile": f"{tm}x{tn}x{tk}", "order": g.order,
                "cores": g.cores,
                "share": share, "pe_efficiency": round(eff, 3), "estimate_ns": round(c.total_ns)}
    return Program(name, "matmul", kernel, streams, division, {str(k): v for k, v in sizes.items()},
                   flops=2.0 * s.batch * s.m * s.n * s.k, compulsory_bytes=compulsory, ksplit=g.gk)
