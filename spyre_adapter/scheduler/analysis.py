"""Static analysis of Kernel IR for the cost model: per-range op counts and the
DRAM footprint of every load and store, counted in 128-byte sticks.

A *range* is a contiguous run ``[a, b)`` of a loop kernel's flattened
(row-major) iteration space; reductions always span their full reduction
extent. Footprints are exact for affine indices (strided boxes, vectorised over
contiguous runs) and evaluated on the indices themselves otherwise.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Mapping, Sequence
from typing import Any

import sympy
import torch

from spyre_shims import index as sidx
from spyre_shims.kernel_ir import Instr, LoopKernel, Ref
from spyre_shims.reference import concrete

from spyre_adapter.model.costs import op_counts
from spyre_adapter.model.program import Box, itemsize
from spyre_adapter.model.traffic import merge_intervals


@dataclasses.dataclass(frozen=True)
class Access:
    """One load or store of a loop kernel."""

    buffer: str
    expr: sympy.Expr
    itemsize: int
    store: bool
    reduced: bool  # store_reduction: indexed by iteration vars only
    #: (var name, lo, hi): the load's mask restricts the var to [lo, hi) (masked
    #: lanes read nothing: cat, padding and rotate-half read only their part)
    bounds: tuple[tuple[str, int, int], ...] = ()


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
    #: footprints already computed, per (access, box, stick): the planner asks
    #: for the same ones for every candidate division
    cache: dict[Any, Any] = dataclasses.field(default_factory=dict, compare=False, hash=False, repr=False)
    #: storage elements of each buffer the kernel touches (bounds every footprint)
    numels: Mapping[str, int] = dataclasses.field(default_factory=dict, compare=False, hash=False, repr=False)


def analyse(kernel: LoopKernel, dtypes: Mapping[str, str], sizes: Mapping[sympy.Symbol, int],
            numels: Mapping[str, int] | None = None) -> LoopInfo:
    """Concrete :class:`LoopInfo` of a loop kernel (``numels``: the buffers' storage
    elements, which bound what any access of them can touch)."""
    ranges = tuple(concrete(r, sizes) for r in kernel.ranges)
    red = tuple(concrete(r, sizes) for r in kernel.reduction_ranges)
    accesses = []
    for ins in kernel.body:
        if ins.op == "load":
            bounds = _mask_bounds(kernel.body, ins.mask, sizes) if ins.mask is not None else ()
            accesses.append(Access(ins.args[0], _bind(ins.args[1], sizes), itemsize(dtypes[ins.args[0]]), False, False,
                                   bounds))
        elif ins.op in ("store", "store_reduction"):
            accesses.append(Access(ins.args[0], _bind(ins.args[1], sizes), itemsize(dtypes[ins.args[0]]), True,
                                   ins.op == "store_reduction"))
    v1, s1, v2, s2 = op_counts(tuple(kernel.body))
    kinds = tuple(i.args[2] for i in kernel.body if i.op == "reduction")
    return LoopInfo(kernel, ranges, red, math.prod(ranges), math.prod(red), v1, s1, v2, s2, tuple(accesses), kinds,
                    numels=dict(numels or {}))


_COMPARE = {"lt": (None, 0), "le": (None, 1), "gt": (1, None), "ge": (0, None)}
_FLIP = {"lt": "gt", "le": "ge", "gt": "lt", "ge": "le"}
_AND = frozenset({"and_", "logical_and", "bitwise_and"})
_UNBOUNDED = 1 << 62


def _var_plus_const(body: Sequence[Instr], ref: Any, sizes: Mapping[sympy.Symbol, int]) -> tuple[str, int] | None:
    """(var, c) when ``ref`` is index_expr(var + c)."""
    if not isinstance(ref, Ref) or body[ref.id].op != "index_expr":
        return None
    expr = sympy.expand(_bind(sidx.as_expr(body[ref.id].args[0]), sizes))
    free = list(expr.free_symbols)
    if len(free) != 1 or expr.coeff(free[0]) != 1 or not (expr - free[0]).is_Integer:
        return None
    return free[0].name, int(expr - free[0])


def _int_const(body: Sequence[Instr], ref: Any, sizes: Mapping[sympy.Symbol, int]) -> int | None:
    """The integer ``ref`` holds: a constant, or an index_expr of sizes only
    (a bound that is a symbolic size under dynamic shapes: ``i0 < s27``)."""
    if not isinstance(ref, Ref):
        return None
    ins = body[ref.id]
    if ins.op == "constant" and isinstance(ins.args[0], int):
        return int(ins.args[0])
    if ins.op == "index_expr":
        expr = _bind(sidx.as_expr(ins.args[0]), sizes)
        if expr.is_Integer:
            return int(expr)
    return None


def _mask_bounds(body: Sequence[Instr], mask: Any, sizes: Mapping[sympy.Symbol, int],
                 depth: int = 0) -> tuple[tuple[str, int, int], ...]:
    """Var ranges a load's mask implies: comparisons of an index var with a
    constant, and conjunctions of them. Anything else implies nothing (safe)."""
    if not isinstance(mask, Ref) or depth > 8:
        return ()
    ins = body[mask.id]
    if ins.op in _AND:
        return tuple(b for arg in ins.args for b in _mask_bounds(body, arg, sizes, depth + 1))
    if ins.op not in _COMPARE or len(ins.args) != 2:
        return ()
    op, (x, y) = ins.op, ins.args
    if _var_plus_const(body, x, sizes) is None:
        op, x, y = _FLIP[op], y, x
    vc, c = _var_plus_const(body, x, sizes), _int_const(body, y, sizes)
    if vc is None or c is None:
        return ()
    var, off = vc
    lo_adj, hi_adj = _COMPARE[op]
    bound = c - off  # var <op> bound
    lo = bound + lo_adj if lo_adj is not None else -_UNBOUNDED
    hi = bound + hi_adj if hi_adj is not None else _UNBOUNDED
    return ((var, lo, hi),)


def _bind(expr: sympy.Expr, sizes: Mapping[sympy.Symbol, int]) -> sympy.Expr:
    if not sizes:
        return expr
    free = expr.free_symbols  # computed anew on each access
    subs = {s: sympy.Integer(v) for s, v in sizes.items() if s in free}
    return expr.xreplace(subs) if subs else expr


def row_lead(ranges: Sequence[int], rows: int, mult: int) -> int | None:
    """The dimension where a kernel's rows end and its columns begin, if any."""
    acc = 1
    for t in range(len(ranges) + 1):
        if acc == rows and math.prod(ranges[t:]) == mult:
            return t
        if t < len(ranges):
            acc *= ranges[t]
    return None


