"""The stable API's process-wide registries: a leaf module (no project imports
at run time).

Backends by device, hand-written kernels by name, and the counters behind
:func:`spyre_shims.runtime.stats` live here, so the public modules that fill
them (:mod:`spyre_shims.backend`, :mod:`spyre_shims.kernels`) and the Inductor
side that reads them (``_torch.bridge``, ``_torch.passes``) do not import each
other: imports point one way only.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # annotations only: the registries hold these, they do not build them
    from .backend import Backend
    from .kernels import KernelSpec

#: The torch.library namespace of hand-written kernels (``torch.ops.shim_kernels``).
NAMESPACE = "shim_kernels"

BACKENDS: dict[str, Backend] = {}
KERNELS: dict[str, KernelSpec] = {}

_lock = threading.Lock()
_stats = {"kernels_compiled": 0, "kernels_loaded": 0, "graphs_loaded": 0}


def get_backend(device: str) -> Backend | None:
    """The backend registered for ``device``, if any."""
    return BACKENDS.get(device)


def registered_backends() -> dict[str, Backend]:
    """All registered backends by device."""
    return dict(BACKENDS)


def registered_kernels() -> dict[str, KernelSpec]:
    """Hand-written kernels by name."""
    return dict(KERNELS)


def constant_arg_names(name: str) -> tuple[str, ...]:
    """The names of a registered kernel's non-tensor arguments, in schema order
    (how a recorded call names its scalar attributes)."""
    spec = KERNELS.get(name)
    if spec is None:
        return ()
    args = spec.schema.strip()[1:].split(")")[0]
    out = []
    for part in args.split(","):
        words = part.strip().split()
        if len(words) >= 2 and not words[0].startswith("Tensor"):
            out.append(words[1].split("=")[0])
    return tuple(out)


def stats() -> dict[str, int]:
    """Process-wide counters: kernels compiled by a backend, kernels and graphs
    loaded from generated code (a cache hit loads without compiling)."""
    with _lock:
        return dict(_stats)


def count(key: str) -> None:
    """Increment a counter of :func:`stats`."""
    with _lock:
        _stats[key] += 1
