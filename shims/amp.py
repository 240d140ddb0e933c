"""Automatic mixed precision (``torch.autocast``) on a host-backed device.

:func:`enable_autocast` makes ``torch.autocast(device_type=<device>,
dtype=torch.float16 | torch.bfloat16)`` work on the registered device, eagerly
and inside ``torch.compile``, with CUDA's documented policy: matmuls,
linear layers, convolutions and attention in the 16-bit dtype; numerically
sensitive pointwise ops, reductions (``sum``, ``softmax``...), norms and losses
in float32; multi-input ops at the widest input dtype. :func:`autocast_policy`
lists the rule of every op.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ._torch import autocast
from .device import registered_device

__all__ = ["enable_autocast", "autocast_policy"]


def enable_autocast(device: str, dtypes: Sequence[torch.dtype] = (torch.float16, torch.bfloat16)) -> None:
    """Register autocast for the host-backed device ``device`` (idempotent).

    ``dtypes`` are the autocast dtypes the device accepts; ``torch.<device>``
    gains ``get_amp_supported_dtype()`` returning them unless it has one.
    """
    if registered_device() != device:
        raise RuntimeError(f"autocast needs the host-backed device {device!r} registered first "
                           f"(registered: {registered_device()!r})")
    mod = getattr(torch, device)
    if not hasattr(mod, "get_amp_supported_dtype"):
        supported = list(dtypes)
        mod.get_amp_supported_dtype = lambda: list(supported)
    autocast.install(device)


def autocast_policy() -> dict[str, str]:
    """aten op name -> ``"lower_precision"`` (the autocast dtype), ``"fp32"``,
    ``"fp32_dtype_arg"`` (reductions given ``dtype=torch.float32`` unless the
    caller chose one) or ``"promote"`` (widest input dtype)."""
    return autocast.policy()
