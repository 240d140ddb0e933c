"""Decompositions the Spyre backend changes for its device.

Normalisation ops return saved statistics (mean, rstd/invstd) besides their
output. Inductor's decompositions follow CUDA's conventions for every device
but the CPU: float32 statistics, and statistics even when not training. Eager
ops on "spyre" run on the host and follow the CPU's: statistics in the input's
dtype, and empty ones in inference. Compiled and eager results must agree on
one device, so on "spyre" the decompositions follow the CPU's conventions.

Small-k ``topk`` (MoE routing) has no Inductor lowering at all; on "spyre" it
decomposes into max reductions so routing runs on the device.
"""

from __future__ import annotations

from typing import Any

import torch

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
#: experts); larger k keeps topk whole (a host fallback).
TOPK_MAX_K = 8
#: Ops decomposed so MoE routing runs on the device.
ROUTING_OPS = (_aten.topk.default,)


def _topk(default: Any, x: torch.Tensor, k: int, dim: int = -1, largest: bool = True, sorted: bool = True) -> Any:
    """topk as k rounds of (arg)max over the entries not taken yet: reductions
    and pointwise ops the card runs (Mixture-of-experts routing). NaN counts as
    the largest value, as in torch; equal values are taken in index order
    (torch's CPU kernel leaves the order of ties unspecified).
    The smallest-k form stays whole (a host fallback): no router uses it."""
    if k > TOPK_MAX_K or not largest or not x.dtype.is_floating_point or x.dim() == 0:
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


def register(device: str = "spyre") -> None:
    """Install the Spyre decompositions for ``device``."""
    for op in NORM_OPS:
        register_decomposition(op, device, _cpu_conventions(op))
    for op in ROUTING_OPS:
        register_decomposition(op, device, _topk)
