"""The "spyre" PyTorch device: ``torch.device("spyre")``, ``.to("spyre")``,
``torch.spyre.*`` and ``torch.compile`` through the stable API."""

from __future__ import annotations

import types
from typing import Any

import torch

_registered = False


class _SpyreModule:
    """Functions exposed as ``torch.spyre``."""

    @staticmethod
    def is_available() -> bool:
        return True

    @staticmethod
    def device_count() -> int:
        return 1

    @staticmethod
    def synchronize(device: Any = None) -> None:
        """Kernels run synchronously on the emulator; nothing to wait for."""

    @staticmethod
    def get_device_name(device: Any = None) -> str:
        return "IBM Spyre (emulated)"

    @staticmethod
    def get_amp_supported_dtype() -> list[Any]:
        """Dtypes ``torch.autocast("spyre", dtype=...)`` accepts (the card computes in both)."""
        import torch

        return [torch.float16, torch.bfloat16]

    @staticmethod
    def report() -> Any:
        """The emulator's report of everything run so far."""
        from .report import REPORT

        return REPORT

    @staticmethod
    def machine() -> Any:
        """The machine model kernels are planned for."""
        from .backend import current_machine

        return current_machine()


def register_device() -> types.ModuleType:
    """Create the "spyre" device (eager ops on host-backed memory)."""
    from spyre_shims.device import register_host_device

    return register_host_device("spyre", _SpyreModule)


def register() -> None:
    """Create the device and register the Spyre backend with Inductor."""
    global _registered
    register_device()
    if _registered:
        return
    from spyre_shims.amp import enable_autocast
    from spyre_shims.backend import register_backend

    from . import attention, decompositions
    from .backend import SpyreBackend

    register_backend(SpyreBackend())
    decompositions.register("spyre")
    attention.register("spyre")
    enable_autocast("spyre")
    _registered = True


def is_registered() -> bool:
    """True once :func:`register` ran."""
    return _registered


del torch