def row_split(ranges: Sequence[int], rows: int) -> tuple[int, int] | None:
    """``(t, outer)``: splitting dimension ``t`` into ``outer`` x the rest puts a
    dimension boundary where the rows end."""
    acc = 1
    for t, r in enumerate(ranges):
        if rows % acc == 0 and acc < rows < acc * r and r % (rows // acc) == 0:
            return t, rows // acc
        acc *= r
    return None


# ------------------------------------------------------------------ boxes



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


#: Stick intervals ``[first_i, last_i]`` an access touches (None: not enumerated).
Intervals = tuple[torch.Tensor, torch.Tensor] | None


def _affine_sticks(coeffs: list[int], offset: int, starts: list[int], extents: list[int],
                   isz: int, stick: int) -> tuple[int, int, Intervals]:
    """(elements, sticks, the sticks as intervals when enumerated) an affine map touches over a box."""
    base = offset + sum(c * s for c, s in zip(coeffs, starts))
    if any(n == 0 for n in extents):
        return 0, 0, (torch.empty(0, dtype=torch.int64), torch.empty(0, dtype=torch.int64))
    dims = tuple(sorted(((c, n) for c, n in zip(coeffs, extents) if c != 0 and n > 1), key=lambda t: t[0]))
    shift = 0
    if stick % isz == 0:
        # Moving the box's first element by whole sticks moves every stick it
        # touches by as many: the shape and the start's place within a stick
        # decide the rest (the boxes of a division's cores, and of every
        # re-planned division, differ mostly in where they start).
        shift, base = divmod(base, stick // isz)
    # (cached for boxes of few runs only: the intervals of a large one are large)
    fn = _cached_sticks_at if math.prod(n for _, n in _run_split(dims)[1]) <= _CACHED_RUNS else _sticks_at
    elems, sticks, iv = fn(base, dims, isz, stick)
    if iv is not None:
        iv = (iv[0] + shift, iv[1] + shift)  # new tensors: the cache's are never handed out
    return elems, sticks, iv


#: Boxes of at most this many contiguous runs have their stick intervals cached.
_CACHED_RUNS = 1024


def _run_split(dims: tuple[tuple[int, int], ...]) -> tuple[int, tuple[tuple[int, int], ...]]:
    """(elements per contiguous run, the remaining dims) of (coefficient, extent) dims by coefficient."""
    run = 1
    k = 0
    if dims and dims[0][0] == 1:
        while k < len(dims) and dims[k][0] == run:
            run *= dims[k][1]
            k += 1
    return run, dims[k:]


def _sticks_at(base: int, dims: tuple[tuple[int, int], ...], isz: int, stick: int) -> tuple[int, int, Intervals]:
    """:func:`_affine_sticks` of the box whose first element is ``base``, over
    ``dims`` ((coefficient, extent) of its varying dimensions, by coefficient)."""
    if not dims:
        first = torch.tensor([base * isz // stick])
        return 1, 1, (first, first)
    elems = math.prod(n for _, n in dims)
    run, rest = _run_split(dims)
    n_runs = math.prod(n for _, n in rest)
    if run == 1 and rest and rest[0][0] * isz >= stick:
        return elems, elems, None  # strided: every element its own stick
    if n_runs > 1 << 16:  # many short runs: bound by the span they cover
        span = (sum(c * (n - 1) for c, n in dims) + 1) * isz
        return elems, min(elems, -(-span // stick) + 1), None
    # Exact: vectorised over run starts (largest stride outermost, so nested
    # strides give sorted starts), union of the runs' stick intervals.
    st = torch.full((1,), base, dtype=torch.int64)
    for c, n in sorted(rest, key=lambda t: -t[0]):
        st = (st[:, None] + c * torch.arange(n, dtype=torch.int64)[None, :]).reshape(-1)
    first, last = (st * isz) // stick, ((st + run - 1) * isz) // stick
    return elems, _union_len(first, last), (first, last)


_cached_sticks_at = functools.lru_cache(maxsize=4096)(_sticks_at)


def _union_len(first: torch.Tensor, last: torch.Tensor) -> int:
    """Number of integers covered by the union of intervals [first_i, last_i]."""
    if first.numel() > 1 and bool((first[1:] >= first[:-1]).all()):
        f, lst = first, last  # already in order (regular strided runs)
    else:
        order = first.argsort()
        f, lst = first[order], last[order]
    prev = torch.cat([torch.tensor([-(1 << 62)]), torch.cummax(lst, 0).values[:-1]])
    return int((lst - torch.maximum(f - 1, prev)).clamp(min=0).sum())


def _boxes_of(info: LoopInfo, acc: Access, a: int, b: int, red: tuple[int, int] | None) -> list[Box]:
    """Boxes over (iteration + reduction) vars an access covers for iteration range [a, b)."""
    if acc.reduced:
        rboxes: list[Box] = [tuple((0, 1) for _ in info.red)]
    elif red is not None:
        rboxes = boxes(list(info.red), *red)
    else:
        rboxes = [tuple((0, r) for r in info.red)]
    out = [(*box, *rbox) for box in boxes(list(info.ranges), a, b) for rbox in rboxes]
    if acc.bounds:
        names = [v.name for v in _vars(info)[0]]
        clip = {}
        for var, lo, hi in acc.bounds:
            if var in names:
                k = names.index(var)
                old = clip.get(k, (-_UNBOUNDED, _UNBOUNDED))
                clip[k] = (max(old[0], lo), min(old[1], hi))
        out = [box for box in (tuple((max(lo, clip[k][0]), min(hi, clip[k][1])) if k in clip else (lo, hi)
                                     for k, (lo, hi) in enumerate(full)) for full in out)
               if all(lo < hi for lo, hi in box)]
    return out


def _box_sticks(info: LoopInfo, acc: Access, full: Box, stick: int) -> tuple[int, int, Intervals]:
    key = (acc, full, stick)
    hit = info.cache.get(key)
    if hit is None:
        hit = info.cache[key] = _box_sticks_uncached(info, acc, full, stick)
    return hit


def _box_sticks_uncached(info: LoopInfo, acc: Access, full: Box, stick: int) -> tuple[int, int, Intervals]:
    vars_, _ = _vars(info)
    aff = sidx.affine(acc.expr, vars_)
    starts = [lo for lo, _ in full]
    ext = [hi - lo for lo, hi in full]
    if aff is not None:
        return _affine_sticks(aff[1], aff[0], starts, ext, acc.itemsize, stick)
    return _evaluated_sticks(acc.expr, vars_, starts, ext, acc.itemsize, stick, len(info.ranges))


def access_footprint(info: LoopInfo, acc: Access, a: int, b: int, stick: int,
                     red: tuple[int, int] | None = None) -> tuple[int, int]:
    """(elements, bytes in sticks) access ``acc`` touches over flat iteration range [a, b);
    ``red``: only this flat range of the reduction extent (a core's chunk of a split)."""
    total_e = total_s = 0
    for full in _boxes_of(info, acc, a, b, red):
        e, s, _ = _box_sticks(info, acc, full, stick)
        total_e += e
        total_s += s
    return total_e, _within_buffer(info, acc, total_s * stick, stick)


def _within_buffer(info: LoopInfo, acc: Access, nbytes: int, stick: int) -> int:
    """``nbytes`` (in sticks) of ``acc`` bounded by its buffer's own sticks: a
    gather through a data-dependent index is counted a stick per gathered run,
    which for a small buffer read many times is more than the buffer holds."""
    numel = info.numels.get(acc.buffer)
    if numel is None:
        return nbytes
    return min(nbytes, (-(-numel * acc.itemsize // stick) + 1) * stick)


def stick_intervals(info: LoopInfo, acc: Access, a: int, b: int, stick: int,
                    red: tuple[int, int] | None = None) -> Intervals:
    """The sticks ``acc`` touches over [a, b) as intervals, or None where they are
    only bounded (strided or very many runs, gathers, sampled evaluation)."""
    firsts, lasts = [], []
    for full in _boxes_of(info, acc, a, b, red):
        _, _, iv = _box_sticks(info, acc, full, stick)
        if iv is None:
            return None
        firsts.append(iv[0])
        lasts.append(iv[1])
    empty = torch.empty(0, dtype=torch.int64)
    return (torch.cat(firsts), torch.cat(lasts)) if firsts else (empty, empty)


def merged(iv: tuple[torch.Tensor, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """Canonical form of a set of stick intervals: sorted, overlapping and adjacent ones joined
    (equal stick sets give equal tensors)."""
    return merge_intervals(*iv)


def union_bytes(intervals: Sequence[Intervals], stick: int) -> int | None:
    """Bytes (in sticks) of the union of several accesses' intervals (None if any is unknown)."""
    if any(iv is None for iv in intervals):
        return None
    known = [iv for iv in intervals if iv is not None and iv[0].numel()]
    if not known:
        return 0
    return _union_len(torch.cat([iv[0] for iv in known]), torch.cat([iv[1] for iv in known])) * stick


def union_footprint(info: LoopInfo, accs: Sequence[Access], a: int, b: int, stick: int,
                    red: tuple[int, int] | None = None) -> int:
    """Bytes (in sticks) the union of several accesses of one buffer touches over [a, b):
    loads of the same data at shifted indices (rotate-half, stencils) move it once.
    Where a footprint is only bounded, not enumerated, the sum bounds the union."""
    if len(accs) == 1:
        one = _boxes_of(info, accs[0], a, b, red)
        if len(one) <= 1:  # one box: its stick count is the union already (no intervals to merge)
            return _within_buffer(info, accs[0], sum(_box_sticks(info, accs[0], full, stick)[1] for full in one) * stick,
                                  stick)
    union = union_bytes([stick_intervals(info, acc, a, b, stick, red) for acc in accs], stick)
    if union is None:
        return _within_buffer(info, accs[0], sum(access_footprint(info, x, a, b, stick, red)[1] for x in accs), stick)
    return union


def _unit_stride_runs(expr: sympy.Expr, vars_: list[sympy.Symbol], starts: list[int], ext: list[int],
                      isz: int, stick: int) -> tuple[int, Intervals] | None:
    """Sticks of an index that is ``f(outer vars) + v`` in the box's innermost var
    ``v``: each outer point reads one contiguous run, so only run starts are
    evaluated (a stick's worth of elements at a time instead of every one)."""
    inner = len(ext) - 1
    if inner < 0 or ext[inner] <= 1:
        return None
    v = vars_[inner]
    rest = sympy.expand(expr - v)
    if v in rest.free_symbols:
        return None
    outer = math.prod(ext[:inner])
    if outer > 1 << 22:
        return None
    env: dict[sympy.Symbol, Any] = {}
    for k, (var, s0, e) in enumerate(zip(vars_, starts, ext)):
        view = [1] * len(ext)
        view[k] = e if k != inner else 1
        env[var] = torch.arange(s0, s0 + (e if k != inner else 1), dtype=torch.int64).view(view)
    st = torch.as_tensor(sidx.compile_index(expr)(env)).expand(*ext[:inner], 1).reshape(-1)
    first, last = (st * isz) // stick, ((st + ext[inner] - 1) * isz) // stick
    return _union_len(first, last), (first, last)


def _evaluated_sticks(expr: sympy.Expr, vars_: list[sympy.Symbol], starts: list[int], ext: list[int],
                      isz: int, stick: int, nbox: int) -> tuple[int, int, Intervals]:
    free = {s for s in expr.free_symbols if s.name.startswith("v")}
    n = math.prod(ext)
    if n == 0:
        return 0, 0, (torch.empty(0, dtype=torch.int64), torch.empty(0, dtype=torch.int64))
    if free:
        # Gather through an indirect index: each gathered row is one contiguous run.
        aff = sidx.affine(expr.xreplace({v: 0 for v in free}), vars_)
        run = next((e for c, e in zip(aff[1], ext) if c == 1), 1) if aff else 1
        rows = max(n // run, 1)
        return n, rows * (-(-run * isz // stick) + 1), None
    runs = _unit_stride_runs(expr, vars_, starts, ext, isz, stick)
    if runs is not None:
        return n, *runs
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
    return n, int(distinct.numel() * scale), (distinct, distinct) if scale == 1 else None
