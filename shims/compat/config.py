"""Inductor and Dynamo configuration.

Tier 2 of the stable API (``spyre_shims.compat``): the names below are
Inductor's own objects on the installed release (classes keep ``isinstance``
and subclassing), resolved on first access from the per-release table
generated from the release wheels (``surface/compat_table.json``). Where a
release moved or renamed one, the table points at its home there. Their
members are Inductor's and are not promised; the names are, on every release
2.6 - 2.15.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any

from .._torch import inductor as _inductor
from ._lazy import resolve as _resolve

__all__ = [
    'inductor',
    'dynamo',
    'functorch',
    'inductor_config',
    'dynamo_config',
    'functorch_config',
]


def __getattr__(name: str) -> Any:
    return _resolve(__name__, name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


def inductor_config(**overrides: Any) -> AbstractContextManager[Any]:
    """Patch ``torch._inductor.config`` inside a ``with`` block (also a decorator).

    Nested options use their dotted name: ``inductor_config(**{"triton.cudagraphs":
    False})``. Raises ``ValueError`` naming every option the installed release
    does not have (with the closest known name) before patching anything.
    """
    patch: AbstractContextManager[Any] = _inductor.config_patch(overrides)
    return patch


def dynamo_config(**overrides: Any) -> AbstractContextManager[Any]:
    """Patch ``torch._dynamo.config`` inside a ``with`` block (also a decorator).

    Raises ``ValueError`` naming every option the installed release does not have
    (with the closest known name) before patching anything. ``cache_size_limit``
    and ``recompile_limit`` are one option (renamed in 2.7): either name works
    on every release.
    """
    patch: AbstractContextManager[Any] = _inductor.dynamo_config_patch(overrides)
    return patch


def functorch_config(**overrides: Any) -> AbstractContextManager[Any]:
    """Patch ``torch._functorch.config`` (AOTAutograd's options) inside a ``with`` block
    (also a decorator).

    Raises ``ValueError`` naming every option the installed release does not have
    (with the closest known name) before patching anything.
    """
    patch: AbstractContextManager[Any] = _inductor.config_patch(overrides, "torch._functorch.config", "functorch")
    return patch
