"""The Spyre compiler backend's registration with Inductor: the backend
(scheduler, programs, emulator), its decompositions and the hand-written
attention kernel.

:mod:`spyre_adapter.backend.device` has this module imported when Inductor
first compiles in the process, so ``import torch`` never pays for it; calling
:func:`install` directly registers everything now.
"""

from __future__ import annotations

from spyre_shims.backend import get_backend, register_backend

from spyre_adapter.backend import attention, decompositions
from spyre_adapter.backend.device import register_device
from spyre_adapter.backend.spyre import SpyreBackend

__all__ = ["install", "is_installed"]


def is_installed() -> bool:
    """Whether torch compiles for "spyre" with the Spyre backend (asked of the stable API's registry)."""
    return isinstance(get_backend(SpyreBackend.device), SpyreBackend)


def install() -> None:
    """Register the device (if needed) and the Spyre backend with Inductor (once per process)."""
    register_device()
    if is_installed():
        return
    register_backend(SpyreBackend())
    decompositions.register(SpyreBackend.device)
    attention.register(SpyreBackend.device)
