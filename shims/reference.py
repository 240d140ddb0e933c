"""Executable semantics of the Kernel IR: a vectorised evaluator.

A loop kernel is evaluated over a *tile* (a box of its iteration space and of
its reduction space) with one torch op per instruction on the whole tile.
Where loads read and stores write is up to a :class:`TileMemory`:
:class:`FlatMemory` reads and writes the flat host buffers (the reference
backend); a vendor emulator supplies its own (for example operands held in a
core's scratchpad). Tiles may be *batched*: a leading dimension stacks tiles of
equal extents that start at different points (one per core), so many cores'
steps run as one op.

Reductions can run in two phases, as a device that spreads one reduction over
cores does: :func:`evaluate` with ``phase="partial"`` stops at the reductions
and returns their partial states; :func:`combine_partials` merges the states
of several chunks; ``phase="finish"`` runs what follows the reductions.
"""

from __future__ import annotations

import functools
import math
import operator
from collections.abc import Callable, Mapping, MutableMapping, Sequence
from typing import Any, Literal, Protocol

import sympy
import torch

from . import index as _index
from .kernel_ir import Instr, LoopKernel, Ref
from .ops import POINTWISE, torch_dtype

__all__ = ["Box", "Tile", "TileMemory", "FlatMemory", "KernelFault", "compute_dtype", "concrete", "full_box",
           "evaluate", "compile_evaluation", "inclusive_scan", "scan_combine", "data_index_symbols", "tile_constant_positions", "reduction_phases", "partial_dtypes", "merge_partials", "combine_partials", "run_loop_kernel", "run_kernel",
           "run_extern", "buffer_view", "check_bounds", "strided_view"]

#: A tile: (start, stop) per dimension.
Box = tuple[tuple[int, int], ...]

_LOW_PRECISION = (torch.float16, torch.bfloat16)


class KernelFault(RuntimeError):
    """A kernel did something the hardware would fault on (out-of-bounds index...)."""


def compute_dtype(dt: torch.dtype) -> torch.dtype:
    """The dtype values of IR dtype ``dt`` are computed in (float32 for 16-bit floats)."""
    return torch.float32 if dt in _LOW_PRECISION else dt


def _cast(x: torch.Tensor, dt: torch.dtype) -> torch.Tensor:
    """``x`` as ``dt`` (itself when it already is: no op dispatched)."""
    return x if x.dtype == dt else x.to(dt)


def _round(x: torch.Tensor, dt: torch.dtype) -> torch.Tensor:
    """A value of IR dtype ``dt``, held in its compute dtype: 16-bit floats are
    computed in float32 and rounded only where the kernel stores them or casts
    explicitly (Inductor's semantics, which its CPU backend shares)."""
    cd = compute_dtype(dt)
    return x if x.dtype == cd else x.to(cd)


def concrete(expr: Any, sizes: Mapping[sympy.Symbol, int]) -> int:
    """An integer from a size expression, substituting run-time size symbols."""
    if isinstance(expr, int):
        return expr
    e = _index.as_expr(expr)
    if e.free_symbols:
        e = e.xreplace({s: sympy.Integer(sizes[s]) for s in e.free_symbols})
    return int(e)


def full_box(kernel: LoopKernel, sizes: Mapping[sympy.Symbol, int] | None = None) -> Box:
    """The box covering a kernel's whole iteration space."""
    return tuple((0, concrete(r, sizes or {})) for r in kernel.ranges)


# ------------------------------------------------------------------ tiles

class _LazyIndexEnv(dict):  # type: ignore[type-arg]
    """Index-variable tensors, built on first use (affine accesses never need them)."""

    def __init__(self, tile: Tile, collapse_reduction: bool = False) -> None:
        super().__init__()
        self._tile = tile
        self._collapse = collapse_reduction

    def __missing__(self, var: sympy.Symbol) -> Any:
        t = self._tile
        if var not in t.vars:
            raise KeyError(var)
        k = t.vars.index(var)
        nd = len(t.ext)
        if self._collapse and k >= t.nbox:
            value = torch.zeros([1] * (t.lead + nd), dtype=torch.int64) + (
                t.batch_starts[:, k].view(-1, *[1] * nd) if t.batch_starts is not None else t.starts[k])
            self[var] = value
            return value
        view = [1] * nd
        view[k] = t.ext[k]
        ar = torch.arange(t.ext[k], dtype=torch.int64).view(view)
        if t.batch_starts is not None:
            value = t.batch_starts[:, k].view(-1, *[1] * nd) + ar.unsqueeze(0)
        else:
            value = ar + t.starts[k]
        self[var] = value
        return value


