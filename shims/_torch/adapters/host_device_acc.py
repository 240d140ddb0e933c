"""Host-backed PrivateUse1 tensors through ``torch._C._acc`` (torch >= 2.10).

A device tensor owns a *device* storage that is a non-owning alias of host
(CPU) memory; the host storage object hangs off the device storage's Python
object, which torch keeps alive exactly as long as the StorageImpl, so the
memory lives as long as any view of it.
"""

from __future__ import annotations

import ctypes
from typing import Any

import torch

from .. import lazy

RELEASES = ">=2.10"
FEATURES = ["device.host_backed"]

_HOST_ATTR = "_shim_host_storage"

#: torch fills in a device without an index (``.to("spyre")``, ``torch.tensor(...,
#: device="spyre")``) from the device guard, and torch._C._acc's guard always says 0:
#: an index 0 therefore means the current device (the same thing, unless
#: ``set_device`` chose another; then ``spyre:0`` cannot be told from ``spyre``).
INDEX_ZERO_MEANS_CURRENT = True
_CPU = torch._C.DispatchKeySet(torch._C.DispatchKey.CPU)
_SET_STORAGE = torch.ops.aten.set_.source_Storage_storage_offset


def available() -> bool:
    """Feature detection: the pure-Python PrivateUse1 helpers exist."""
    acc = getattr(torch._C, "_acc", None)
    from torch.utils import backend_registration as br

    return (
        acc is not None
        and hasattr(acc, "create_empty_tensor")
        and hasattr(br, "_setup_privateuseone_for_python_backend")
        and hasattr(torch._C, "_construct_storage_from_data_pointer")
    )


def setup(name: str, backend_module: Any) -> None:
    """Rename PrivateUse1 to ``name`` and install hooks, guard and module."""
    from torch.utils.backend_registration import _setup_privateuseone_for_python_backend

    acc = torch._C._acc

    class Hooks(acc.PrivateUse1Hooks):  # type: ignore[misc,name-defined]
        def is_available(self) -> bool:
            return True

        def has_primary_context(self, dev_id: int) -> bool:
            return True

        def is_built(self) -> bool:
            return True

    class Guard(acc.DeviceGuard):  # type: ignore[misc,name-defined]
        def type_(self) -> Any:
            return torch._C._autograd.DeviceType.PrivateUse1

    # torch calls type_ from C++ while Dynamo traces (stream lookups at frame
    # entry): it must stay untraced, or Dynamo compiles it as a frame and breaks
    # its graph. Marked when torch imports Dynamo, so `import torch` never does.
    def untraced() -> None:
        Guard.type_ = torch.compiler.disable(Guard.type_)

    lazy.after_import("torch._dynamo", untraced)

    _setup_privateuseone_for_python_backend(name, backend_module=backend_module, hook=Hooks(), device_guard=Guard())


def _device_storage(host: torch.UntypedStorage, device: torch.device) -> torch.UntypedStorage:
    """A device storage aliasing ``host`` (which it keeps alive)."""
    dev = torch._C._construct_storage_from_data_pointer(host.data_ptr(), device, host.nbytes())
    setattr(dev, _HOST_ATTR, host)
    return dev


def wrap(host: torch.Tensor, like: torch.Tensor | None = None, index: int = 0) -> torch.Tensor:
    """Device tensor on device ``index`` with ``host``'s metadata; shares ``like``'s device storage."""
    storage = like.untyped_storage() if like is not None else _device_storage(
        host.untyped_storage(), torch.device(torch._C._get_privateuse1_backend_name(), index))
    t = torch._C._acc.create_empty_tensor([0], host.dtype) if index == 0 else _blank(host.dtype, index)
    return _SET_STORAGE.redispatch(_CPU, t, storage, host.storage_offset(), list(host.size()), list(host.stride()))


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLTensorHead(ctypes.Structure):
    """The leading fields of DLPack's (unversioned) ``DLTensor``."""

    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice)]


#: DLPack's device type for a vendor's own devices; torch maps it to PrivateUse1.
_DL_EXT_DEV = 12
_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype = ctypes.c_void_p
_capsule_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]


def _blank(dtype: torch.dtype, index: int) -> torch.Tensor:
    """An empty PrivateUse1 tensor on device ``index``: ``create_empty_tensor`` makes
    device 0 only, and a tensor's device is fixed when it is made (``set_`` refuses
    a storage of another device). A DLPack capsule of an empty CPU tensor, its
    device rewritten to (ext_dev, index), imports as exactly that tensor."""
    capsule = torch.empty(0, dtype=dtype).__dlpack__()
    head = _DLTensorHead.from_address(_capsule_pointer(capsule, b"dltensor"))
    head.device.device_type, head.device.device_id = _DL_EXT_DEV, index
    return torch.from_dlpack(capsule)


def host_view(dev: torch.Tensor) -> torch.Tensor:
    """CPU tensor over the memory of device tensor ``dev``, same metadata."""
    try:
        host = getattr(dev.untyped_storage(), _HOST_ATTR)
    except AttributeError:
        raise RuntimeError("tensor storage was not allocated by the host-backed device") from None
    out = torch.empty(0, dtype=dev.dtype)
    return out.set_(host, dev.storage_offset(), dev.size(), dev.stride())


def repoint(dev: torch.Tensor, host: torch.Tensor) -> None:
    """Point device tensor ``dev`` at ``host``'s memory and metadata, in place."""
    storage = _device_storage(host.untyped_storage(), dev.device)
    _SET_STORAGE.redispatch(_CPU, dev, storage, host.storage_offset(), list(host.size()), list(host.stride()))


def redispatch_cpu(op: Any, *args: Any, **kwargs: Any) -> Any:
    """Run a metadata-only CPU kernel (views) directly on device tensors."""
    return op.redispatch(_CPU, *args, **kwargs)
