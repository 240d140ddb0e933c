"""Hand-written attention on the Spyre device: calls of
``scaled_dot_product_attention`` the kernel handles are routed to it
(registered through the stable API, :func:`spyre_shims.kernels.register_kernel`)
and run the flash-style program of :mod:`spyre_adapter.scheduler.attention` on
the emulated card, so the numbers come from the program. The generic path stays
the checked reference (:func:`reference`); a session's
:meth:`~spyre_adapter.backend.session.Session.generic_path` compiles through it
for comparisons.
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import torch
import torch.nn.functional as F

from spyre_shims.backend import FallbackWarning
from spyre_shims.device import host_flat, host_view, wrap_host
from spyre_shims.kernels import register_kernel

from spyre_adapter.backend.session import current
from spyre_adapter.emulator import Executable
from spyre_adapter.model.errors import DoesNotFit
from spyre_adapter.scheduler.attention import Shape, kernel_ir, name_of, plan, shape_of
from spyre_adapter.scheduler.kinds import ATTENTION

SCHEMA = "(Tensor q, Tensor k, Tensor v, bool causal, float scale) -> Tensor"

__all__ = ["SCHEMA", "bind", "reference", "device_impl", "register"]


def bind(query: Any, key: Any, value: Any, attn_mask: Any = None, dropout_p: float = 0.0, is_causal: bool = False,
         scale: float | None = None, enable_gqa: bool = False) -> tuple[Any, ...] | None:
    """The kernel's arguments for an SDPA call it handles (no mask tensor, no
    dropout, equal heads, 4-d), else None."""
    if attn_mask is not None or dropout_p != 0.0 or enable_gqa:
        return None
    if query.dim() != 4 or key.dim() != 4 or key.shape != value.shape or key.shape[:2] != query.shape[:2]:
        return None
    if query.dtype not in (torch.float16, torch.bfloat16, torch.float32) or not (query.dtype == key.dtype == value.dtype):
        return None
    return (query, key, value, bool(is_causal), float(scale) if scale is not None else 1.0 / math.sqrt(query.shape[-1]))


def reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, scale: float) -> torch.Tensor:
    """The generic semantics (math SDPA, float32 accumulation)."""
    return F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=causal,
                                          scale=scale).to(q.dtype)


def _executable(s: Shape, scale: float) -> Executable:
    """The call's kernel in the current session, kept there per shape and scale
    (its program is planned per machine on first launch, like any kernel)."""
    session = current()
    key = ("attention", s, scale)
    exe = session.kernel_state.get(key)
    if exe is None:
        exe = session.kernel_state[key] = Executable(kernel_ir(s, name_of(s)), ATTENTION,
                                                     lambda kernel, m, sizes: plan(s, m, scale), current)
    return exe  # type: ignore[no-any-return]


def device_impl(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, scale: float) -> torch.Tensor:
    """Run the kernel's program on the emulated card."""
    session = current()
    dtype = str(q.dtype).removeprefix("torch.")
    s = shape_of(q.shape, k.shape, v.shape, causal, dtype)
    try:
        exe = _executable(s, float(scale))
        exe.plan(session.machine)
    except DoesNotFit as exc:
        session.report.record_limit(exc)
        warnings.warn(f"fallback to host execution: spyre: hand-written attention: {exc}", FallbackWarning,
                      stacklevel=2)
        return wrap_host(reference(host_view(q), host_view(k), host_view(v), causal, scale).contiguous())
    out = torch.empty((s.batch, s.heads, s.lq, s.vdim), dtype=q.dtype)
    bufs = {"q": host_flat(q.contiguous()), "k": host_flat(k.contiguous()), "v": host_flat(v.contiguous()),
            "out": out.view(-1)}
    exe(bufs, {})
    return wrap_host(out)


def register(device: str = "spyre") -> None:
    """Register the kernel for ``device`` (once per process: a torch library op)."""
    register_kernel(device, "attention", replaces=F.scaled_dot_product_attention, schema=SCHEMA, bind=bind,
                    reference=reference, device_impl=device_impl, enabled=lambda: current().handwritten)