class Tile:
    """Where one evaluation of a loop kernel runs: a box of its iteration space
    and a box of its reduction space (default: the whole reduction extent).

    ``batch_starts`` (an int64 tensor ``(B, ndims)``), when given, stacks ``B``
    tiles of the same extents starting at those points: every value then has a
    leading dimension of ``B``. :attr:`shape` is ``[B?] + box extents +
    reduction extents``; index variables broadcast over it.
    """

    def __init__(self, kernel: LoopKernel, box: Box, sizes: Mapping[sympy.Symbol, int] | None = None,
                 red: Box | None = None, batch_starts: torch.Tensor | None = None) -> None:
        ivars, rvars = kernel.index_vars()
        sizes = dict(sizes or {})
        self.kernel = kernel
        self.sizes = sizes
        self.red_full = [concrete(r, sizes) for r in kernel.reduction_ranges]
        red = red if red is not None else tuple((0, n) for n in self.red_full)
        self.box, self.red = tuple(box), tuple(red)
        self.nbox = len(box)
        self.ext = [hi - lo for lo, hi in box] + [hi - lo for lo, hi in red]
        self.vars = list(ivars) + list(rvars)
        self.starts = [lo for lo, _ in box] + [lo for lo, _ in red]
        self.batch_starts = batch_starts
        self.lead = 1 if batch_starts is not None else 0
        self.shape = ([int(batch_starts.shape[0])] if batch_starts is not None else []) + self.ext
        self.env: dict[sympy.Symbol, Any] = _LazyIndexEnv(self)
        self.env.update(sizes)
        self.keep_env: dict[sympy.Symbol, Any] = _LazyIndexEnv(self, collapse_reduction=True)
        self.keep_env.update(sizes)

    @property
    def numel(self) -> int:
        """Points in the (unbatched) tile."""
        return math.prod(self.ext)

    def keep_shape(self) -> list[int]:
        """The shape of reduced values: reduction dims collapsed to 1."""
        return self.shape[:self.lead + self.nbox] + [1] * len(self.red)

    def affine(self, expr: sympy.Expr) -> tuple[Any, list[int]] | None:
        """``(offset at the tile's first point, [coeff per dim])`` when ``expr`` is
        affine in the tile's variables (offset is a (B,) tensor for batched tiles)."""
        aff = _affine(_bind(expr, self.sizes), tuple(self.vars))
        if aff is None:
            return None
        off, coeffs = aff
        if self.batch_starts is not None:
            return off + (self.batch_starts * torch.tensor(coeffs, dtype=torch.int64)).sum(1), coeffs
        return off + sum(c * s for c, s in zip(coeffs, self.starts)), coeffs

    def indices(self, expr: sympy.Expr, keep: bool = False) -> torch.Tensor:
        """``expr`` evaluated at every point of the tile (int64, broadcastable to its shape)."""
        idx = _index.compile_index(expr)(self.keep_env if keep else self.env)
        if not isinstance(idx, torch.Tensor):
            idx = torch.tensor(idx, dtype=torch.int64)
        return idx

    def index_terms(self, expr: sympy.Expr, keep: bool = False) -> tuple[int, list[torch.Tensor]] | None:
        """``expr`` over the tile as a constant plus a sum of parts over disjoint
        sets of its variables: ``(constant, [each part's distinct values, sorted])``.

        The tile's index set is the sum of those sets (every combination), so
        its bounds and size follow from a few small tensors instead of one
        value per point. None when one part spans every variable that varies
        over the tile (nothing to gain) or the tile is batched (the batch
        couples every part)."""
        if self.batch_starts is not None:
            return None
        groups = _term_groups(_bind(expr, self.sizes), tuple(self.vars))
        if groups is None:
            return None
        const, parts = groups
        exts = self.keep_shape() if keep else self.shape
        varying = {k for k, e in enumerate(exts) if e > 1}
        if any(varying <= set(ks) for _, ks in parts):
            return None
        sets = []
        for part, ks in parts:
            if not ks:
                const += int(part)
                continue
            sets.append(_part_values(part, tuple((self.vars[k], self.starts[k], exts[k]) for k in ks)))
        return const, sets


@functools.lru_cache(maxsize=8192)
def _part_values(part: sympy.Expr, ranges: tuple[tuple[sympy.Symbol, int, int], ...]) -> torch.Tensor:
    """The distinct values, sorted, of ``part`` over ``ranges`` ((variable, start,
    extent) each): tiles of a grid share most of their ranges."""
    env: dict[sympy.Symbol, Any] = {}
    for k, (var, start, ext) in enumerate(ranges):
        view = [1] * len(ranges)
        view[k] = ext
        env[var] = torch.arange(start, start + ext, dtype=torch.int64).view(view)
    v = _index.compile_index(part)(env)
    values: torch.Tensor = v if isinstance(v, torch.Tensor) else torch.tensor([v], dtype=torch.int64)
    distinct: torch.Tensor = torch.unique(values)  # (typed Any: torch.unique is a dispatch wrapper)
    return distinct


@functools.lru_cache(maxsize=8192)
def _term_groups(expr: sympy.Expr, variables: tuple[sympy.Symbol, ...]
                 ) -> tuple[int, list[tuple[sympy.Expr, tuple[int, ...]]]] | None:
    """An index expression's constant and its terms summed per connected set of
    variables (terms sharing a variable join one part): ``(constant, [(part,
    variable positions)])``; None when a term has a symbol that is not a variable."""
    expr = _index.as_expr(expr)
    terms = expr.args if expr.is_Add else (expr,)
    pos = {v: k for k, v in enumerate(variables)}
    const = 0
    parts: list[tuple[list[sympy.Expr], set[int]]] = []
    for term in terms:
        if term.is_Integer:
            const += int(term)
            continue
        syms = _index.free_symbols(term)
        if not syms <= pos.keys():
            return None
        ks = {pos[s] for s in syms}
        joined = [p for p in parts if p[1] & ks]
        merged = ([term], ks)
        for p in joined:
            merged[0].extend(p[0])
            merged[1].update(p[1])
            parts.remove(p)
        parts.append(merged)
    return const, [(sympy.Add(*ts), tuple(sorted(ks))) for ts, ks in parts]


@functools.lru_cache(maxsize=8192)
def _affine(expr: sympy.Expr, variables: tuple[sympy.Symbol, ...]) -> tuple[int, list[int]] | None:
    return _index.affine(expr, variables)


@functools.lru_cache(maxsize=8192)
def _bind_cached(expr: sympy.Expr, items: tuple[tuple[sympy.Symbol, int], ...]) -> sympy.Expr:
    return expr.xreplace({s: sympy.Integer(v) for s, v in items})


def _bind(expr: sympy.Expr, sizes: Mapping[sympy.Symbol, int]) -> sympy.Expr:
    if not sizes or not isinstance(expr, sympy.Basic):
        return expr
    free = _index.free_symbols(expr)
    items = tuple(sorted(((s, v) for s, v in sizes.items() if s in free), key=lambda t: t[0].name))
    return _bind_cached(expr, items) if items else expr


