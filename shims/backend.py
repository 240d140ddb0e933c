"""Vendor backends on the stable API.

A vendor subclasses :class:`Backend` and calls :func:`register_backend`. From
then on ``torch.compile`` on that device sends every kernel Inductor schedules to
:meth:`Backend.compile` as stable Kernel IR, and the generated host program
calls what :meth:`Backend.load` returns. Nothing here depends on Inductor's
classes; the shims translate.
"""

from __future__ import annotations

import abc
import dataclasses
import hashlib
import warnings
from collections.abc import Callable, Mapping

import sympy
import torch

from ._api_level import API_LEVEL
from ._registry import BACKENDS, get_backend, registered_backends
from ._torch import bridge
from .kernel_ir import FusionCandidate, GraphIR, Kernel

__all__ = [
    "API_LEVEL",
    "Backend",
    "DeviceProperties",
    "FusionCandidate",
    "Launch",
    "FallbackWarning",
    "warn_fallback",
    "register_backend",
    "get_backend",
    "registered_backends",
    "default_can_fuse",
]

#: What :meth:`Backend.load` returns: called with the flat host view of every
#: argument buffer (by name) and the run-time values of size symbols.
Launch = Callable[[Mapping[str, torch.Tensor], Mapping[sympy.Symbol, int]], None]


class FallbackWarning(UserWarning):
    """Emitted when work meant for the device runs on the host instead."""


@dataclasses.dataclass(frozen=True)
class DeviceProperties:
    """What Inductor's heuristics need to know about the device."""

    name: str
    cores: int
    memory_bytes: int = 0
    bf16: bool = True


def default_can_fuse(a: FusionCandidate, b: FusionCandidate, vertical: bool) -> bool:
    """Fuse when the iteration spaces line up (same shape; a pointwise prologue
    of a reduction; a pointwise epilogue of a reduction)."""
    if a.numel == b.numel and a.reduction_numel == b.reduction_numel:
        return True
    if not vertical:
        return False
    if not a.is_reduction and b.is_reduction:
        return bool(sympy.simplify(a.numel - b.numel * b.reduction_numel) == 0)
    if a.is_reduction and not b.is_reduction:
        return bool(sympy.simplify(b.numel - a.numel * a.reduction_numel) == 0)
    return False


class Backend(abc.ABC):
    """Base class of a vendor backend.

    Subclasses set :attr:`device` and implement :meth:`compile` and
    :meth:`load`; everything else has a working default.
    """

    #: The torch device type this backend compiles for (e.g. ``"spyre"``).
    device: str = ""
    #: Extern kernels (aten op names) the backend implements itself.
    extern_ops: frozenset[str] = frozenset({"mm", "bmm", "addmm", "baddbmm"})
    #: Functional collectives (``torch.ops._c10d_functional`` op names) the backend
    #: runs as kernels of its own under ``torch.compile``: ``"all_reduce_"`` (what
    #: ``all_reduce`` and tensor-parallel layers lower to), ``"all_gather_into_tensor"``,
    #: ``"reduce_scatter_tensor"``. Each reaches :meth:`compile` as an
    #: :class:`~spyre_shims.kernel_ir.ExternKernel` of that ``op`` with one input
    #: (an in-place op's output is the same buffer, role ``inout``; another's its
    #: own buffer, allocated by the generated code) and its scalar arguments as
    #: attrs by schema name (``reduce_op``, ``group_size``, ``group_name``; see
    #: :func:`spyre_shims.distributed.link_group`); its ``wait_tensor`` is then no
    #: host fallback. Empty: they run on the host.
    collective_ops: frozenset[str] = frozenset()
    #: Optional behaviours, by stable name. ``"reduce_to_single_element"``: the
    #: backend splits large reductions itself, so Inductor must not split them.
    #: ``"scan"``: cumulative ops (cumsum, cumprod, logcumsumexp) reach the
    #: backend as kernels with a ``scan`` instead of host fallbacks;
    #: ``"tuple_reduction"`` with it: cummax and cummin too (a two-component
    #: scan). A scan kernel is never fused with another. ``"complex_as_real"``:
    #: complex arithmetic (rotary embeddings written with ``view_as_complex`` and
    #: ``polar``) reaches the backend as the same computation on real and
    #: imaginary parts instead of complex-dtype host fallbacks.
    features: frozenset[str] = frozenset()
    #: Stable-API level the backend was written against.
    api_level: int = API_LEVEL

    @abc.abstractmethod
    def compile(self, kernel: Kernel) -> str:
        """Compile one kernel; return a payload (text) that :meth:`load` accepts.

        Raise :class:`~spyre_shims.errors.UnsupportedKernelError` to decline a
        kernel: it then runs on the host reference evaluator, with a warning.
        """

    @abc.abstractmethod
    def load(self, payload: str) -> Launch:
        """Turn a payload from :meth:`compile` into a callable (possibly in another
        process: payloads are embedded in Inductor's cached generated code)."""

    def can_fuse(self, first: FusionCandidate, second: FusionCandidate, vertical: bool) -> bool:
        """Whether to fuse two candidates Inductor already found legal."""
        return default_can_fuse(first, second, vertical)

    def properties(self) -> DeviceProperties:
        """Device properties for Inductor's heuristics."""
        return DeviceProperties(name=self.device, cores=1)

    def on_graph(self, graph: GraphIR) -> None:
        """Called once per compiled graph (also when it is loaded from cache)."""

    def cache_key(self) -> str:
        """Changes whenever compiled output would change (invalidates Inductor's
        FX graph cache). Default: the backend class's module source."""
        import inspect

        try:
            src = inspect.getsource(type(self))
        except (OSError, TypeError):
            src = type(self).__qualname__
        return hashlib.sha256(src.encode()).hexdigest()[:16]

    def ref(self) -> str:
        """``module:attribute`` that gives this backend in a fresh process."""
        return f"{type(self).__module__}:{type(self).__qualname__}"


def register_backend(backend: Backend) -> None:
    """Make ``torch.compile`` use ``backend`` for tensors on ``backend.device``.

    The device must exist (see :func:`spyre_shims.device.register_host_device`).
    Raises :class:`~spyre_shims.errors.UnsupportedTorchError` when the installed
    torch lacks what registration needs.
    """
    if not backend.device:
        raise ValueError("Backend.device is empty")
    if backend.api_level > API_LEVEL:
        raise ValueError(f"backend needs API level {backend.api_level}; this is level {API_LEVEL}")
    BACKENDS[backend.device] = backend
    bridge.install(backend)


def warn_fallback(what: str) -> None:
    """The one place host fallbacks are announced (attributed to the compiled
    program, not to a line of generated code): a :class:`FallbackWarning`
    reading ``fallback to host execution: <what>``. A backend calls it for work
    it hands to the host at run time (a kernel no program fits at the sizes of
    a launch)."""
    warnings.warn_explicit(f"fallback to host execution: {what}", FallbackWarning,
                           filename="<compiled program>", lineno=0, module="spyre_shims")
