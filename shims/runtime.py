"""Run-time entry points called by Inductor's generated host code.

Generated code is self-contained: each kernel's payload is embedded in it, so a
program loaded from Inductor's cache in a fresh process works without the
compile-time state (the backend is imported from its recorded reference).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch

from . import index as _index
from ._lookup import lookup
from ._registry import count, get_backend, stats
from ._torch.inductor import reset_dynamo
from .backend import Backend, Launch, register_backend, warn_fallback
from .device import host_flat
from ._torch.dispatch import outside_dispatch_modes
from .jsonform import FormatError
from .kernel_ir import GraphIR, from_json
from .reference import run_kernel

__all__ = ["load_kernel", "graph_loaded", "capture_graphs", "LoadedKernel", "stats", "reset_compiled"]

_lock = threading.Lock()
_captures: list[list[GraphIR]] = []


def reset_compiled() -> None:
    """Forget every compiled graph (``torch.compile`` recompiles on next call)."""
    reset_dynamo()


def _backend(device: str, ref: str) -> Backend:
    backend = get_backend(device)
    if backend is None:
        try:
            obj = lookup(ref)
        except (ImportError, AttributeError, ValueError, TypeError) as exc:
            raise FormatError(f"kernel envelope: backend {ref[:80]!r} cannot be found ({type(exc).__name__})") from None
        # Only a Backend (class or instance) for this device is used: a cached
        # envelope naming anything else is refused, not called.
        if not (isinstance(obj, Backend) or isinstance(obj, type) and issubclass(obj, Backend)) \
                or getattr(obj, "device", None) != device:
            raise FormatError(f"kernel envelope: backend {ref[:80]!r} is not a Backend for device {device!r}")
        backend = obj() if isinstance(obj, type) else obj
        if get_backend(device) is None:
            register_backend(backend)
        backend = get_backend(device) or backend
    return backend


class LoadedKernel:
    """A compiled kernel bound to its argument names."""

    def __init__(self, name: str, args: list[str], symbols: list[str], launch: Launch) -> None:
        self.name = name
        self.args = tuple(args)
        self.symbols = tuple(_index.index_symbol(s) for s in symbols)
        self.launch = launch

    def __call__(self, *tensors: torch.Tensor, **sizes: int) -> None:
        bufs = {name: host_flat(t) for name, t in zip(self.args, tensors)}
        with outside_dispatch_modes():  # the backend's work is device execution, not graph ops
            self.launch(bufs, {_index.index_symbol(k): int(v) for k, v in sizes.items()})

    def __repr__(self) -> str:
        return f"LoadedKernel({self.name}, args={self.args})"


def _reference_launch(payload: str) -> Launch:
    kernel = from_json(payload)

    def launch(buffers: Any, sizes: Any) -> None:
        run_kernel(kernel, dict(buffers), sizes)

    return launch


#: The fields of a kernel's envelope in generated code (written by ``_torch.bridge.emit_kernel``).
_ENVELOPE = {"name": str, "kind": str, "backend": str, "args": list, "symbols": list, "payload": str}


def _envelope(text: str) -> dict[str, Any]:
    try:
        env = json.loads(text)
    except (ValueError, TypeError, RecursionError) as exc:
        raise FormatError(f"kernel envelope: not JSON ({exc})") from None
    if not isinstance(env, dict) or set(env) != set(_ENVELOPE):
        raise FormatError(f"kernel envelope: expected an object with {', '.join(_ENVELOPE)}")
    for key, kind in _ENVELOPE.items():
        if not isinstance(env[key], kind) or (kind is list and not all(isinstance(x, str) for x in env[key])):
            raise FormatError(f"kernel envelope: {key} must be {'a list of names' if kind is list else 'text'}")
    if env["kind"] not in ("device", "reference"):
        raise FormatError(f"kernel envelope: kind must be 'device' or 'reference', got {env['kind']!r:.40}")
    return env


def load_kernel(device: str, envelope: str) -> LoadedKernel:
    """Load one kernel of a generated program (see ``_torch.bridge.emit_kernel``).
    A malformed envelope raises :class:`~spyre_shims.jsonform.FormatError`."""
    env = _envelope(envelope)
    count("kernels_loaded")
    if env["kind"] == "reference":
        launch = _reference_launch(env["payload"])
    else:
        launch = _backend(device, env["backend"]).load(env["payload"])
    return LoadedKernel(env["name"], env["args"], env["symbols"], launch)


def graph_loaded(device: str, ref: str, graph_json: str) -> None:
    """Announce a compiled graph to its backend (fresh compile or cache hit)."""
    graph = from_json(graph_json)
    count("graphs_loaded")
    for what in graph.fallbacks:
        warn_fallback(f"{device}: {what}")
    with _lock:
        for sink in _captures:
            sink.append(graph)
    _backend(device, ref).on_graph(graph)


@contextmanager
def capture_graphs() -> Iterator[list[GraphIR]]:
    """Collect the :class:`GraphIR` of every graph compiled or loaded inside."""
    sink: list[GraphIR] = []
    with _lock:
        _captures.append(sink)
    try:
        yield sink
    finally:
        with _lock:
            _captures.remove(sink)
