"""Hand-written kernels: a vendor replaces a torch function (attention, a
matmul with its epilogue...) by its own kernel on its device.

A general compiler loses to a specialist on a few latency-critical ops. With
:func:`register_kernel` the vendor names the torch function it replaces, the
schema of its kernel, a *reference* implementation (the checked generic
semantics, used on every other device and by tests) and the *device*
implementation. Before Inductor decomposes the graph, calls of the function on
the vendor's device that the kernel ``accepts`` are rewritten into a call of
the kernel's custom op, which Inductor keeps as one opaque call; at run time
the op dispatches to the device implementation. Everything else, every other
device, and every call that needs a gradient take the generic path.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import torch

from ._registry import KERNELS, NAMESPACE, constant_arg_names, registered_kernels
from ._torch import passes

__all__ = ["KernelSpec", "register_kernel", "registered_kernels", "constant_arg_names", "NAMESPACE"]


@dataclasses.dataclass(frozen=True)
class KernelSpec:
    """A registered hand-written kernel.

    ``bind(*args, **kwargs)`` maps a call of ``replaces`` to the kernel's
    arguments (in schema order), or returns None when the kernel does not handle
    that call (the generic path then runs).
    """

    device: str
    name: str
    replaces: Callable[..., Any]
    schema: str
    bind: Callable[..., tuple[Any, ...] | None]
    reference: Callable[..., Any]
    device_impl: Callable[..., Any]
    enabled: Callable[[], bool] = lambda: True

    @property
    def op(self) -> Any:
        """The kernel's custom op (an OpOverload)."""
        return getattr(getattr(torch.ops, NAMESPACE), self.name).default

    @property
    def qualname(self) -> str:
        """``shim_kernels::<name>``."""
        return f"{NAMESPACE}::{self.name}"


_LIB: Any = None  # the torch.library.Library of NAMESPACE, made on first registration
# torch leaves these two unannotated: typed once here so the callers stay checked
_new_library: Callable[[str, str], Any] = torch.library.Library
_no_compile: Callable[[Callable[..., Any]], Callable[..., Any]] = torch.compiler.disable


def register_kernel(device: str, name: str, *, replaces: Callable[..., Any], schema: str,
                    bind: Callable[..., tuple[Any, ...] | None], reference: Callable[..., Any],
                    device_impl: Callable[..., Any], fake: Callable[..., Any] | None = None,
                    enabled: Callable[[], bool] = lambda: True) -> KernelSpec:
    """Use ``device_impl`` for calls of ``replaces`` on ``device`` that ``bind`` accepts.

    ``schema`` is the kernel's torch.library schema without its name, e.g.
    ``"(Tensor q, Tensor k, Tensor v, bool causal, float scale) -> Tensor"``.
    ``reference`` computes the same thing with plain torch ops (run for shape
    inference under fake tensors unless ``fake`` is given, on devices other than
    ``device``, and by tests as the check of the device implementation).
    ``enabled()`` switches the rewrite on and off (part of Inductor's cache key,
    so the generic path can be compiled for comparison).
    """
    global _LIB
    if name in KERNELS:
        raise ValueError(f"hand-written kernel {name!r} is already registered")
    if _LIB is None:
        _LIB = _new_library(NAMESPACE, "FRAGMENT")  # noqa: TOR901 - our own namespace
    _LIB.define(f"{name}{schema}")
    _LIB.impl(name, reference, "CompositeExplicitAutograd")
    _LIB.impl(name, _no_compile(device_impl), "PrivateUse1")
    # Kernels have no backward: calls are only rewritten when nothing needs a
    # gradient (see passes.rewrite), so autograd has nothing to record.
    _LIB.impl(name, torch.library.fallthrough_kernel, "Autograd")
    torch.library.register_fake(f"{NAMESPACE}::{name}", fake or reference, lib=_LIB)
    spec = KernelSpec(device, name, replaces, schema, bind, reference, device_impl, enabled)
    KERNELS[name] = spec
    passes.install_kernel_rewrites()
    return spec
