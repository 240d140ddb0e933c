"""Static analysis of Kernel IR for the cost model: per-range op counts and the
DRAM footprint of every load and store, counted in 128-byte sticks.

A *range* is a contiguous run ``[a, b)`` of a loop kernel's flattened
(row-major) iteration space; reductions always span their full reduction
extent. Footprints are exact for affine indices (strided boxes, vectorised over
contiguous runs) and evaluated on the indices themselves otherwise.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any

import sympy
import torch

from spyre_shims import index as sidx
from spyre_shims.kernel_ir import Instr, LoopKernel
from spyre_shims.ops import torch_dtype
from spyre_shims.reference import concrete

#: Ops the SFU computes (several cycles per stick); other pointwise ops take one.
SFU_OPS = frozenset({
    "exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sqrt", "rsqrt", "sin", "cos", "tan",
    "asin", "acos", "atan", "sinh", "cosh", "tanh", "asinh", "acosh", "atanh", "erf", "erfc",
    "erfinv", "sigmoid", "lgamma", "digamma", "reciprocal", "truediv", "div_rn", "pow", "atan2",
    "hypot", "int_truediv", "floordiv", "truncdiv", "mod", "fmod", "remainder",
})
_FREE = frozenset({"constant", "index_expr", "getitem", "check_bounds", "device_assert", "indirect", "masked"})


def itemsize(dtype: str) -> int:
    """Bytes per element of a dtype name."""
    return torch.empty((), dtype=torch_dtype(dtype)).element_size()


@dataclasses.dataclass(frozen=True)
class Access:
    """One load or store of a loop kernel."""

    buffer: str
    expr: sympy.Expr
    itemsize: int
    store: bool
    reduced: bool  # store_reduction: indexed by iteration vars only


@dataclasses.dataclass(frozen=True)
class LoopInfo:
    """Concrete sizes and per-element work of one loop kernel."""

    kernel: LoopKernel
    ranges: tuple[int, ...]
    red: tuple[int, ...]
    numel: int
    rnumel: int
    vec_pre: int  # vector ops per (iteration x reduction) point
    sfu_pre: int
    vec_post: int  # per iteration point, after the reduction
    sfu_post: int
    accesses: tuple[Access, ...]
    reduction_kinds: tuple[str, ...]


def _count(body: Sequence[Instr]) -> tuple[int, int, int, int]:
    vec_pre = sfu_pre = vec_post = sfu_post = 0
    post = False
    for ins in body:
        if ins.op == "reduction":
            vec_pre += 1
            post = True
            continue
        if ins.op in _FREE or ins.op in ("load", "store", "store_reduction"):
            continue
        sfu = ins.op in SFU_OPS
        if post:
            vec_post += 1
            sfu_post += sfu
        else:
            vec_pre += 1
            sfu_pre += sfu
    return vec_pre, sfu_pre, vec_post, sfu_post


def analyse(kernel: LoopKernel, dtypes: Mapping[str, str], sizes: Mapping[sympy.Symbol, int]) -> LoopInfo:
    """Concrete :class:`LoopInfo` of a loop kernel."""
    ranges = tuple(concrete(r, sizes) for r in kernel.ranges)
    red = tuple(concrete(r, sizes) for r in kernel.reduction_ranges)
    accesses = []
    for ins in kernel.body:
        if ins.op == "load":
            accesses.append(Access(ins.args[0], _bind(ins.args[1], sizes), itemsize(dtypes[ins.args[0]]), False, False))
        elif ins.op in ("store", "store_reduction"):
            accesses.append(Access(ins.args[0], _bind(ins.args[1], sizes), itemsize(dtypes[ins.args[0]]), True,
                                   ins.op == "store_reduction"))
    v1, s1, v2, s2 = _count(kernel.body)
    kinds = tuple(i.args[2] for i in kernel.body if i.op == "reduction")
    return LoopInfo(kernel, ranges, red, math.prod(ranges), math.prod(red), v1, s1, v2, s2, tuple(accesses), kinds)


def _bind(expr: sympy.Expr, sizes: Mapping[sympy.Symbol, int]) -> sympy.Expr:
    if not sizes:
        return expr
    subs = {s: sympy.Integer(v) for s, v in sizes.items() if s in expr.free_symbols}
    return expr.xreplace(subs) if subs else expr


# ------------------------------------------------------------------ boxes

Box = tuple[tuple[int, int], ...]


def boxes(shape: Sequence[int], a: int, b: int) -> list[Box]:
    """Decompose the flat row-major range ``[a, b)`` of ``shape`` into boxes."""
    if a >= b:
        return []
    if not shape:
        return [()]
    inner = math.prod(shape[1:])
    out: list[Box] = []
    r0, r1 = divmod(a, inner)
    e0, e1 = divmod(b, inner)
    if r0 == e0:
        return [((r0, r0 + 1), *sub) for sub in boxes(shape[1:], r1, e1)]
    if r1:
        out += [((r0, r0 + 1), *sub) for sub in boxes(shape[1:], r1, inner)]
        r0 += 1
    if e0 > r0:
        out.append(((r0, e0), *((0, s) for s in shape[1:])))
    if e1:
        out += [((e0, e0 + 1), *sub) for sub in boxes(shape[1:], 0, e1)]
    return out


# ------------------------------------------------------------------ footprints

def _vars(info: LoopInfo) -> tuple[list[sympy.Symbol], list[int]]:
    ivars, rvars = info.kernel.index_vars()
    return list(ivars) + list(rvars), list(info.ranges) + list(info.red)


def _affine_sticks(coeffs: list[int], offset: int, starts: list[int], extents: list[int],
                   isz: int, stick: int) -> tuple[int, int]:
    """(elements, sticks) touched by an affine map over a box."""
    dims = sorted(((c, n, s) for c, n, s in zip(coeffs, extents, starts) if c != 0 and n > 1), key=lambda t: t[0])
    base = offset + sum(c * s for c, s in zip(coeffs, starts))
    if any(n == 0 for n in extents):
        return 0, 0
    if not dims:
        return 1, 1
    elems = math.prod(n for _, n, _ in dims)
    run = 1
    k = 0
    if dims[0][0] == 1:
        while k < len(dims) and dims[k][0] == run:
            run *= dims[k][1]
            k += 1
    rest = dims[k:]
    n_runs = math.prod(n for _, n, _ in rest)
    if run == 1 and rest and rest[0][0] * isz >= stick:
        return elems, elems  # strided: every element its own stick
    if n_runs > 1 << 16:  # many short runs: bound by the span they cover
        span = (sum(c * (n - 1) for c, n, _ in dims) + 1) * isz
        return elems, min(elems, -(-span // stick) + 1)
    # Exact: vectorised over run starts, union of the runs' stick intervals.
    st = torch.full((1,), base, dtype=torch.int64)
    for c, n, _ in rest:
        st = (st[:, None] + c * torch.arange(n, dtype=torch.int64)[None, :]).reshape(-1)
    return elems, _union_len((st * isz) // stick, ((st + run - 1) * isz) // stick)


def _union_len(first: torch.Tensor, last: torch.Tensor) -> int:
    """Number of integers covered by the union of intervals [first_i, last_i]."""
    order = first.argsort()
    f, lst = first[order], last[order]
    prev = torch.cat([torch.tensor([-(1 << 62)]), torch.cummax(lst, 0).values[:-1]])
    return int((lst - torch.maximum(f - 1, prev)).clamp(min=0).sum())


def access_footprint(info: LoopInfo, acc: Access, a: int, b: int, stick: int) -> tuple[int, int]:
    """(elements, bytes in sticks) access ``acc`` touches over flat iteration range [a, b)."""
    vars_, extents = _vars(info)
    nbox = len(info.ranges)
    aff = sidx.affine(acc.expr, vars_)
    total_e = total_s = 0
    for box in boxes(list(info.ranges), a, b):
        if acc.reduced:
            full = list(box) + [(0, 1)] * len(info.red)
        else:
            full = list(box) + [(0, r) for r in info.red]
        starts = [lo for lo, _ in full]
        ext = [hi - lo for lo, hi in full]
        if aff is not None:
            e, s = _affine_sticks(aff[1], aff[0], starts, ext, acc.itemsize, stick)
        else:
            e, s = _evaluated_sticks(acc.expr, vars_, starts, ext, acc.itemsize, stick, nbox)
        total_e += e
        total_s += s
    return total_e, total_s * stick


def _evaluated_sticks(expr: sympy.Expr, vars_: list[sympy.Symbol], starts: list[int], ext: list[int],
                      isz: int, stick: int, nbox: int) -> tuple[int, int]:
    free = {s for s in expr.free_symbols if s.name.startswith("v")}
    n = math.prod(ext)
    if n == 0:
        return 0, 0
    if free:
        # Gather through an indirect index: each gathered row is one contiguous run.
        aff = sidx.affine(expr.xreplace({v: 0 for v in free}), vars_)
        run = next((e for c, e in zip(aff[1], ext) if c == 1), 1) if aff else 1
        rows = max(n // run, 1)
        return n, rows * (-(-run * isz // stick) + 1)
    scale = 1
    if n > 1 << 22:  # evaluate a prefix of rows and scale (compile-time cost bound)
        keep = max(1, (1 << 22) * ext[0] // n)
        scale = ext[0] / keep
        ext = [keep] + ext[1:]
    env: dict[sympy.Symbol, Any] = {}
    nd = len(ext)
    for k, (v, s0, e) in enumerate(zip(vars_, starts, ext)):
        view = [1] * nd
        view[k] = e
        env[v] = torch.arange(s0, s0 + e, dtype=torch.int64).view(view)
    idx = sidx.compile_index(expr)(env)
    idx = torch.as_tensor(idx).expand(*ext).reshape(-1)
    distinct = torch.unique((idx * isz) // stick)
    return n, int(distinct.numel() * scale)
