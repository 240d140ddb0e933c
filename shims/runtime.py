"""Run-time entry points called by Inductor's generated host code.

Generated code is self-contained: each kernel's payload is embedded in it, so a
program loaded from Inductor's cache in a fresh process works without the
compile-time state (the backend is imported from its recorded reference).
"""

from __future__ import annotations

import importlib
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch

from . import index as _index
from .backend import Backend, Launch, get_backend, register_backend, warn_fallback
from .device import host_flat
from ._torch.dispatch import outside_dispatch_modes
from .kernel_ir import GraphIR, from_json

__all__ = ["load_kernel", "graph_loaded", "capture_graphs", "LoadedKernel", "stats", "reset_compiled"]

_lock = threading.Lock()
_captures: list[list[GraphIR]] = []
_stats = {"kernels_compiled": 0, "kernels_loaded": 0, "graphs_loaded": 0}


def stats() -> dict[str, int]:
    """Process-wide counters: kernels compiled by a backend, kernels and graphs
    loaded from generated code (a cache hit loads without compiling)."""
    return dict(_stats)


def count(key: str) -> None:
    """Increment a counter of :func:`stats`."""
    with _lock:
        _stats[key] += 1


def reset_compiled() -> None:
    """Forget every compiled graph (``torch.compile`` recompiles on next call)."""
    from ._torch.inductor import reset_dynamo

    reset_dynamo()


def _backend(device: str, ref: str) -> Backend:
    backend = get_backend(device)
    if backend is None:
        mod, _, attr = ref.partition(":")
        obj: Any = importlib.import_module(mod)
        for part in attr.split("."):
            obj = getattr(obj, part)
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
    from .reference import run_kernel

    kernel = from_json(payload)

    def launch(buffers: Any, sizes: Any) -> None:
        run_kernel(kernel, dict(buffers), sizes)

    return launch


def load_kernel(device: str, envelope: str) -> LoadedKernel:
    """Load one kernel of a generated program (see ``bridge.emit``)."""
    env = json.loads(envelope)
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