def check_bounds(idx: torch.Tensor, n: int, what: str, mask: torch.Tensor | None) -> torch.Tensor:
    """``idx`` with masked-off lanes zeroed; raises :class:`KernelFault` when a live lane is outside [0, n)."""
    bad = (idx < 0) | (idx >= n)
    if mask is not None:
        bad = bad & mask.bool()
        idx = torch.where(mask.bool(), idx, torch.zeros((), dtype=idx.dtype))
    if bool(bad.any()):
        raise KernelFault(f"{what}: index out of bounds for {n} elements (e.g. {int(idx[bad].flatten()[0])})")
    return idx


class TileMemory(Protocol):
    """Where a tile's loads come from and its stores go."""

    def load(self, pos: int, name: str, index: sympy.Expr, tile: Tile, mask: torch.Tensor | None) -> torch.Tensor:
        """The values of ``name[index]`` over the tile (body instruction ``pos``),
        in the buffer's dtype, broadcastable to ``tile.shape``. Lanes where
        ``mask`` is false may index anywhere and must not fault."""

    def store(self, pos: int, name: str, index: sympy.Expr, value: torch.Tensor, tile: Tile, reduced: bool,
              mode: str | None) -> None:
        """Write ``value`` (compute dtype, shaped like the tile, or like
        ``tile.keep_shape()`` when ``reduced``) to ``name[index]``.
        ``mode`` is ``"atomic_add"`` for accumulating stores."""


class FlatMemory:
    """Loads and stores on flat 1-D host tensors keyed by buffer name: affine
    accesses are strided views (no index tensors), others are gathers."""

    def __init__(self, buffers: MutableMapping[str, torch.Tensor], written: frozenset[str] = frozenset()) -> None:
        self.buffers = buffers
        self.written = written  # buffers the kernel also stores: loads copy instead of aliasing

    def load(self, pos: int, name: str, index: sympy.Expr, tile: Tile, mask: torch.Tensor | None) -> torch.Tensor:
        flat = self.buffers[name]
        view = strided_view(flat, index, tile, tile.shape)
        if view is None:
            idx = check_bounds(tile.indices(index), flat.numel(), f"{tile.kernel.name}: load {name}", mask)
            return flat.take(idx)
        return view.clone() if name in self.written else view

    def store(self, pos: int, name: str, index: sympy.Expr, value: torch.Tensor, tile: Tile, reduced: bool,
              mode: str | None) -> None:
        flat = self.buffers[name]
        shape = tile.keep_shape() if reduced else list(tile.shape)
        v = _cast(torch.as_tensor(value), flat.dtype).expand(tuple(shape))
        view = None if mode == "atomic_add" else strided_view(flat, index, tile, shape)
        if view is not None:
            view.copy_(v)
            return
        idx = check_bounds(tile.indices(index, keep=reduced).expand(tuple(shape)), flat.numel(),
                           f"{tile.kernel.name}: store {name}", None)
        flat.index_put_((idx.reshape(-1),), v.reshape(-1), accumulate=(mode == "atomic_add"))


def strided_view(flat: torch.Tensor, expr: sympy.Expr, tile: Tile, shape: Sequence[int],
                 base: int = 0) -> torch.Tensor | None:
    """A strided view of ``flat`` reading ``flat[expr - base]`` over ``shape`` (the
    tile's shape, or its keep shape), if ``expr`` is affine with non-negative
    coefficients and stays in bounds; else None. Unbatched tiles only."""
    if tile.batch_starts is not None:
        return None
    aff = tile.affine(expr)
    if aff is None:
        return None
    start, coeffs = aff
    start -= base
    if any(c < 0 for c in coeffs):
        return None
    shape = list(shape)
    last = start + sum(c * (n - 1) for c, n in zip(coeffs, shape) if n > 0)
    if start < 0 or last >= flat.numel() or 0 in shape:
        return None
    strides = [c if n > 1 else 0 for c, n in zip(coeffs, shape)]
    return flat.as_strided(shape, strides, flat.storage_offset() + start)


# ------------------------------------------------------------------ reductions

def _flat(v: torch.Tensor, shape: Sequence[int], nkeep: int) -> torch.Tensor:
    v = v.expand(tuple(shape)) if list(v.shape) != list(shape) else v
    return v.reshape(*shape[:nkeep], -1)


def _keep(v: torch.Tensor, shape: Sequence[int], nkeep: int) -> torch.Tensor:
    return v.reshape(*shape[:nkeep], *([1] * (len(shape) - nkeep)))


def partial_dtypes(ins: Instr) -> tuple[torch.dtype, ...]:
    """The dtypes of a ``reduction`` instruction's partial state (what one chunk
    of a split reduction hands to the combine step)."""
    dt, src, kind = torch_dtype(ins.args[0]), torch_dtype(ins.args[1]), ins.args[2]
    if kind in ("welford_reduce", "welford_combine"):
        return (torch.float32,) * 3
    if kind == "online_softmax_reduce":
        return (torch.float32,) * 2
    if kind in ("argmax", "argmin"):
        return compute_dtype(src), torch.int64
    if kind == "any":
        return (torch.bool,)
    return (compute_dtype(dt),)


