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


def cost(s: MatmulShape, g: Grid, m: Machine) -> Cost | None:
    """Closed-form time of a grid, or None when it does not fit LX."""
    bb, mb, nb, kb = _per_core(s, g, m)
    tm, tn, tk = min(g.tm, mb), min(g.tn, nb), min(g.tk, kb)
    lx = tm * tn * 4 + 2 * (tm * tk + tk * tn) * s.isz + (tn * s.isz if s.bias else 0)
    if lx > m.lx_usable_bytes:
        return None
    n_mt, n_nt = _cdiv(mb, tm), _cdiv(nb, tn)
    # Per core: A is re-read once per column tile, B once per row tile.
    a_core = bb * mb * kb * s.isz * n_nt
    b_core = bb * kb * nb * s.isz * n_mt
    c_core = bb * mb * nb * s.out_isz
    # DRAM: a shared operand block is read once per sharing group.
    a_share, b_share = (g.gn, g.gm) if g.share else (1, 1)
    dram_rd = (a_core * g.cores / a_share + b_core * g.cores / b_share)
    if s.bias:
        dram_rd += (s.batch if s.bias == "full" else 1) * (s.m if s.bias == "full" else 1) * s.n * s.out_isz
    dram_wr = c_core * g.cores / g.gk
    dram_ns = (dram_rd + dram_wr) / m.dram_gbps(dram_rd, dram_wr)
    # One core's own DMA: its share of the reads, plus its output.
    own = a_core / a_share + b_core / b_share + c_core / g.gk
    dma_ns = own / min(m.core_dma_gbps, m.dram_gbps(dram_rd, dram_wr) / max(1, g.cores) * g.cores)
    recv = a_core * (1 - 1 / a_share) + b_core * (1 - 1 / b_share)
    partial = (mb * nb * 4 * (g.gk - 1) / g.gk) if g.gk > 1 else 0.0
    ring_ns = (recv + partial) / m.ring_gbps
    eff = m.pe_efficiency(tm)
    compute_ns = bb * _round_up(mb, m.pe_rows) * nb * kb / (_mac_rate(s, m) * eff)
    steps = bb * n_mt * n_nt * _cdiv(kb, tk)
    fill = (tm * tk + tk * tn) * s.isz / m.core_dma_gbps + tm * tn * s.out_isz / m.core_dma_gbps
    per_core = max(compute_ns, dma_ns, ring_ns) + fill + steps * m.dma_setup_ns * 0.0
    total = m.kernel_launch_ns + max(per_core, dram_ns) + (m.sync_ns if g.cores > 1 else 0.0)
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
        for tm in {min(mb, t) for t in (64, 128, 256, 512, 1024)}:
            for tn in {min(nb, t) for t in (64, 128, 256, 512, 1024)}:
                for tk in {min(kb, t) for t in (64, 128, 256, 512)}:
                    out.append(Grid(gb, gm, gn, gk, tm, tn, tk))
    return out


def choose(s: MatmulShape, m: Machine, share: bool = True, max_cores: int | None = None) -> tuple[Grid, Cost]:
    best: tuple[Grid, Cost] | None = None
    for g in grids(s, m):
        if max_cores is not None and g.cores > max_cores:
            continue
        g = dataclasses.replace(g, share=share)
        c = cost(s, g, m)
        if c is not None and (best is None or c.total_ns < best[1].total_ns):
            best = (g, c)
    if best is None:
        raise ValueError(f"no matmul tiling fits LX for {s}")
    return best


def plan_matmul(kernel: ExternKernel, m: Machine, sizes: Mapping[sympy.Symbol, int], name: str,
                share: bool = True, max_cores: int | None = None) -> Program:
    """Schedule a matmul-family extern kernel."""
    s = shape_of(kernel, sizes)
    if min(s.batch, s.m, s.n, s.k) == 0:
        # Empty output, or an empty sum (zeros, plus the bias for addmm): no work
        # for the PE arrays; the numerics handle it.
        return Program(name, "matmul", kernel, [], {"grid": "empty", "cores": 0}, {str(k): v for k, v in sizes.items()},
                       flops=0.0, compulsory_bytes=0)
    g, c = choose(s, m, share, max_cores)
    bb, mb, nb, kb = _per_core(s, g, m)
    tm, tn, tk = min(g.tm, mb), min(g.tn, nb), min(g.tk, kb)
    a_name = kernel.inputs[-2].name
    b_name = kernel.inputs[-1].name
    streams = []
    eff = m.pe_efficiency(tm)
    rate = _mac_rate(s, m) * eff
    core = 0
    for ib, im, in_, ik in itertools.product(range(g.gb), range(g.gm), range(g.gn), range(g.gk)):
        rows = (min(s.m, im * mb), min(s.m, (im + 1) * mb))
        cols = (min(s.n, in_ * nb), min(s.n, (in_ + 1) * nb))
        ks = (min(s.k, ik * kb), min(s.k, (ik + 1) * kb))
        bat = (min(s.batch, ib * bb), min(s.batch, (ib + 1) * bb))
        st = CoreStream(core, [], ranges=[bat, rows, cols, ks])
        mrows, ncols, kext, nbat = rows[1] - rows[0], cols[1] - cols[0], ks[1] - ks[0], bat[1] - bat[0]
        if min(mrows, ncols, kext, nbat) > 0:
            a_owner = in_ == 0 or not share  # first core of the row group reads A
            b_owner = im == 0 or not share
            n_kt = _cdiv(kext, tk)
            step_k = max(1, n_kt // 8)  # coarsen long K loops to <= 8 steps per output tile
            tile = 0
            for _ in range(nbat):
                for mt in range(_cdiv(mrows, tm)):
                    tmr = min(tm, mrows - mt * tm)
                    for nt in range(_cdiv(ncols, tn)):
                        tnc = min(tn, ncols - nt * tn)
                        for k0 in range(0, n_kt, step_k):
                            kk = min(kext - k0 * tk, step_k * tk)
                            a_b, b_b = tmr * kk * s.isz, kk * tnc * s.isz
                            st.instrs.append(Instr("dma_in" if a_owner else "ring", a_name, a_b, tile=tile,
                                                   peer=-1 if a_owner else core - in_ * g.gk))
                            st.instrs.append(Instr("dma_in" if b_owner else "ring", b_name, b_b, tile=tile,
                                                   peer=-1 if b_owner else core - im * g.gn * g.gk))
                            macs = _round_up(tmr, m.pe_rows) * tnc * kk
                            st.instrs.append(Instr("pe", "", 0, macs / rate * m.clock_ghz, tile=tile,
                                                   note=f"{tmr}x{tnc}x{kk} MACs"))
                            tile += 1
                        last = tile - 1  # the output tile's final k step
                        if g.gk > 1 and ik > 0:
                            st.instrs.append(Instr("ring", "partials", tmr * tnc * 4, tile=last,
                                                   peer=core - ik, note="fp32 partial sums"))
                        elif g.gk == 1 or ik == 0:
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
    division = {"grid": f"b{g.gb} m{g.gm} n{g.gn} k{g.gk}", "tile": f"{tm}x{tn}x{tk}", "cores": g.cores,
                "share": share, "pe_efficiency": round(eff, 3), "estimate_ns": round(c.total_ns)}
    return Program(name, "matmul", kernel, streams, division, {str(k): v for k, v in sizes.items()},
                   flops=2.0 * s.batch * s.m * s.n * s.k, compulsory_bytes=compulsory, ksplit=g.gk)
