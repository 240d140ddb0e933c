"""The Spyre compiler backend's registration with Inductor: the backend
(scheduler, programs, emulator), its decompositions and the hand-written
attention kernel.

:mod:`spyre_adapter.backend.device` has this module imported when Inductor first
compiles in the process, so ``import torch`` never pays for it; calling
:func:`install` directly registers everything now.
"""

from __future__ import annotations

from spyre_shims.backend import register_backend

from spyre_adapter.backend import attention
from spyre_adapter.backend import decompositions
from spyre_adapter.backend.device import register_device
from spyre_adapter.backend.spyre import SpyreBackend, current_machine

__all__ = ["install", "is_installed", "current_machine"]

_installed = False


def install() -> None:
    """Register the device (if needed) and the Spyre backend with Inductor (once)."""
    global _installed
    register_device()
    if _installed:
        return
    register_backend(SpyreBackend())
    decompositions.register("spyre")
    attention.register("spyre")
    _installed = True


def is_installed() -> bool:
    """True once :func:`install` ran."""
    return _installed