def _partial(kind: str, value: Any, nkeep: int, out_dtype: torch.dtype, tile_red: Sequence[tuple[int, int]],
             red_full: Sequence[int]) -> tuple[torch.Tensor, ...]:
    """The partial state of a reduction over one tile's reduction box (unrounded)."""
    if kind == "welford_combine":
        shape = list(torch.broadcast_shapes(*(v.shape for v in value)))  # type: ignore[no-untyped-call,unused-ignore]
        mean, m2, w = (_flat(v.float(), shape, nkeep) for v in value)
        wsum = w.sum(-1)
        safe = torch.where(wsum == 0, torch.ones_like(wsum), wsum)
        tot_mean = (w * mean).sum(-1) / safe
        tot_m2 = (m2 + w * (mean - tot_mean.unsqueeze(-1)) ** 2).sum(-1)
        return tuple(_keep(t, shape, nkeep) for t in (tot_mean, tot_m2, wsum))
    shape = list(value.shape)
    v = _flat(value, shape, nkeep)
    cd = compute_dtype(out_dtype)
    if kind == "sum":
        r = v.sum(-1, dtype=cd if cd.is_floating_point else None)
    elif kind == "prod":
        r = v.prod(-1)
    elif kind == "max":
        r = v.amax(-1) if v.dtype != torch.bool else v.any(-1)
    elif kind == "min":
        r = v.amin(-1) if v.dtype != torch.bool else v.all(-1)
    elif kind in ("argmax", "argmin"):
        local = v.argmax(-1) if kind == "argmax" else v.argmin(-1)
        val = v.gather(-1, local.unsqueeze(-1)).squeeze(-1)
        return _keep(val, shape, nkeep), _keep(_global_red_index(local, tile_red, red_full), shape, nkeep)
    elif kind == "any":
        r = v.bool().any(-1)
    elif kind == "xor_sum":
        r = v.clone()
        while r.shape[-1] > 1:
            if r.shape[-1] % 2:
                r = torch.cat([r, torch.zeros_like(r[..., :1])], -1)
            r = r[..., 0::2] ^ r[..., 1::2]
        r = r[..., 0]
    elif kind == "welford_reduce":
        x = v.float()
        mean = x.mean(-1)
        m2 = ((x - mean.unsqueeze(-1)) ** 2).sum(-1)
        w = torch.full_like(mean, x.shape[-1])
        return tuple(_keep(t, shape, nkeep) for t in (mean, m2, w))
    elif kind == "online_softmax_reduce":
        x = v.float()
        m = x.amax(-1)
        finite_m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
        s = torch.exp(x - finite_m.unsqueeze(-1)).sum(-1)
        return _keep(m, shape, nkeep), _keep(s, shape, nkeep)
    else:
        raise NotImplementedError(f"reduction type {kind!r}")
    return (_keep(r.to(cd) if r.dtype != cd and cd.is_floating_point else r, shape, nkeep),)


def _global_red_index(local: torch.Tensor, tile_red: Sequence[tuple[int, int]], red_full: Sequence[int]) -> torch.Tensor:
    """Flat indices within a reduction box -> flat indices in the whole reduction space."""
    ext = [hi - lo for lo, hi in tile_red]
    if list(ext) == list(red_full):
        return local
    out = torch.zeros_like(local)
    rem = local
    for k in range(len(ext) - 1, -1, -1):
        coord = rem % ext[k] + tile_red[k][0]
        rem = rem // ext[k]
        out = out + coord * math.prod(red_full[k + 1:])
    return out


def merge_partials(kind: str, states: Sequence[tuple[torch.Tensor, ...]]) -> tuple[torch.Tensor, ...]:
    """The partial state of several chunks together (in chunk order): a state
    of the same form, which can be merged again or finished."""
    if len(states) == 1:
        return tuple(states[0])
    if kind in ("sum", "xor_sum", "prod", "max", "min", "any"):
        combine: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] = {
            "sum": lambda a, b: a + b, "xor_sum": lambda a, b: a ^ b, "prod": lambda a, b: a * b,
            "max": torch.maximum, "min": torch.minimum, "any": torch.logical_or}[kind]
        out = states[0][0]
        for p in states[1:]:
            out = combine(out, p[0])
        return (out,)
    if kind in ("argmax", "argmin"):
        vals = torch.stack([s[0] for s in states])
        idx = torch.stack([s[1] for s in states])
        if vals.is_floating_point():
            nan = torch.isnan(vals)
            key = torch.where(nan, torch.full_like(vals, float("inf") if kind == "argmax" else float("-inf")), vals)
        else:
            nan = torch.zeros_like(vals, dtype=torch.bool)
            key = vals
        best = key.argmax(0) if kind == "argmax" else key.argmin(0)
        best = torch.where(nan.any(0), nan.int().argmax(0), best).unsqueeze(0)
        return vals.gather(0, best)[0], idx.gather(0, best)[0]
    if kind in ("welford_reduce", "welford_combine"):
        mean, m2, w = (torch.cat(ts, -1) for ts in zip(*states))
        wsum = w.sum(-1, keepdim=True)
        safe = torch.where(wsum == 0, torch.ones_like(wsum), wsum)
        tot_mean = (w * mean).sum(-1, keepdim=True) / safe
        tot_m2 = (m2 + w * (mean - tot_mean) ** 2).sum(-1, keepdim=True)
        return tot_mean, tot_m2, wsum
    if kind == "online_softmax_reduce":
        ms = torch.cat([s[0] for s in states], -1)
        ss = torch.cat([s[1] for s in states], -1)
        m = ms.amax(-1, keepdim=True)
        fm = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
        return m, (ss * torch.exp(ms - fm)).sum(-1, keepdim=True)
    raise NotImplementedError(f"split reduction {kind!r}")


def combine_partials(kind: str, states: Sequence[tuple[torch.Tensor, ...]], out_dtype: torch.dtype,
                     round_result: bool = True) -> Any:
    """The final value of a reduction from the partial states of its chunks (in
    chunk order): a tensor, or a tuple for welford / online-softmax reductions."""
    state = merge_partials(kind, states)
    if kind in ("argmax", "argmin"):
        return state[1]
    if kind in ("welford_reduce", "welford_combine", "online_softmax_reduce"):
        return state
    out = state[0]
    if out.dtype == torch.bool or not round_result:
        return out
    return _round(out, out_dtype)


def _final(kind: str, state: tuple[torch.Tensor, ...], out_dtype: torch.dtype) -> Any:
    """The value of an unsplit reduction from its one partial state."""
    if kind in ("argmax", "argmin"):
        return state[1]
    if kind in ("welford_reduce", "welford_combine", "online_softmax_reduce"):
        return state
    if state[0].dtype == torch.bool:
        return state[0]
    return _round(state[0], out_dtype)


