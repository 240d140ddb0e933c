"""Decompositions the Spyre backend changes for its device.

Normalisation ops return saved statistics (mean, rstd/invstd) besides their
output. Inductor's decompositions keep those in float32 for every device but
the CPU (CUDA's convention); eager ops on "spyre" run on the host and return
them in the input's dtype. Compiled and eager results must agree on one device,
so on "spyre" the statistics are cast back to the input's dtype.
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
    _aten._native_batch_norm_legit_functional.default,
    _aten.native_group_norm.default,
)


def _stats_in_input_dtype(default: Any, input: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
    out = default(input, *args, **kwargs)
    if not isinstance(out, tuple) or input.dtype not in (torch.float16, torch.bfloat16):
        return out
    return (out[0], *(o.to(input.dtype) if isinstance(o, torch.Tensor) and o.dtype == torch.float32 else o
                      for o in out[1:]))


def register(device: str = "spyre") -> None:
    """Install the Spyre decompositions for ``device``."""
    for op in NORM_OPS:
        register_decomposition(op, device, _stats_in_input_dtype)
