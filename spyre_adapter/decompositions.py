"""Decompositions the Spyre backend changes for its device.

Normalisation ops return saved statistics (mean, rstd/invstd) besides their
output. Inductor's decompositions follow CUDA's conventions for every device
but the CPU: float32 statistics, and statistics even when not training. Eager
ops on "spyre" run on the host and follow the CPU's: statistics in the input's
dtype, and empty ones in inference. Compiled and eager results must agree on
one device, so on "spyre" the decompositions follow the CPU's conventions.
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


def register(device: str = "spyre") -> None:
    """Install the Spyre decompositions for ``device``."""
    for op in NORM_OPS:
        register_decomposition(op, device, _cpu_conventions(op))