@functools.lru_cache(maxsize=1024)
def reduction_phases(body: tuple[Instr, ...]) -> int | None:
    """Where a reduction body splits into a partial phase and a finishing phase:
    the position after its last ``reduction``, when nothing before it uses a
    reduction's result and only ``getitem``/``to_dtype``/``store_reduction``
    follow (None otherwise: the kernel cannot be split over cores)."""
    last = max((k for k, i in enumerate(body) if i.op == "reduction"), default=None)
    if last is None:
        return None
    reductions = {k for k, i in enumerate(body) if i.op == "reduction"}
    for k, ins in enumerate(body[:last + 1]):
        if k not in reductions and any(isinstance(a, Ref) and a.id in reductions for a in _refs(ins)):
            return None
    for ins in body[last + 1:]:
        if ins.op not in ("getitem", "to_dtype", "store_reduction", "constant"):
            return None
    return last + 1


def _refs(ins: Instr) -> list[Any]:
    out: list[Any] = []
    for a in ins.args:
        if isinstance(a, tuple):
            out.extend(a)
        else:
            out.append(a)
    if ins.mask is not None:
        out.append(ins.mask)
    return out


# ------------------------------------------------------------------ evaluation

Phase = Literal["all", "partial", "finish"]

#: Instructions whose value is a pure function of their operands (and the tile).
_PURE = frozenset({"constant", "index_expr", "to_dtype", "to_dtype_bitcast", "where", "masked", "getitem", "frexp"})


@functools.lru_cache(maxsize=1024)
def data_index_symbols(body: tuple[Instr, ...]) -> frozenset[sympy.Symbol]:
    """The index symbols a body binds from loaded data (its ``indirect``
    instructions): an index expression over one of them changes with the data."""
    return frozenset(_index.index_symbol(i.args[4]) for i in body if i.op == "indirect")


@functools.lru_cache(maxsize=1024)
def tile_constant_positions(body: tuple[Instr, ...]) -> frozenset[int]:
    """Body positions whose value depends only on the tile, never on loaded data:
    constants, index expressions over the tile's own variables (not over an
    ``indirect`` index, which comes from data), and pure ops of those. Masks
    of boundary handling are typically all of this kind."""
    data_symbols = data_index_symbols(body)
    out: set[int] = set()
    for pos, ins in enumerate(body):
        if ins.mask is not None and not (isinstance(ins.mask, Ref) and ins.mask.id in out):
            continue
        if ins.op == "constant":
            out.add(pos)
        elif ins.op == "index_expr":
            if not (_index.free_symbols(_index.as_expr(ins.args[0])) & data_symbols):
                out.add(pos)
        elif ins.op in _PURE or ins.op in POINTWISE:
            if all(a.id in out for a in _refs(ins) if isinstance(a, Ref)):
                out.add(pos)
    return frozenset(out)


def evaluate(kernel: LoopKernel, memory: TileMemory, tile: Tile, phase: Phase = "all",
             reduced: Mapping[int, Any] | None = None, reduction_splits: int = 1,
             only: frozenset[int] | None = None, memo: dict[int, Any] | None = None) -> dict[int, Any]:
    """Evaluate ``kernel``'s body over ``tile``, loading and storing through ``memory``.

    ``phase="partial"`` runs up to the reductions and returns each reduction's
    partial state by body position; ``phase="finish"`` runs the rest with
    ``reduced`` giving each reduction's final value (see :func:`combine_partials`).
    ``reduction_splits`` > 1 reduces that many chunks of the tile's reduction
    extent separately and combines them (the numerics of a split reduction).
    ``only`` restricts evaluation to those body positions (an address generator
    evaluating just what an irregular access's index depends on).
    ``memo`` keeps the values of :func:`tile_constant_positions` between
    evaluations of the same tile (an emulator running one step every launch):
    they are computed on the first and reused after; pass a dict per tile."""
    return compile_evaluation(kernel, memory, tile, phase, reduced, reduction_splits, only, memo)()


#: One body position of a compiled evaluation: computes its value from the
#: values so far, the memory and the tile (and adds a reduction's partial state
#: to the partials).
_Step = Callable[[list[Any], dict[int, Any], TileMemory, Tile], Any]


def compile_evaluation(kernel: LoopKernel, memory: TileMemory, tile: Tile, phase: Phase = "all",
                       reduced: Mapping[int, Any] | None = None, reduction_splits: int = 1,
                       only: frozenset[int] | None = None,
                       memo: dict[int, Any] | None = None) -> Callable[[], dict[int, Any]]:
    """:func:`evaluate`'s work over this tile and memory as a flat list of steps,
    run (and re-run: a step an emulator replays every launch) by calling the
    result. Each call loads, computes and stores anew and returns the partials;
    with ``memo`` the tile-constant values are computed once and kept there.
    The body's dispatch and dtypes are resolved once per kernel (the step list
    is shared by every tile and memory)."""
    steps = _compiled_steps(kernel, phase, reduction_splits, only)
    n = len(kernel.body)
    given = dict(reduced or {}) if phase == "finish" else {}
    if tile.numel == 0 and not kernel.reduction_ranges and phase == "all":
        return dict
    constant = tile_constant_positions(kernel.body) if memo is not None else frozenset()

    def run() -> dict[int, Any]:
        vals: list[Any] = [None] * n
        for k, v in given.items():
            vals[k] = v
        partials: dict[int, Any] = {}
        for pos, step in steps:
            if pos in constant:
                if pos not in memo:  # type: ignore[operator]
                    memo[pos] = step(vals, partials, memory, tile)  # type: ignore[index]
                vals[pos] = memo[pos]  # type: ignore[index]
            else:
                vals[pos] = step(vals, partials, memory, tile)
        return partials
    return run


