"""Host-backed PrivateUse1 tensors through a small C++ extension (torch < 2.10,
which has no ``torch._C._acc``). Built once per torch release with
``torch.utils.cpp_extension`` (needs a C++ compiler and ninja) and cached."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import torch

RELEASES = "<2.10"
FEATURES = ["device.host_backed"]

_SRC = Path(__file__).resolve().parents[1] / "csrc" / "host_device.cpp"


def available() -> bool:
    """Feature detection: a C++ toolchain and the cpp_extension builder."""
    import contextlib
    import io
    import shutil

    try:
        # A CUDA build of torch on a machine without a GPU prints "No CUDA runtime
        # is found" when this module is imported: the host extension is C++ only,
        # and a command's stderr is its own (an argument error is its one line).
        with contextlib.redirect_stderr(io.StringIO()):
            import torch.utils.cpp_extension  # noqa: F401
    except ImportError:
        return False
    return shutil.which("c++") is not None or shutil.which("g++") is not None


@functools.cache
def _ext() -> Any:
    from torch.utils.cpp_extension import load

    tag = torch.__version__.split("+")[0].replace(".", "_")
    return load(name=f"spyre_shims_host_device_{tag}", sources=[str(_SRC)], verbose=False,
                extra_cflags=["-O2"])


def setup(name: str, backend_module: Any) -> None:
    """Rename PrivateUse1 to ``name``, register guard, hooks and module."""
    ext = _ext()  # loading registers the device guard
    torch.utils.rename_privateuse1_backend(name)
    torch.utils.generate_methods_for_privateuse1_backend()
    torch._register_device_module(name, backend_module)
    ext.register_hooks()


#: torch fills in a device without an index from the guard, which says 0 (as
#: torch._C._acc's does): index 0 means the current device, kept by the device module.
INDEX_ZERO_MEANS_CURRENT = True

_count = [1]  # devices the extension's guard reports so far


def wrap(host: torch.Tensor, like: torch.Tensor | None = None, index: int = 0) -> torch.Tensor:
    """Device tensor on device ``index`` with ``host``'s metadata; shares ``like``'s device storage."""
    if like is None and index >= _count[0]:
        # the device module validated the index: the guard counts every device a tensor lives on
        _ext().set_device_count(index + 1)
        _count[0] = index + 1
    return _ext().wrap(host, like, index)


def host_view(dev: torch.Tensor) -> torch.Tensor:
    return _ext().host_view(dev)


def repoint(dev: torch.Tensor, host: torch.Tensor) -> None:
    _ext().repoint(dev, host)


def redispatch_cpu(op: Any, *args: Any, **kwargs: Any) -> Any:
    """Run a metadata-only CPU kernel (views) directly on device tensors."""
    return op.redispatch(torch._C.DispatchKeySet(torch._C.DispatchKey.CPU), *args, **kwargs)
