"""What one step of a program costs on a core: vector/SFU cycles of a Kernel IR
body over a tile, PE-array time of a matmul step, ring time of a transfer.

The planners use the same functions to estimate before they emit, and the
timing model to run the emitted steps, so an estimate and a simulation differ
only in what the estimate leaves out (contention, dependencies, fill)."""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

import sympy

from spyre_shims import index as sidx
from spyre_shims.kernel_ir import Instr, LoopKernel

from spyre_adapter.model.bodies import deps
from spyre_adapter.model.machine import Machine
from spyre_adapter.model.program import itemsize

__all__ = ["SFU_OPS", "OpCounts", "op_counts", "lane_reductions", "lane_cycles", "vec_cycles", "elems_per_cycle",
           "pe_ns", "mac_rate"]

#: Ops the SFU computes (several cycles per stick); other pointwise ops take one.
SFU_OPS = frozenset({
    "exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sqrt", "rsqrt", "sin", "cos", "tan",
    "asin", "acos", "atan", "sinh", "cosh", "tanh", "asinh", "acosh", "atanh", "erf", "erfc",
    "erfinv", "sigmoid", "lgamma", "digamma", "reciprocal", "truediv", "div_rn", "pow", "atan2",
    "hypot", "int_truediv", "floordiv", "truncdiv", "mod", "fmod", "remainder",
})
_FREE = frozenset({"constant", "index_expr", "getitem", "check_bounds", "device_assert", "indirect", "masked",
                   "load", "store", "store_reduction"})


class OpCounts(tuple):  # type: ignore[type-arg]
    """(vector ops per point before the reduction, of which SFU, per output point
    after it, of which SFU)."""

    @property
    def vec_pre(self) -> int:
        return int(self[0])

    @property
    def sfu_pre(self) -> int:
        return int(self[1])

    @property
    def vec_post(self) -> int:
        return int(self[2])

    @property
    def sfu_post(self) -> int:
        return int(self[3])


#: Combine steps per point of a scan: log-steps inside a stick (5 for the 32
#: fp32 lanes) and one carry between sticks. An assumption, not fitted.
SCAN_STEPS = 6


@functools.lru_cache(maxsize=4096)
def op_counts(body: tuple[Instr, ...]) -> OpCounts:
    """Vector and SFU ops per point of a body (a reduction is one op per point;
    a scan :data:`SCAN_STEPS` times its combine function's ops)."""
    vec_pre = sfu_pre = vec_post = sfu_post = 0
    post = False
    for ins in body:
        if ins.op == "reduction":
            vec_pre += 1
            post = True
            continue
        if ins.op == "scan":
            combine = [c for c in ins.args[2] if c.op not in ("scan_arg", "scan_result", "constant")]
            vec_pre += SCAN_STEPS * max(1, len(combine))
            sfu_pre += SCAN_STEPS * sum(c.op in SFU_OPS for c in combine)
            continue
        if ins.op in _FREE:
            continue
        sfu = ins.op in SFU_OPS
        if post:
            vec_post += 1
            sfu_post += sfu
        else:
            vec_pre += 1
            sfu_pre += sfu
    return OpCounts((vec_pre, sfu_pre, vec_post, sfu_post))


def _feeding_loads(body: tuple[Instr, ...], start: int) -> list[Instr]:
    """The loads the value of instruction ``start`` is computed from."""
    seen, todo, loads = set(), [start], []
    while todo:
        k = todo.pop()
        if k in seen:
            continue
        seen.add(k)
        if body[k].op == "load":
            loads.append(body[k])
        else:
            todo.extend(deps(body, k))
    return loads


@functools.lru_cache(maxsize=4096)
def lane_reductions(body: tuple[Instr, ...], n_red: int) -> tuple[int, ...]:
    """Per reduction of the body that reduces along the stick, the itemsize of
    the data it reads: one of its loads steps by one element along the
    innermost reduction variable (``x.sum(-1)``), so the values to combine sit
    in the lanes of one stick (counted in sticks of the loaded data: torch-spyre
    found read, sum, amax and mean on one curve).
    A reduction whose loads step across sticks (``x.sum(0)``) combines whole
    sticks elementwise and is not one."""
    if n_red == 0:
        return ()
    rvar = sidx.index_symbol(f"r{n_red - 1}")
    out = []
    for k, ins in enumerate(body):
        if ins.op != "reduction":
            continue
        for ld in _feeding_loads(body, k):
            expr = sympy.expand(sidx.as_expr(ld.args[1]))
            if rvar in expr.free_symbols and abs(expr.coeff(rvar)) == 1:
                out.append(itemsize(ld.dtype or ins.dtype or "float32"))
                break
    return tuple(out)


def lane_cycles(kernel: LoopKernel, m: Machine) -> float:
    """Extra vector cycles per (iteration x reduction) point for the body's
    reductions along the stick: each stick of values a core reduces across its
    lanes costs ``m.lane_reduce_cycles_per_stick``."""
    sizes = lane_reductions(kernel.body, len(kernel.reduction_ranges))
    return sum(m.lane_reduce_cycles_per_stick * isz / m.stick_bytes for isz in sizes)


@functools.lru_cache(maxsize=4096)
def _min_float_width(dtypes: tuple[str, ...]) -> int:
    widths = [itemsize(d) for d in dtypes if d not in ("int64", "int32", "int16", "int8", "uint8", "bool")]
    return max(2, min(widths)) if widths else 2


def elems_per_cycle(m: Machine, dtypes: Sequence[str]) -> float:
    """Vector lanes per cycle for the narrowest floating dtype a step touches."""
    return m.vector_bytes_per_cycle / _min_float_width(tuple(sorted(set(dtypes))))


def vec_cycles(kernel: LoopKernel, points: int, red_points: int, m: Machine, dtypes: Sequence[str]) -> float:
    """Cycles of body ``kernel`` over ``points`` output points, each reducing
    ``red_points`` (1 without a reduction)."""
    c = op_counts(kernel.body)
    sfu = m.sfu_cycles_per_stick - 1
    epc = elems_per_cycle(m, dtypes)
    return ((points * red_points * (c.vec_pre + c.sfu_pre * sfu) + points * (c.vec_post + c.sfu_post * sfu)) / epc
            + points * red_points * lane_cycles(kernel, m))


def mac_rate(isz: int, m: Machine) -> float:
    """Sustained MACs per ns of one core's PE arrays: 16-bit operands at the fitted
    rate, fp32 emulated at a quarter of it."""
    return m.sustained_mac_per_ns_per_core / (4.0 if isz >= 4 else 1.0)


def pe_ns(rows: int, cols: int, depth: int, isz: int, m: Machine, batch: int = 1) -> float:
    """Time of one PE step ``(rows x depth) @ (depth x cols)``: rows run in passes
    of 8, and fewer than 64 rows leave part of the arrays idle."""
    macs = batch * math.ceil(rows / m.pe_rows) * m.pe_rows * cols * depth
    return macs / (mac_rate(isz, m) * m.pe_efficiency(rows))