@functools.lru_cache(maxsize=1024)
def _compiled_steps(kernel: LoopKernel, phase: Phase, reduction_splits: int,
                    only: frozenset[int] | None) -> tuple[tuple[int, _Step], ...]:
    """The body positions ``phase`` (and ``only``) evaluates, each as a step."""
    body = kernel.body
    split_at = reduction_phases(body) if phase != "all" else None
    if phase != "all" and split_at is None:
        raise ValueError(f"{kernel.name}: its body cannot run in phases")
    start = split_at if phase == "finish" and split_at is not None else 0
    stop = split_at if phase == "partial" and split_at is not None else len(body)
    post = phase == "finish"  # after a reduction, values carry size-1 reduction dims
    steps: list[tuple[int, _Step]] = []
    for pos in range(start, stop):
        if only is not None and pos not in only:
            continue
        steps.append((pos, _compile_step(kernel, pos, phase, reduction_splits, post)))
        if body[pos].op == "reduction":
            post = True
    return tuple(steps)


def _arg(a: Any) -> Callable[[list[Any]], Any]:
    """An instruction argument's value: a body value by reference, else the literal."""
    if isinstance(a, Ref):
        return operator.itemgetter(a.id)
    return lambda vals: a


def _compile_step(kernel: LoopKernel, pos: int, phase: Phase, reduction_splits: int, post: bool) -> _Step:
    """Body position ``pos`` as a step (see :func:`compile_evaluation`)."""
    ins = kernel.body[pos]
    op, args = ins.op, ins.args
    mask_of = _arg(ins.mask) if ins.mask is not None else (lambda vals: None)
    if op == "load":
        name, index = args[0], args[1]

        def load(vals: list[Any], partials: dict[int, Any], memory: TileMemory, tile: Tile) -> Any:
            v = memory.load(pos, name, index, tile, mask_of(vals))
            cd = compute_dtype(v.dtype)
            return v.to(cd) if v.dtype != cd else v
        return load
    if op in ("store", "store_reduction"):
        name, index, value_of = args[0], args[1], _arg(args[2])
        mode = args[3] if len(args) > 3 else None
        reduced_store = op == "store_reduction"

        def store(vals: list[Any], partials: dict[int, Any], memory: TileMemory, tile: Tile) -> None:
            value = value_of(vals)  # None only when ``only`` skipped it (an address generator)
            memory.store(pos, name, index, torch.as_tensor(value) if value is not None else torch.zeros(()),
                         tile, reduced_store, mode)
        return store
    if op == "constant":
        value, dt = args
        cdt = compute_dtype(torch_dtype(dt))
        return lambda vals, partials, memory, tile: torch.tensor(value, dtype=cdt)
    if op == "index_expr":
        fn, cdt = _index.compile_index(args[0]), compute_dtype(torch_dtype(args[1]))
        return lambda vals, partials, memory, tile: _cast(torch.as_tensor(fn(tile.keep_env if post else tile.env)), cdt)
    if op == "to_dtype":
        x_of, dt = _arg(args[0]), torch_dtype(args[1])
        cdt = compute_dtype(dt)
        # an explicit cast rounds
        return lambda vals, partials, memory, tile: _cast(_cast(torch.as_tensor(x_of(vals)), dt), cdt)
    if op == "to_dtype_bitcast":
        x_of, dt, src = _arg(args[0]), torch_dtype(args[1]), torch_dtype(args[2])
        cdt = compute_dtype(dt)
        return lambda vals, partials, memory, tile: torch.as_tensor(x_of(vals)).to(src).contiguous().view(dt).to(cdt)
    if op == "where":
        c_of, a_of, b_of = (_arg(x) for x in args)

        def where(vals: list[Any], partials: dict[int, Any], memory: TileMemory, tile: Tile) -> Any:
            c, a, b = torch.as_tensor(c_of(vals)), torch.as_tensor(a_of(vals)), torch.as_tensor(b_of(vals))
            out = torch.where(c.bool(), a, b)
            return out.to(torch.promote_types(a.dtype, b.dtype)) if a.dtype != b.dtype else out
        return where
    if op == "masked":
        m_of, body_of, o_of = (_arg(x) for x in args)

        def masked(vals: list[Any], partials: dict[int, Any], memory: TileMemory, tile: Tile) -> Any:
            m, body_v, other = torch.as_tensor(m_of(vals)), torch.as_tensor(body_of(vals)), torch.as_tensor(o_of(vals))
            return torch.where(m.bool(), body_v, other.to(body_v.dtype))
        return masked
    if op == "indirect":
        x_of, size_expr, check, wrap_neg, sym = _arg(args[0]), args[1], args[2], args[3], args[4]
        symbol = _index.index_symbol(sym)

        def indirect(vals: list[Any], partials: dict[int, Any], memory: TileMemory, tile: Tile) -> Any:
            n = concrete(size_expr, tile.sizes)
            idx = torch.as_tensor(x_of(vals)).to(torch.int64)
            if wrap_neg:
                idx = torch.where(idx < 0, idx + n, idx)
            idx = check_bounds(idx, n, f"{kernel.name}: indirect index", mask_of(vals)) if check \
                else idx.clamp(0, max(n - 1, 0))
            tile.env[symbol] = idx
            tile.keep_env[symbol] = idx
            return idx
        return indirect
    if op == "reduction":
        dt, kind, v_arg = torch_dtype(args[0]), args[2], args[3]
        v_of: Any = tuple(_arg(x) for x in v_arg) if isinstance(v_arg, tuple) else _arg(v_arg)

        def reduction(vals: list[Any], partials: dict[int, Any], memory: TileMemory, tile: Tile) -> Any:
            if isinstance(v_of, tuple):
                v: Any = tuple(torch.as_tensor(f(vals)) for f in v_of)
            else:
                v = torch.as_tensor(v_of(vals))
                v = v.expand(tuple(tile.shape)) if list(v.shape) != tile.shape else v
            nkeep = tile.lead + tile.nbox
            if phase == "partial":
                partials[pos] = _partial(kind, v, nkeep, dt, tile.red, tile.red_full)
                return None
            if reduction_splits > 1:
                return _split(kind, v, nkeep, dt, tile, reduction_splits)
            return _final(kind, _partial(kind, v, nkeep, dt, tile.red, tile.red_full), dt)
        return reduction
    if op == "scan":
        dts = tuple(compute_dtype(torch_dtype(d)) for d in args[0])
        values_of = tuple(_arg(v) for v in args[1])
        combine = args[2]

        def scan(vals: list[Any], partials: dict[int, Any], memory: TileMemory, tile: Tile) -> Any:
            if len(tile.red) != 1:
                raise NotImplementedError(f"{kernel.name}: a scan over {len(tile.red)} dimensions")
            shape = tuple(tile.shape)
            xs = tuple(_cast(torch.as_tensor(f(vals)), dt).expand(shape) for f, dt in zip(values_of, dts))
            return inclusive_scan(combine, xs)
        return scan
    if op == "frexp":
        x_of = _arg(args[0])
        return lambda vals, partials, memory, tile: torch.frexp(torch.as_tensor(x_of(vals)))
    if op == "getitem":
        x_of, item = _arg(args[0]), args[1]
        return lambda vals, partials, memory, tile: x_of(vals)[item]
    if op == "check_bounds":
        expr, size_expr = args[0], args[1]

        def bounds(vals: list[Any], partials: dict[int, Any], memory: TileMemory, tile: Tile) -> None:
            check_bounds(tile.indices(expr), concrete(size_expr, tile.sizes), f"{kernel.name}: check_bounds",
                         mask_of(vals))
        return bounds
    if op == "device_assert":
        cond_of, message = _arg(args[0]), args[1]

        def device_assert(vals: list[Any], partials: dict[int, Any], memory: TileMemory, tile: Tile) -> None:
            if not bool(torch.as_tensor(cond_of(vals)).all()):
                raise KernelFault(f"{kernel.name}: device assert failed: {message}")
        return device_assert
    spec = POINTWISE.get(op)
    if spec is None:
        raise NotImplementedError(f"{kernel.name}: op {op!r} is not in the stable op set")
    fn, of = spec.fn, [_arg(x) for x in args]
    rdt = torch_dtype(ins.dtype) if ins.dtype is not None else None
    if len(of) == 2 and rdt is not None:  # the common binary op, without the generic loop
        a_of, b_of = of
        return lambda vals, partials, memory, tile: _round(fn(torch.as_tensor(a_of(vals)), torch.as_tensor(b_of(vals))), rdt)
    if rdt is None:
        return lambda vals, partials, memory, tile: fn(*[torch.as_tensor(f(vals)) for f in of])
    return lambda vals, partials, memory, tile: _round(fn(*[torch.as_tensor(f(vals)) for f in of]), rdt)


