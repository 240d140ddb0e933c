"""The "spyre" PyTorch device: ``torch.device("spyre")``, ``.to("spyre")``,
``torch.spyre.*`` and ``torch.compile`` through the stable API.

Two halves, so that ``import torch`` stays fast: this module registers the
device (eager ops on host-backed memory, ``torch.spyre``) and imports nothing
heavy; :mod:`spyre_adapter.backend.compiler` (the Inductor backend, scheduler and
emulator, with sympy) is imported by name when Inductor first compiles, or when
``torch.spyre.machine()`` asks for the machine model.
"""

from __future__ import annotations

import contextlib
import types
from collections.abc import Iterator
from typing import Any

from spyre_shims.amp import enable_autocast
from spyre_shims.device import add_eager_listener, on_first_compile, register_host_device

from spyre_adapter.backend.report import DeviceReport
from spyre_adapter.backend.session import card_count, card_session, current, current_card, set_card

#: The heavy half, imported only on first use.
COMPILER = "spyre_adapter.backend.compiler"


class _SpyreModule:
    """Functions exposed as ``torch.spyre``."""

    @staticmethod
    def is_available() -> bool:
        return True

    @staticmethod
    def device_count() -> int:
        """The cards of the ensemble (``cards`` in the machine spec; 8 by default)."""
        return card_count()

    @staticmethod
    def current_device() -> int:
        """The current card (set by ``set_device``; under torchrun ``LOCAL_RANK``; else 0)."""
        return current_card()

    @staticmethod
    def set_device(device: Any) -> None:
        """Make a card current: an index, ``"spyre:<i>"`` or a ``torch.device``."""
        set_card(_index(device))

    @staticmethod
    def device(device: Any) -> contextlib.AbstractContextManager[None]:
        """Make a card current inside a block (``with torch.spyre.device(1): ...``)."""
        return _on_card(_index(device))

    @staticmethod
    def card_report(device: Any = None) -> DeviceReport:
        """The report of one card (default: the current one)."""
        return card_session(current_card() if device is None else _index(device)).report

    @staticmethod
    def synchronize(device: Any = None) -> None:
        """Kernels run synchronously on the emulator; nothing to wait for."""

    @staticmethod
    def get_device_name(device: Any = None) -> str:
        return "IBM Spyre (emulated)"

    @staticmethod
    def get_amp_supported_dtype() -> list[Any]:
        """Dtypes ``torch.autocast("spyre", dtype=...)`` accepts (the card computes in both).
        torch.autocast asks this first, so the autocast kernels are registered here,
        on first use, not on ``import torch``."""
        import torch

        enable_autocast("spyre")
        return [torch.float16, torch.bfloat16]

    @staticmethod
    def report() -> DeviceReport:
        """The emulator's report of everything run so far (the current session's)."""
        return current().report

    @staticmethod
    def machine() -> Any:
        """The machine model kernels are planned for (the current session's)."""
        return current().machine


def _index(device: Any) -> Any:
    """The card index a ``set_device``-style argument names (checked by the session)."""
    if isinstance(device, str) and ":" in device:
        kind, _, index = device.partition(":")
        if kind != "spyre":
            raise ValueError(f"device={device!r} is not accepted: expected a spyre device (spyre:<index>)")
        return index
    if hasattr(device, "type") and hasattr(device, "index"):
        if device.type != "spyre":
            raise ValueError(f"device={device!r} is not accepted: expected a spyre device (spyre:<index>)")
        return 0 if device.index is None else device.index
    return device


@contextlib.contextmanager
def _on_card(index: Any) -> Iterator[None]:
    old = current_card()
    set_card(index)
    try:
        yield
    finally:
        set_card(old)


def _record_eager(op: str) -> None:
    """An aten op that ran eagerly on device tensors, counted in the current session's report."""
    current().report.record_eager(op)


def register_device() -> types.ModuleType:
    """Create the "spyre" device (eager ops on host-backed memory, counted in the report)."""
    module = register_host_device("spyre", _SpyreModule)
    add_eager_listener(_record_eager)
    return module


def register() -> None:
    """Create the device now; register the Spyre backend with Inductor when it
    first compiles (:func:`spyre_adapter.backend.compiler.install`)."""
    register_device()
    import torch.distributed

    if torch.distributed.is_available():
        from spyre_adapter.backend.collectives import register as register_collectives
        register_collectives()
    on_first_compile(f"{COMPILER}:install")
