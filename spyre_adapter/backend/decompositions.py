"""Decompositions the Spyre backend changes for its device.

Normalisation ops return saved statistics (mean, rstd/invstd) besides their
output. Inductor's decompositions follow CUDA's conventions for every device
but the CPU: float32 statistics, and statistics even when not training. Eager
ops on "spyre" run on the host and follow the CPU's: statistics in the input's
dtype, and empty ones in inference. Compiled and eager results must agree on
one device, so on "spyre" the decompositions follow the CPU's conventions.

``topk`` and ``sort`` (MoE routing, sparse-attention indexers) and
``convolution`` (Mamba's and linear attention's short conv1d) have no Inductor
lowering for the card; on "spyre" small-k topk decomposes into max reductions,
sort and larger-k topk into ranks from pairwise comparisons, and convolutions
into the taps of the padded input (a weighted sum, or a batched matmul), so
they run on the device.

``linalg_solve_triangular`` (the UT transform of gated delta-rule layers:
Qwen3-Next, Qwen3.5, OLMo-hybrid) has no lowering either; on "spyre" it
inverts the triangle by recursive doubling of its diagonal blocks (batched
matmuls) and multiplies, so it runs on the PE arrays.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import torch
import torch.nn.functional as F

from spyre_shims.lowering import register_decomposition

_aten = torch.ops.aten

#: Ops whose outputs after the first are saved statistics.
NORM_OPS = (
    _aten.native_layer_norm.default,
    _aten.native_batch_norm.default,
    _aten._native_batch_norm_legit.default,
    _aten._native_batch_norm_legit.no_stats,
    _aten._native_batch_norm_legit_no_training.default,
    _aten._batch_norm_with_update.default,
    _aten._batch_norm_with_update_functional.default,
    _aten._native_batch_norm_legit_functional.default,
    _aten.native_group_norm.default,
)


#: Ops with a ``training`` flag (positional index) whose CPU kernels return empty
#: saved statistics (outputs 1 and 2) when it is false.
TRAINING_ARG = {
    _aten.native_batch_norm.default: 5,
    _aten._native_batch_norm_legit.default: 5,
    _aten._native_batch_norm_legit_functional.default: 5,
}


def _cpu_conventions(op: Any) -> Any:
    def decompose(default: Any, input: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        out = default(input, *args, **kwargs)
        if not isinstance(out, tuple):
            return out
        if input.dtype in (torch.float16, torch.bfloat16):
            out = (out[0], *(o.to(input.dtype) if isinstance(o, torch.Tensor) and o.dtype == torch.float32 else o
                             for o in out[1:]))
        index = TRAINING_ARG.get(op)
        if op is _aten._native_batch_norm_legit_no_training.default or (
                index is not None and len(args) >= index and not args[index - 1]):
            out = (out[0], input.new_empty((0,)), input.new_empty((0,)), *out[3:])
        return out

    return decompose


#: Largest k decomposed into repeated max reductions (MoE routers pick 1-8
#: experts); larger k (and the smallest-k form) sort by rank instead.
TOPK_MAX_K = 8
#: Longest dimension sorted by rank (every pair of its entries compared: n^2
#: per row); longer ones keep sort and topk whole (a host fallback).
SORT_MAX_N = 4096
#: Ops decomposed so MoE routing (expert choice, grouped experts' sort) and the
#: sparse-attention indexers' large-k topk run on the device.
ROUTING_OPS = (_aten.topk.default, _aten.sort.default, _aten.sort.stable)
#: Ops decomposed so Mamba's and linear attention's short convolutions run on the device.
CONV_OPS = (_aten.convolution.default,)
#: Ops decomposed so gated delta-rule layers' triangular solves run on the device.
LINALG_OPS = (_aten.linalg_solve_triangular.default,)


def _ranks(x: torch.Tensor, descending: bool) -> torch.Tensor:
    """Each entry's place along the last dimension in a stable sort: how many
    entries come before it (pairwise comparisons and a sum: pointwise ops and a
    reduction). NaN sorts as the largest value, as in torch."""
    a, b = x.unsqueeze(-1), x.unsqueeze(-2)  # entry i, entry j
    if x.dtype.is_floating_point:
        a_nan, b_nan = torch.isnan(a), torch.isnan(b)
        before = ((b > a) | (b_nan & ~a_nan)) if descending else ((b < a) | (a_nan & ~b_nan))
        tie = (b == a) | (a_nan & b_nan)
    else:
        before = (b > a) if descending else (b < a)
        tie = b == a
    n = x.shape[-1]
    pos = torch.arange(n, device=x.device)
    earlier = pos.view(1, n) < pos.view(n, 1)  # [i, j]: j before i in index order
    return (before | (tie & earlier)).sum(-1)


def _by_rank(x: torch.Tensor, dim: int, descending: bool, count: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The first ``count`` entries of a stable sort of ``x`` along ``dim``: for
    each place, the entry whose rank it is (argmax of a one-hot, then a gather)."""
    xt = x.movedim(dim, -1)
    rank = _ranks(xt, descending)
    places = torch.arange(count, device=x.device).view(count, 1)
    indices = torch.argmax((rank.unsqueeze(-2) == places).to(torch.int8), -1)
    return torch.gather(xt, -1, indices).movedim(-1, dim), indices.movedim(-1, dim)