# ------------------------------------------------------------------ scans

@functools.lru_cache(maxsize=256)
def _combine_steps(combine: tuple[Instr, ...]) -> tuple[int, tuple[tuple[int, _Step | None], ...], tuple[int, ...]]:
    """(components, a step per combine instruction - None for its arguments -,
    the result's positions)."""
    n = sum(1 for c in combine if c.op == "scan_arg") // 2
    lk = LoopKernel("scan_combine", (), (), combine)
    steps = tuple((k, None if c.op == "scan_arg" else _compile_step(lk, k, "all", 1, False))
                  for k, c in enumerate(combine[:-1]))
    return n, steps, tuple(r.id for r in combine[-1].args)


def scan_combine(combine: tuple[Instr, ...], a: Sequence[torch.Tensor],
                 b: Sequence[torch.Tensor]) -> tuple[torch.Tensor, ...]:
    """A ``scan``'s combine body applied pointwise: ``a`` the earlier states,
    ``b`` the later ones (one tensor per component, in compute dtype)."""
    n, steps, result = _combine_steps(combine)
    vals: list[Any] = [None] * len(combine)
    for k, step in steps:
        vals[k] = (a[k] if k < n else b[k - n]) if step is None else step(vals, {}, None, None)  # type: ignore[arg-type]
    shape = torch.broadcast_shapes(*(x.shape for x in (*a, *b)))  # type: ignore[no-untyped-call,unused-ignore]
    return tuple(torch.as_tensor(vals[r]).expand(shape) for r in result)


def _is_integer_add(combine: tuple[Instr, ...]) -> bool:
    """``a + b`` of one integer component (a cumsum of ints or bools)."""
    return (len(combine) == 4 and combine[2].op == "add" and combine[2].args == (Ref(0), Ref(1))
            and combine[3].args == (Ref(2),) and combine[2].dtype is not None
            and not torch_dtype(combine[2].dtype).is_floating_point)


def inclusive_scan(combine: tuple[Instr, ...], values: Sequence[torch.Tensor]) -> tuple[torch.Tensor, ...]:
    """The inclusive scan of ``values`` (one tensor per component) along their
    last dimension with the combine body: ``log2(n)`` steps, each combining
    every element with the one ``2^k`` before it (the order a vector unit
    scans in, in the compute dtype). Integer sums are exact in any order."""
    if _is_integer_add(combine):
        return (torch.cumsum(values[0], -1, dtype=values[0].dtype),)
    out = list(values)
    n = out[0].shape[-1] if out else 0
    d = 1
    while d < n:
        new = scan_combine(combine, [x[..., :-d] for x in out], [x[..., d:] for x in out])
        out = [torch.cat([x[..., :d], c.to(x.dtype)], -1) for x, c in zip(out, new)]
        d *= 2
    return tuple(out)


