"""Host-backed accelerator devices: a PyTorch device whose memory is host RAM.

:func:`register_host_device` turns PrivateUse1 into a named device (for example
``"spyre"``) whose tensors alias CPU memory; every eager aten op on them runs on
the host, so the device behaves like any other (``.to()``, printing, autograd,
views) while compiled kernels run on the vendor's emulator. One device type per
process (PrivateUse1 can be renamed once).

Registration is light, so that it can run inside ``import torch`` (from a
``torch.backends`` entry point): it loads neither Dynamo nor Inductor. Compiler
setup that needs them is handed to :func:`on_first_compile`.
"""

from __future__ import annotations

import types
from collections import Counter
from collections.abc import Callable
from typing import Any, cast

import torch

from ._torch import lazy, select
from ._torch.eager import HostBackedDevice
from ._torch.version import require_window

__all__ = ["register_host_device", "registered_device", "host_view", "host_flat", "wrap_host", "eager_op_counts",
           "on_first_compile", "add_eager_listener"]

#: Torch imports this module when Inductor first compiles a graph.
_FIRST_COMPILE_MODULE = "torch._inductor.compile_fx"

_DEVICE: HostBackedDevice | None = None
_EAGER_LISTENERS: list[Callable[[str], None]] = []

_MODULE_DEFAULTS: dict[str, Any] = {
    "is_available": lambda: True,
    "is_initialized": lambda: True,
    "_is_in_bad_fork": lambda: False,
    "device_count": lambda: 1,
    "current_device": lambda: 0,
    "set_device": lambda device: None,
    "synchronize": lambda device=None: None,
    "manual_seed_all": lambda seed: None,
    "manual_seed": lambda seed: None,
    "get_rng_state": lambda device=None: torch.get_rng_state(),
    "set_rng_state": lambda state, device=None: torch.set_rng_state(state),
    "is_bf16_supported": lambda including_emulation=True: True,
}


def register_host_device(name: str, module: Any = None) -> types.ModuleType:
    """Create device ``name`` backed by host memory and return ``torch.<name>``.

    ``module`` supplies the device module's functions (``is_available``,
    ``device_count``, ``synchronize``...); missing ones get host defaults.
    Loads neither Dynamo nor Inductor. Idempotent for the same name; a second, different name raises
    (PrivateUse1 is renamed once per process).
    """
    global _DEVICE
    require_window(f"device {name!r}")
    if _DEVICE is not None:
        if _DEVICE.name != name:
            raise RuntimeError(_taken(_DEVICE.name, name))
        return cast(types.ModuleType, getattr(torch, name))
    current = torch._C._get_privateuse1_backend_name()
    if current not in ("privateuseone", name):
        raise RuntimeError(_taken(current, name))
    mod = types.ModuleType(f"torch.{name}", f"The {name!r} host-backed device.")
    for key, fn in _MODULE_DEFAULTS.items():
        setattr(mod, key, fn)
    if module is not None:
        for key in dir(module):
            if not key.startswith("__"):
                setattr(mod, key, getattr(module, key))
    adapter = select.host_device()
    adapter.setup(name, mod)
    dev = HostBackedDevice(name, adapter, _notify_eager, mod)
    dev.install()
    _DEVICE = dev
    lazy.after_import("torch._dynamo", dev.guard_for_dynamo)
    return mod


def _taken(current: str, name: str) -> str:
    return (f"PrivateUse1 is already registered as {current!r}; cannot add {name!r} (one host-backed device "
            f"per process: if an installed package registered {current!r} from its torch.backends entry point, "
            "set TORCH_DEVICE_BACKEND_AUTOLOAD=0 before importing torch)")


def on_first_compile(setup: Callable[[], object] | str) -> None:
    """Run ``setup`` once, when Inductor first compiles in this process (right
    after torch imports Inductor's compiler, before the graph is compiled), or
    now if that already happened.

    ``setup`` is a callable or a ``"module:function"`` reference, imported only
    then: a backend registered from a ``torch.backends`` entry point keeps its
    compiler (and sympy, Dynamo, Inductor) out of ``import torch`` this way.
    A failing deferred setup is reported as a ``RuntimeWarning``.
    """
    def run() -> None:
        fn = lazy.resolve(setup) if isinstance(setup, str) else setup
        fn()

    lazy.after_import(_FIRST_COMPILE_MODULE, run)


def registered_device() -> str | None:
    """The registered host-backed device name, if any."""
    return _DEVICE.name if _DEVICE is not None else None


def _device() -> HostBackedDevice:
    if _DEVICE is None:
        raise RuntimeError("no host-backed device is registered")
    return _DEVICE


def host_view(t: torch.Tensor) -> torch.Tensor:
    """The CPU tensor aliasing device tensor ``t`` (same sizes, strides, memory)."""
    return _device().host_view(t)


def host_flat(t: torch.Tensor) -> torch.Tensor:
    """A 1-D CPU view of ``t``'s storage from ``t``'s first element to the end:
    the address space kernels index into."""
    dev = _device()
    h = dev.host_view(t) if t.device.type == dev.name else t
    n = h.untyped_storage().nbytes() // h.element_size() - h.storage_offset()
    return h.as_strided((max(n, 0),), (1,), h.storage_offset())


def wrap_host(t: torch.Tensor, device: Any = None) -> torch.Tensor:
    """A device tensor aliasing CPU tensor ``t`` (zero copy), on ``device`` (an
    index, ``"<name>:<index>"`` or a ``torch.device``; default: the current device)."""
    dev = _device()
    if isinstance(device, int):
        device = torch.device(dev.name, device)
    return dev.wrap(t, index=dev.index(device))


def add_eager_listener(listener: Callable[[str], None]) -> None:
    """Call ``listener(op_name)`` each time an aten op runs eagerly (on the host)
    on tensors of the host-backed device (the ops :func:`eager_op_counts` counts).
    Adding a listener that is already there changes nothing."""
    if listener not in _EAGER_LISTENERS:
        _EAGER_LISTENERS.append(listener)


def _notify_eager(op: str) -> None:
    for listener in _EAGER_LISTENERS:
        listener(op)


def eager_op_counts() -> Counter[str]:
    """How often each aten op ran eagerly (on the host) on device tensors."""
    return Counter(_device().op_counts) if _DEVICE is not None else Counter()
