"""Device-scoped decompositions: change how an aten op is broken down, only for
tensors on one device.

Inductor's decomposition table is global; :func:`register_decomposition` wraps
an entry so the vendor's function runs when the op's tensors are on the given
device and the previous decomposition runs otherwise. Entries go through the
shims' patch registry (verified, reported, restorable).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.utils._pytree import tree_flatten

from ._torch import inductor as ind
from ._torch.patches import REGISTRY, Patch

__all__ = ["register_decomposition", "register_fallback", "registered_decompositions"]

_REGISTERED: list[str] = []


def _device_type(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str | None:
    flat, _ = tree_flatten((args, kwargs))
    for x in flat:
        if isinstance(x, torch.Tensor):
            return x.device.type
    return None


def register_decomposition(op: Any, device: str, fn: Callable[..., Any]) -> None:
    """Decompose ``op`` with ``fn(default, *args, **kwargs)`` when its tensors are
    on ``device``; ``default`` is the decomposition that applied before.

    ``op`` is an aten OpOverload. When Inductor has no decomposition for it,
    ``default`` returns ``NotImplemented`` (the op stays whole and is lowered or
    falls back as before); ``fn`` may return ``NotImplemented`` too, to keep
    the op whole for arguments it does not handle.
    """

    def keep_whole(*args: Any, **kwargs: Any) -> Any:
        return NotImplemented

    def make(existing: Callable[..., Any] | None, fired: Callable[[], None]) -> Callable[..., Any]:
        original = existing if existing is not None else keep_whole

        def decomposition(*args: Any, **kwargs: Any) -> Any:
            if _device_type(args, kwargs) == device:
                fired()
                return fn(original, *args, **kwargs)
            return original(*args, **kwargs)

        return decomposition

    name = f"decomposition:{device}:{op}"
    ind.load_lowerings()
    REGISTRY.register(Patch(name, "torch._inductor.decomposition:decompositions", make,
                            f"{device} decomposes {op} its own way", key=op, new_key=True))
    REGISTRY.apply(name)
    ind.refresh_decompositions()
    _REGISTERED.append(name)


def registered_decompositions() -> list[str]:
    """Names of the decompositions registered so far."""
    return list(_REGISTERED)


def register_fallback(op: Any, device: str) -> Callable[[], None]:
    """Keep ``op`` as one aten call on ``device`` (it runs on the host, announced as
    a fallback) instead of lowering or decomposing it; other devices are
    unaffected. Returns a function that undoes the registration."""

    def lower(original: Callable[..., Any], fired: Callable[[], None]) -> Callable[..., Any]:
        host = ind.fallback_lowering(op)

        def lowering(*args: Any, **kwargs: Any) -> Any:
            if ind.lowering_device_type(args, kwargs) == device:
                fired()
                return host(*args, **kwargs)
            return original(*args, **kwargs)

        return lowering

    def keep(original: Callable[..., Any], fired: Callable[[], None]) -> Callable[..., Any]:
        def decomposition(*args: Any, **kwargs: Any) -> Any:
            if _device_type(args, kwargs) == device:
                return NotImplemented  # not decomposed: the lowering above sees the op
            return original(*args, **kwargs)

        return decomposition

    names = []
    if ind.has_lowering(op):
        names.append(f"fallback:{device}:{op}")
        REGISTRY.register(Patch(names[-1], "torch._inductor.lowering:lowerings", lower,
                                f"{device} runs {op} on the host", key=op))
    if ind.has_decomposition(op):
        names.append(f"fallback-decomposition:{device}:{op}")
        REGISTRY.register(Patch(names[-1], "torch._inductor.decomposition:decompositions", keep,
                                f"{device} keeps {op} whole", key=op))
    for name in names:
        REGISTRY.apply(name)
    ind.refresh_decompositions()

    def remove() -> None:
        for name in names:
            REGISTRY.restore(name)
        ind.refresh_decompositions()

    return remove