def _split(kind: str, value: Any, nkeep: int, out_dtype: torch.dtype, tile: Tile, splits: int) -> Any:
    """A reduction computed in ``splits`` contiguous chunks of the flattened
    reduction extent, combined afterwards (what a device splitting it over cores
    computes). Chunk boundaries fall on multiples of 128 elements."""
    if kind == "welford_combine":
        return _final(kind, _partial(kind, value, nkeep, out_dtype, tile.red, tile.red_full), out_dtype)
    shape = list(value.shape)
    flat = value.reshape(*shape[:nkeep], -1)
    n = flat.shape[-1]
    bounds = [0] + [min(n, (n * k // splits) // 128 * 128) for k in range(1, splits)] + [n]
    states = []
    for a, b in zip(bounds, bounds[1:]):
        if b <= a:
            continue
        chunk = flat[..., a:b]
        st = _partial(kind, chunk, nkeep, out_dtype, ((0, b - a),), [b - a])
        if kind in ("argmax", "argmin"):
            st = (st[0], st[1] + a)
        states.append(st)
    out = combine_partials(kind, states, out_dtype)
    return tuple(t.reshape(*shape[:nkeep], *[1] * (len(shape) - nkeep)) for t in out) if isinstance(out, tuple) \
        else out.reshape(*shape[:nkeep], *[1] * (len(shape) - nkeep))


def run_loop_kernel(
    kernel: LoopKernel,
    buffers: MutableMapping[str, torch.Tensor],
    box: Box | None = None,
    sizes: Mapping[sympy.Symbol, int] | None = None,
    reduction_splits: int = 1,
) -> None:
    """Evaluate ``kernel`` over ``box`` (default: everything), reading and writing
    the flat 1-D tensors in ``buffers`` (keyed by buffer name). Reductions are
    computed in ``reduction_splits`` chunks combined afterwards."""
    sizes = dict(sizes or {})
    box = box if box is not None else full_box(kernel, sizes)
    tile = Tile(kernel, box, sizes)
    evaluate(kernel, FlatMemory(buffers, frozenset(kernel.writes())), tile, reduction_splits=reduction_splits)


# ------------------------------------------------------------------ whole kernels

def buffer_view(flat: torch.Tensor, spec: Any, sizes: Mapping[sympy.Symbol, int]) -> torch.Tensor:
    """The logical tensor of ``spec`` (size, stride, offset) over a flat buffer."""
    size = [concrete(s, sizes) for s in spec.size]
    stride = [concrete(s, sizes) for s in spec.stride]
    return flat.as_strided(size, stride, flat.storage_offset() + concrete(spec.offset, sizes))


#: Functional collectives whose reference semantics are torch.distributed's own
#: (``all_reduce_`` in place; the others write their output).
COLLECTIVE_OPS = frozenset({"all_reduce_", "all_gather_into_tensor", "reduce_scatter_tensor"})


def run_extern(kernel: Any, buffers: Mapping[str, torch.Tensor], sizes: Mapping[sympy.Symbol, int]) -> None:
    """Reference semantics of the matmul-family extern kernels (fp32 accumulation)
    and of the functional collectives (run by torch.distributed on the host
    views: every rank of the group must run it too)."""
    ins = [buffer_view(buffers[b.name], b, sizes) for b in kernel.inputs]
    if kernel.op in COLLECTIVE_OPS:
        functional = torch.ops._c10d_functional
        done = functional.wait_tensor(getattr(functional, kernel.op)(ins[0], *(v for _, v in kernel.attrs)))
        if not kernel.op.endswith("_"):
            buffer_view(buffers[kernel.output.name], kernel.output, sizes).copy_(done)
        return
    out = buffer_view(buffers[kernel.output.name], kernel.output, sizes)
    acc = torch.float64 if out.dtype == torch.float64 else torch.float32
    op = kernel.op
    if op in ("mm", "bmm"):
        res = torch.matmul(ins[0].to(acc), ins[1].to(acc))
    elif op in ("addmm", "baddbmm"):
        alpha, beta = kernel.attr("alpha", 1), kernel.attr("beta", 1)
        res = torch.matmul(ins[1].to(acc), ins[2].to(acc)) * alpha
        if beta != 0:
            res = res + beta * ins[0].to(acc)
    else:
        raise NotImplementedError(f"extern kernel {op!r}")
    out.copy_(res.to(out.dtype))


def run_kernel(kernel: Any, buffers: MutableMapping[str, torch.Tensor],
               sizes: Mapping[sympy.Symbol, int] | None = None, reduction_splits: int = 1) -> None:
    """Run a whole :class:`KernelGroup` or :class:`ExternKernel` on the host.

    ``buffers`` maps argument names to flat tensors; internal buffers of a
    group are allocated here.
    """
    sizes = dict(sizes or {})
    if hasattr(kernel, "kernels"):
        bufs = dict(buffers)
        for spec in kernel.buffers:
            if spec.role == "internal" and spec.name not in bufs:
                bufs[spec.name] = torch.empty(concrete(spec.storage_numel, sizes), dtype=torch_dtype(spec.dtype))
        for lk in kernel.kernels:
            for box in _chunk_boxes(full_box(lk, sizes), _numel(concrete(r, sizes) for r in lk.reduction_ranges)):
                run_loop_kernel(lk, bufs, box, sizes, reduction_splits)
    else:
        run_extern(kernel, buffers, sizes)


#: Points of the iteration space evaluated at once: every value of a kernel body
#: is a tensor of this many elements (bounds memory on GB-sized buffers).
_CHUNK_POINTS = 1 << 22


def _numel(extents: Any) -> int:
    n = 1
    for e in extents:
        n *= e
    return n


def _chunk_boxes(box: Box, reduction_numel: int = 1, limit: int | None = None) -> list[Box]:
    """``box`` split along its outer dimensions into boxes of at most ``limit``
    (default ``_CHUNK_POINTS``) points times the reduction extent, which is
    never split. Points are independent except through their own reduction, so
    running the pieces in order computes what the whole box computes."""
    limit = _CHUNK_POINTS if limit is None else limit
    extents = [hi - lo for lo, hi in box]
    if _numel(extents) * reduction_numel <= limit or not box:
        return [box]
    d = next((k for k, e in enumerate(extents) if e > 1), None)
    if d is None:
        return [box]
    inner = _numel(extents[d + 1:]) * reduction_numel
    step = max(1, limit // max(inner, 1))
    lo, hi = box[d]
    out: list[Box] = []
    for start in range(lo, hi, step):
        piece = (*box[:d], (start, min(start + step, hi)), *box[d + 1:])
        out += _chunk_boxes(piece, reduction_numel, limit) if step == 1 and inner > limit else [piece]
    return out
