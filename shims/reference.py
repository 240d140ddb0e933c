"""Executable semantics of the Kernel IR: a vectorised reference evaluator.

:func:`run_loop_kernel` evaluates one :class:`~spyre_shims.kernel_ir.LoopKernel`
over a *tile* (a box of its iteration space, full reduction extent) with one
torch op per instruction on the whole tile. Affine loads and stores become
strided views of the flat buffers (no index tensors); other indices are
evaluated once per tile and gathered. Vendor emulators call it per tile; the
reference backend calls it on the whole space.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, MutableMapping, Sequence
from typing import Any

import sympy
import torch

from . import index as _index
from .kernel_ir import Instr, LoopKernel, Ref
from .ops import POINTWISE, torch_dtype

__all__ = ["Box", "compute_dtype", "run_loop_kernel", "run_kernel", "run_extern", "buffer_view", "concrete", "full_box",
           "KernelFault"]

#: A tile: (start, stop) per iteration dimension.
Box = tuple[tuple[int, int], ...]

_LOW_PRECISION = (torch.float16, torch.bfloat16)


def _round(x: torch.Tensor, dt: torch.dtype) -> torch.Tensor:
    """A value of IR dtype ``dt``, held in its compute dtype: 16-bit floats are
    computed in float32 and rounded only where the kernel stores them or casts
    explicitly (Inductor's semantics, which its CPU backend shares)."""
    cd = compute_dtype(dt)
    return x if x.dtype == cd else x.to(cd)


class KernelFault(RuntimeError):
    """A kernel did something the hardware would fault on (out-of-bounds index...)."""


def compute_dtype(dt: torch.dtype) -> torch.dtype:
    """The dtype values of IR dtype ``dt`` are computed in (float32 for 16-bit floats)."""
    return torch.float32 if dt in _LOW_PRECISION else dt


def concrete(expr: Any, sizes: Mapping[sympy.Symbol, int]) -> int:
    """An integer from a size expression, substituting run-time size symbols."""
    if isinstance(expr, int):
        return expr
    e = sympy.sympify(expr)
    if e.free_symbols:
        e = e.xreplace({s: sympy.Integer(sizes[s]) for s in e.free_symbols})
    return int(e)


def full_box(kernel: LoopKernel, sizes: Mapping[sympy.Symbol, int] | None = None) -> Box:
    """The box covering a kernel's whole iteration space."""
    return tuple((0, concrete(r, sizes or {})) for r in kernel.ranges)


class _LazyIndexEnv(dict):  # type: ignore[type-arg]
    """Index-variable tensors, built on first use (affine accesses never need them)."""

    def __init__(self, tile: "_Tile") -> None:
        super().__init__()
        self._tile = tile

    def __missing__(self, var: sympy.Symbol) -> Any:
        t = self._tile
        k = t.vars.index(var)
        view = [1] * len(t.shape)
        view[k] = t.shape[k]
        value = torch.arange(t.starts[k], t.starts[k] + t.shape[k], dtype=torch.int64).view(view)
        self[var] = value
        return value


class _Tile:
    """Index variables of one tile, shaped to broadcast over box x reduction dims."""

    def __init__(self, kernel: LoopKernel, box: Box, sizes: Mapping[sympy.Symbol, int]) -> None:
        ivars, rvars = kernel.index_vars()
        self.red = [concrete(r, sizes) for r in kernel.reduction_ranges]
        self.box = box
        self.shape = [hi - lo for lo, hi in box] + self.red
        self.vars = list(ivars) + list(rvars)
        self.starts = [lo for lo, _ in box] + [0] * len(self.red)
        self.env: dict[sympy.Symbol, Any] = _LazyIndexEnv(self)
        self.env.update(sizes)

    @property
    def numel(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n


def _strided(flat: torch.Tensor, expr: sympy.Expr, tile: _Tile, keep: int | None = None) -> torch.Tensor | None:
    """A strided view of ``flat`` reading ``flat[expr]`` over the tile, if ``expr`` is
    affine with non-negative coefficients and stays in bounds; else None."""
    aff = _index.affine(expr, tile.vars)
    if aff is None:
        return None
    offset, coeffs = aff
    if any(c < 0 for c in coeffs):
        return None
    shape = list(tile.shape)
    if keep is not None:  # reduced values: reduction dims collapsed to 1
        shape = shape[:keep] + [1] * (len(shape) - keep)
    start = offset + sum(c * s for c, s in zip(coeffs, tile.starts))
    last = start + sum(c * (n - 1) for c, n in zip(coeffs, shape) if n > 0)
    if start < 0 or last >= flat.numel() or 0 in shape:
        return None
    strides = [c if n > 1 else 0 for c, n in zip(coeffs, shape)]
    return flat.as_strided(shape, strides, flat.storage_offset() + start)


def _gather_index(expr: sympy.Expr, tile: _Tile | _KeepTile) -> torch.Tensor:
    idx = _index.compile_index(expr)(tile.env)
    if not isinstance(idx, torch.Tensor):
        idx = torch.tensor(idx, dtype=torch.int64)
    return idx


def _check_bounds(idx: torch.Tensor, n: int, what: str, mask: torch.Tensor | None) -> torch.Tensor:
    bad = (idx < 0) | (idx >= n)
    if mask is not None:
        bad = bad & mask
        idx = torch.where(mask, idx, torch.zeros((), dtype=idx.dtype))
    if bool(bad.any()):
        raise KernelFault(f"{what}: index out of bounds for {n} elements (e.g. {int(idx[bad].flatten()[0])})")
    return idx


def _reduce(kind: str, value: Any, ndim_box: int, out_dtype: torch.dtype, splits: int = 1,
            round_result: bool = True) -> Any:
    """Reduce over the trailing (reduction) dims, keeping them as size 1.

    ``splits`` > 1 reduces ``splits`` contiguous chunks separately and combines
    the partials, as a device that spreads one reduction over cores does.
    """
    if splits > 1 and kind != "welford_combine":
        return _split_reduce(kind, value, ndim_box, out_dtype, splits)

    def flat(v: torch.Tensor, shape: Sequence[int]) -> torch.Tensor:
        v = v.expand(tuple(shape)) if list(v.shape) != list(shape) else v
        return v.reshape(*shape[:ndim_box], -1)

    def keep(v: torch.Tensor, shape: Sequence[int]) -> torch.Tensor:
        return v.reshape(*shape[:ndim_box], *([1] * (len(shape) - ndim_box)))

    if kind == "welford_combine":
        shape = torch.broadcast_shapes(*(v.shape for v in value))  # type: ignore[no-untyped-call,unused-ignore]
        mean, m2, w = (flat(v.float(), shape) for v in value)
        wsum = w.sum(-1)
        safe = torch.where(wsum == 0, torch.ones_like(wsum), wsum)
        tot_mean = (w * mean).sum(-1) / safe
        tot_m2 = (m2 + w * (mean - tot_mean.unsqueeze(-1)) ** 2).sum(-1)
        return tuple(keep(v, shape) for v in (tot_mean, tot_m2, wsum))
    shape = list(value.shape)
    v = flat(value, shape)
    cd = compute_dtype(out_dtype)
    if kind == "sum":
        r = v.sum(-1, dtype=cd if cd.is_floating_point else None)
    elif kind == "prod":
        r = v.prod(-1)
    elif kind == "max":
        r = v.amax(-1) if v.dtype != torch.bool else v.any(-1)
    elif kind == "min":
        r = v.amin(-1) if v.dtype != torch.bool else v.all(-1)
    elif kind == "argmax":
        r = v.argmax(-1)
    elif kind == "argmin":
        r = v.argmin(-1)
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
        return tuple(keep(t, shape) for t in (mean, m2, w))
    elif kind == "online_softmax_reduce":
        x = v.float()
        m = x.amax(-1)
        finite_m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
        s = torch.exp(x - finite_m.unsqueeze(-1)).sum(-1)
        return keep(m, shape), keep(s, shape)
    else:
        raise NotImplementedError(f"reduction type {kind!r}")
    return keep(_round(r, out_dtype) if round_result else r.to(cd), shape)


def _split_reduce(kind: str, value: torch.Tensor, ndim_box: int, out_dtype: torch.dtype, splits: int) -> Any:
    shape = list(value.shape)
    flat = value.reshape(*shape[:ndim_box], -1)
    chunks = [c for c in torch.tensor_split(flat, splits, dim=-1) if c.shape[-1] > 0]
    parts = [_reduce(kind, c, ndim_box, out_dtype, round_result=False) for c in chunks]
    keep = [1] * (len(shape) - ndim_box)

    def fix(t: torch.Tensor) -> torch.Tensor:
        return t.reshape(*shape[:ndim_box], *keep)

    if kind in ("sum", "xor_sum", "prod", "max", "min", "any"):
        combine: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] = {
            "sum": lambda a, b: a + b, "xor_sum": lambda a, b: a ^ b, "prod": lambda a, b: a * b,
            "max": torch.maximum, "min": torch.minimum, "any": torch.logical_or}[kind]
        out = parts[0]
        for p in parts[1:]:
            out = combine(out, p)
        return fix(_round(out, out_dtype))
    if kind in ("argmax", "argmin"):
        vals = torch.stack([_reduce("max" if kind == "argmax" else "min", c, ndim_box, c.dtype).reshape(-1)
                            for c in chunks])
        offs = torch.tensor([0] + [c.shape[-1] for c in chunks[:-1]]).cumsum(0)
        idx = torch.stack([p.reshape(-1) + o for p, o in zip(parts, offs)])
        nan = torch.isnan(vals) if vals.is_floating_point() else torch.zeros_like(vals, dtype=torch.bool)
        key = torch.where(nan, torch.full_like(vals, float("inf") if kind == "argmax" else float("-inf")), vals) \
            if vals.is_floating_point() else vals
        best = (key.argmax(0) if kind == "argmax" else key.argmin(0))
        has_nan = nan.any(0)
        best = torch.where(has_nan, nan.int().argmax(0), best)
        return fix(idx.gather(0, best[None])[0])
    if kind == "welford_reduce":
        return _reduce("welford_combine", tuple(torch.cat(ts, -1) for ts in zip(*parts)), ndim_box, out_dtype)
    if kind == "online_softmax_reduce":
        ms = torch.cat([p[0] for p in parts], -1)
        ss = torch.cat([p[1] for p in parts], -1)
        m = ms.amax(-1, keepdim=True)
        fm = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
        return fix(m), fix((ss * torch.exp(ms - fm)).sum(-1, keepdim=True))
    raise NotImplementedError(f"split reduction {kind!r}")


@functools.lru_cache(maxsize=1024)
def _bodies_have_atomic(body: tuple[Instr, ...]) -> bool:
    return any(i.op == "store" and len(i.args) > 3 and i.args[3] == "atomic_add" for i in body)


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
    tile = _Tile(kernel, box, sizes)
    if tile.numel == 0 and not kernel.reduction_ranges:
        return
    nbox = len(box)
    written = set(kernel.writes())
    vals: list[Any] = []
    reduced = False  # after a reduction, values carry size-1 reduction dims

    def val(a: Any) -> Any:
        return vals[a.id] if isinstance(a, Ref) else a

    for ins in kernel.body:
        op, args = ins.op, ins.args
        out: Any = None
        mask = val(ins.mask) if ins.mask is not None else None
        if op == "load":
            name, expr = args[0], args[1]
            flat = buffers[name]
            view = _strided(flat, expr, tile)
            if view is None:
                idx = _check_bounds(_gather_index(expr, tile), flat.numel(), f"{kernel.name}: load {name}", mask)
                view = flat.take(idx)
            cd = compute_dtype(flat.dtype)
            # Loaded data is used in place (a view) when no conversion is needed;
            # copied when this kernel also stores to the buffer (in-place update).
            out = view.to(cd) if view.dtype != cd else (view.clone() if name in written else view)
        elif op in ("store", "store_reduction"):
            name, expr, v = args[0], args[1], val(args[2])
            mode = args[3] if len(args) > 3 else None
            flat = buffers[name]
            keep = nbox if op == "store_reduction" else None
            shape = list(tile.shape) if keep is None else list(tile.shape[:nbox]) + [1] * len(tile.red)
            v = torch.as_tensor(v).to(flat.dtype).expand(tuple(shape))
            view = None if mode == "atomic_add" else _strided(flat, expr, tile, keep)
            if view is not None:
                view.copy_(v)
            else:
                ktile = tile if keep is None else _KeepTile(tile, nbox)
                idx = _check_bounds(_gather_index(expr, ktile).expand(tuple(shape)), flat.numel(),
                                    f"{kernel.name}: store {name}", None)
                flat.index_put_((idx.reshape(-1),), v.reshape(-1), accumulate=(mode == "atomic_add"))
        elif op == "constant":
            value, dt = args
            out = torch.tensor(value, dtype=compute_dtype(torch_dtype(dt)))
        elif op == "index_expr":
            expr, dt = args
            env_tile = tile if not reduced else _KeepTile(tile, nbox)
            r = _index.compile_index(expr)(env_tile.env)
            out = torch.as_tensor(r).to(compute_dtype(torch_dtype(dt)))
        elif op == "to_dtype":
            x, dt = val(args[0]), torch_dtype(args[1])
            out = torch.as_tensor(x).to(dt).to(compute_dtype(dt))  # an explicit cast rounds
        elif op == "to_dtype_bitcast":
            x, dt, src = val(args[0]), torch_dtype(args[1]), torch_dtype(args[2])
            out = torch.as_tensor(x).to(src).contiguous().view(dt).to(compute_dtype(dt))
        elif op == "where":
            c, a, b = (torch.as_tensor(val(x)) for x in args)
            out = torch.where(c.bool(), a, b)
            if a.dtype != b.dtype:
                out = out.to(torch.promote_types(a.dtype, b.dtype))
        elif op == "masked":
            m, body, other = (torch.as_tensor(val(x)) for x in args)
            out = torch.where(m.bool(), body, other.to(body.dtype))
        elif op == "indirect":
            x, size_expr, check, wrap_neg, sym = val(args[0]), args[1], args[2], args[3], args[4]
            n = concrete(size_expr, sizes)
            idx = torch.as_tensor(x).to(torch.int64)
            if wrap_neg:
                idx = torch.where(idx < 0, idx + n, idx)
            idx = _check_bounds(idx, n, f"{kernel.name}: indirect index", mask) if check else idx.clamp(0, max(n - 1, 0))
            tile.env[_index.index_symbol(sym)] = idx
            out = idx
        elif op == "reduction":
            dt, kind, v = args[0], args[2], args[3]
            v = tuple(torch.as_tensor(val(x)) for x in v) if isinstance(v, tuple) else torch.as_tensor(val(v))
            if not isinstance(v, tuple):
                v = v.expand(tuple(tile.shape)) if list(v.shape) != tile.shape else v
            out = _reduce(kind, v, nbox, torch_dtype(dt), reduction_splits)
            reduced = True
        elif op == "frexp":
            out = torch.frexp(torch.as_tensor(val(args[0])))
        elif op == "getitem":
            out = val(args[0])[args[1]]
        elif op == "check_bounds":
            expr, size_expr = args[0], args[1]
            _check_bounds(_gather_index(expr, tile), concrete(size_expr, sizes), f"{kernel.name}: check_bounds", mask)
        elif op == "device_assert":
            cond = torch.as_tensor(val(args[0]))
            if not bool(cond.all()):
                raise KernelFault(f"{kernel.name}: device assert failed: {args[1]}")
        else:
            spec = POINTWISE.get(op)
            if spec is None:
                raise NotImplementedError(f"{kernel.name}: op {op!r} is not in the stable op set")
            operands = [torch.as_tensor(val(x)) for x in args]
            out = spec.fn(*operands)
            if ins.dtype is not None:
                out = _round(out, torch_dtype(ins.dtype))
        vals.append(out)


class _KeepTile:
    """The tile seen by values after a reduction: reduction dims collapsed to 1."""

    def __init__(self, tile: _Tile, nbox: int) -> None:
        self.env = _LazyIndexEnv(tile)
        self.env.update({k: v for k, v in dict.items(tile.env)})
        for var in tile.vars[nbox:]:
            self.env[var] = torch.zeros([1] * len(tile.shape), dtype=torch.int64)
        self.vars = tile.vars
        self.starts = tile.starts
        self.shape = list(tile.shape[:nbox]) + [1] * (len(tile.shape) - nbox)


# ------------------------------------------------------------------ whole kernels

def buffer_view(flat: torch.Tensor, spec: Any, sizes: Mapping[sympy.Symbol, int]) -> torch.Tensor:
    """The logical tensor of ``spec`` (size, stride, offset) over a flat buffer."""
    size = [concrete(s, sizes) for s in spec.size]
    stride = [concrete(s, sizes) for s in spec.stride]
    return flat.as_strided(size, stride, flat.storage_offset() + concrete(spec.offset, sizes))


def run_extern(kernel: Any, buffers: Mapping[str, torch.Tensor], sizes: Mapping[sympy.Symbol, int]) -> None:
    """Reference semantics of the matmul-family extern kernels (fp32 accumulation)."""
    ins = [buffer_view(buffers[b.name], b, sizes) for b in kernel.inputs]
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
