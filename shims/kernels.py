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

__all__ = ["KernelSpec", "register_kernel", "registered_kernels", "constant_arg_names", "NAMESPACE"]

#: The torch.library namespace of hand-written kernels (``torch.ops.shim_kernels``).
NAMESPACE = "shim_kernels"


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


_KERNELS: dict[str, KernelSpec] = {}
_LIB: torch.library.Library | None = None


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
    if name in _KERNELS:
        raise ValueError(f"hand-written kernel {name!r} is already registered")
    if _LIB is None:
        _LIB = torch.library.Library(NAMESPACE, "FRAGMENT")  # noqa: TOR901 - our own namespace
    _LIB.define(f"{name}{schema}")
    _LIB.impl(name, reference, "CompositeExplicitAutograd")
    _LIB.impl(name, torch.compiler.disable(device_impl), "PrivateUse1")
    # Kernels have no backward: calls are only rewritten when nothing needs a
    # gradient (see passes.rewrite), so autograd has nothing to record.
    _LIB.impl(name, torch.library.fallthrough_kernel, "Autograd")
    torch.library.register_fake(f"{NAMESPACE}::{name}", fake or reference, lib=_LIB)
    spec = KernelSpec(device, name, replaces, schema, bind, reference, device_impl, enabled)
    _KERNELS[name] = spec
    from ._torch import passes

    passes.install_kernel_rewrites()
    return spec


def registered_kernels() -> dict[str, KernelSpec]:
    """Hand-written kernels by name."""
    return dict(_KERNELS)


def constant_arg_names(name: str) -> tuple[str, ...]:
    """The names of a registered kernel's non-tensor arguments, in schema order
    (how a recorded call names its scalar attributes)."""
    spec = _KERNELS.get(name)
    if spec is None:
        return ()
    args = spec.schema.strip()[1:].split(")")[0]
    out = []
    for part in args.split(","):
        words = part.strip().split()
        if len(words) >= 2 and not words[0].startswith("Tensor"):
            out.append(words[1].split("=")[0])
    return tuple(out)