def _sortable(x: torch.Tensor, dim: int) -> bool:
    # A symbolic length (dynamic shapes: a sequence length) is compared too: the
    # comparison becomes a guard, so a longer sequence recompiles and falls back.
    return (x.dtype != torch.bool and not x.is_complex() and x.dim() > 0
            and 0 < x.shape[dim] <= SORT_MAX_N)


def _sort(default: Any, x: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
    """sort (stable or not) by rank, dimensions up to :data:`SORT_MAX_N` long;
    equal values keep their index order (what stable=True asks; any order is
    allowed without it)."""
    named = dict(kwargs)
    if "stable" in named or len(args) == 0 or isinstance(args[0], int):
        dim = named.get("dim", args[0] if args else -1)
        descending = named.get("descending", args[1] if len(args) > 1 else False)
    else:
        return default(x, *args, **kwargs)
    if x.dim() == 0 and x.dtype != torch.bool:  # a scalar is sorted: itself, at index 0
        return x.clone(), torch.zeros((), dtype=torch.int64, device=x.device)
    if not _sortable(x, dim % max(x.dim(), 1)):
        return default(x, *args, **kwargs)
    dim = dim % x.dim()
    return _by_rank(x, dim, bool(descending), x.shape[dim])


def _topk(default: Any, x: torch.Tensor, k: int, dim: int = -1, largest: bool = True, sorted: bool = True) -> Any:
    """topk as k rounds of (arg)max over the entries not taken yet: reductions
    and pointwise ops the card runs (Mixture-of-experts routing). NaN counts as
    the largest value, as in torch; equal values are taken in index order
    (torch's CPU kernel leaves the order of ties unspecified). A larger k, or
    the smallest-k form, takes the first k places of a sort by rank."""
    if x.dim() == 0:
        if k == 1 and x.dtype != torch.bool:  # a scalar's top 1: itself, at index 0
            return x.clone(), torch.zeros((), dtype=torch.int64, device=x.device)
        return default(x, k, dim, largest, sorted)
    if k > TOPK_MAX_K or not largest or not x.dtype.is_floating_point:
        if isinstance(k, (int, torch.SymInt)) and _sortable(x, dim % x.dim()):
            return _by_rank(x, dim % x.dim(), largest, k)
        return default(x, k, dim, largest, sorted)
    dim = dim % x.dim()
    key = x
    positions = torch.arange(x.shape[dim], device=x.device).view([-1 if d == dim else 1 for d in range(x.dim())])
    taken = torch.zeros_like(x, dtype=torch.bool)
    picks = []
    for _ in range(k):
        masked = torch.where(taken, float("-inf"), key)
        i = torch.argmax(masked, dim, keepdim=True)
        # Only -inf left among the free entries: argmax may land on a taken one.
        first_free = torch.argmax((~taken).to(torch.int8), dim, keepdim=True)
        i = torch.where(torch.gather(taken, dim, i), first_free, i)
        taken = taken | (positions == i)
        picks.append(i)
    indices = torch.cat(picks, dim)
    return torch.gather(x, dim, indices), indices


#: Most kernel taps (product of the kernel's sizes) a convolution is unrolled into.
CONV_MAX_TAPS = 64


def _convolution(default: Any, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, stride: Any,
                 padding: Any, dilation: Any, transposed: bool, output_padding: Any, groups: int) -> Any:
    """1-, 2- and 3-d convolutions as the card runs them: the input padded, one
    strided slice per kernel tap; a depthwise convolution (one input channel
    per group: the causal conv1d of Mamba and linear-attention layers) is the
    taps' weighted sum (pointwise), any other the taps stacked and multiplied
    with the weight per group (a batched matmul on the PE arrays)."""
    nd = x.dim() - 2
    taps = math.prod(weight.shape[2:]) if weight.dim() > 2 else 0
    if transposed or nd not in (1, 2, 3) or weight.dim() != nd + 2 or not 0 < taps <= CONV_MAX_TAPS \
            or not x.dtype.is_floating_point:
        return default(x, weight, bias, stride, padding, dilation, transposed, output_padding, groups)
    stride, padding, dilation = ([int(v) for v in (t if len(t) == nd else list(t) * nd)]
                                 for t in (stride, padding, dilation))
    if any(padding):
        x = F.pad(x, [p for p in reversed(padding) for _ in (0, 1)])
    kernel = list(weight.shape[2:])
    out_sizes = [(x.shape[2 + d] - dilation[d] * (kernel[d] - 1) - 1) // stride[d] + 1 for d in range(nd)]
    if any(n <= 0 for n in out_sizes):
        return default(x, weight, bias, stride, [0] * nd, dilation, transposed, output_padding, groups)

    def tap(offsets: tuple[int, ...]) -> torch.Tensor:
        index: list[Any] = [slice(None), slice(None)]
        for d, k in enumerate(offsets):
            start = k * dilation[d]
            index.append(slice(start, start + (out_sizes[d] - 1) * stride[d] + 1, stride[d]))
        return x[tuple(index)]
    offsets = list(itertools.product(*(range(k) for k in kernel)))
    batch, cin, cout = x.shape[0], x.shape[1], weight.shape[0]
    # One rounding, as eager: a 16-bit result is rounded once from float32 sums
    # (bias included), never per partial sum.
    if cin == groups and cout == groups:  # depthwise: a weighted sum of the taps
        w = weight.reshape(cout, taps).float()
        out = bias.float().view([cout] + [1] * nd) if bias is not None else None
        for t, off in enumerate(offsets):
            term = tap(off).float() * w[:, t].view([cout] + [1] * nd)
            out = term if out is None else out + term
        return out.to(x.dtype)
    cols = torch.stack([tap(off) for off in offsets], 2)  # (B, Cin, taps, *out)
    cols = cols.reshape(batch * groups, (cin // groups) * taps, math.prod(out_sizes))
    w = weight.reshape(1, groups, cout // groups, (cin // groups) * taps).expand(batch, -1, -1, -1)
    w = w.reshape(batch * groups, cout // groups, (cin // groups) * taps)
    if bias is None:
        out = torch.bmm(w, cols)
    else:  # the bias accumulated with the products (PE arrays, float32), rounded once
        b = bias.view(1, groups, cout // groups, 1).expand(batch, -1, -1, 1).reshape(batch * groups, cout // groups, 1)
        out = torch.baddbmm(b, w, cols)
    return out.reshape(batch, cout, *out_sizes)


#: Largest triangle inverted on the device (the delta rule's chunks are 64).
SOLVE_MAX_N = 512


def _lower_inverse(lower: torch.Tensor) -> torch.Tensor:
    """The inverse of a unit lower-triangular matrix (batched; the upper
    triangle and the diagonal are not read) by recursive doubling: blocks of
    size b on the diagonal, already inverted, pair into blocks of 2b,
    ``[[A, 0], [C, D]]^-1 = [[A^-1, 0], [-D^-1 C A^-1, D^-1]]``: two batched
    matmuls per doubling, every pair at once. This is the blocked form of
    forward substitution (no powers of the matrix are formed, so nothing grows
    but what substitution itself would)."""
    n = lower.shape[-1]
    m = 1 << max(n - 1, 0).bit_length()  # n padded to a power of two: identity below
    batch = lower.shape[:-2]
    strict = torch.tril(lower, -1)
    if m != n:
        strict = F.pad(strict, (0, m - n, 0, m - n))
    inv = torch.ones(*batch, m, 1, 1, dtype=lower.dtype, device=lower.device)
    b = 1
    while b < m:
        pairs = m // (2 * b)
        blocks = strict.reshape(*batch, pairs, 2 * b, pairs, 2 * b)
        # The pairs' own 2b x 2b diagonal blocks; C is the lower-left b x b of each.
        c = torch.diagonal(blocks, dim1=-4, dim2=-2).movedim(-1, -3)[..., b:, :b]
        a_inv, d_inv = inv[..., 0::2, :, :], inv[..., 1::2, :, :]
        lower_left = -torch.matmul(d_inv, torch.matmul(c, a_inv))
        top = torch.cat([a_inv, torch.zeros_like(a_inv)], -1)
        inv = torch.cat([top, torch.cat([lower_left, d_inv], -1)], -2)
        b *= 2
    return inv.reshape(*batch, m, m)[..., :n, :n]


def _solve_triangular(default: Any, a: torch.Tensor, b: torch.Tensor, *, upper: bool, left: bool = True,
                      unitriangular: bool = False) -> Any:
    """``linalg_solve_triangular`` as batched matmuls: the triangle is made
    unit by dividing its rows by the diagonal, inverted by
    :func:`_lower_inverse` (an upper one through its transpose), and
    ``A^-1 = (D^-1 A)^-1 D^-1`` multiplies ``b`` from the side asked."""
    n = a.shape[-1] if a.dim() >= 2 else 0
    if not (a.dtype.is_floating_point and b.dtype == a.dtype and a.dim() >= 2 and b.dim() >= 2
            and 0 < n <= SOLVE_MAX_N):
        return default(a, b, upper=upper, left=left, unitriangular=unitriangular)
    tri = a.transpose(-1, -2) if upper else a
    if unitriangular:
        inverse = _lower_inverse(tri)
    else:
        # Rows of the lower form divided by the diagonal: unit, same inverse up
        # to the diagonal's scaling (columns of the inverse, in the lower form).
        diag = torch.diagonal(tri, dim1=-2, dim2=-1)
        inverse = _lower_inverse(tri / diag.unsqueeze(-1)) / diag.unsqueeze(-2)
    if upper:
        inverse = inverse.transpose(-1, -2)
    return torch.matmul(inverse, b) if left else torch.matmul(b, inverse)


def register(device: str = "spyre") -> None:
    """Install the Spyre decompositions for ``device``."""
    for op in NORM_OPS:
        register_decomposition(op, device, _cpu_conventions(op))
    register_decomposition(_aten.topk.default, device, _topk)
    for op in CONV_OPS:
        register_decomposition(op, device, _convolution)
    for op in (_aten.sort.default, _aten.sort.stable):
        register_decomposition(op, device, _sort)
    for op in LINALG_OPS:
        register_decomposition(op, device, _solve_triangular)
