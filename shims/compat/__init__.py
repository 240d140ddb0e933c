"""Tier 2 of the stable API: the Inductor extension points existing device backends use.

A backend that drives Inductor directly (its own scheduling, layout passes, ops
handlers, FX passes, lowerings, config) imports Inductor's names from these
modules instead of ``torch._inductor`` / ``torch._dynamo``; each name resolves
to what the installed release calls it, so one source tree runs on every release
2.6 - 2.15. ``spyre-adapter migrate`` rewrites direct imports onto them. Dynamo
backends (``torch._dynamo`` registration, ``torch._functorch`` AOTAutograd) have
their modules here too.

| module | extension point |
|---|---|
| :mod:`~spyre_shims.compat.graph` | the graph being lowered, ``V`` (``V.graph``, ``V.ops``, ``V.kernel``), ``LoopBody`` |
| :mod:`~spyre_shims.compat.ir` | IR nodes, buffers, layouts (mutation layouts included), views |
| :mod:`~spyre_shims.compat.deps` | ``MemoryDep`` and the other dependencies, read/write sets |
| :mod:`~spyre_shims.compat.sched` | the scheduler, its nodes, ``BaseScheduling``, ``InductorChoices`` |
| :mod:`~spyre_shims.compat.ops_handlers` | ``WrapperHandler``, ``DefaultHandler``, ``MockHandler``, ``OpOverrides`` |
| :mod:`~spyre_shims.compat.codegen` | kernel and scheduling base classes, CSE, printers, wrapper codegen, device registration |
| :mod:`~spyre_shims.compat.lowering` | lowering and decomposition tables and helpers |
| :mod:`~spyre_shims.compat.passes` | the pattern matcher, post-grad / joint-graph patterns, ``CustomGraphPass`` |
| :mod:`~spyre_shims.compat.config` | Inductor and Dynamo config, validated patching |
| :mod:`~spyre_shims.compat.caches` | ``code_hash``, the cache folder, code caches |
| :mod:`~spyre_shims.compat.autotune` | ``AsyncCompile``, ``select_algorithm``, kernel templates |
| :mod:`~spyre_shims.compat.compiler` | ``compile_fx`` and its inner entry point, what it returns (``OutputCode``) |
| :mod:`~spyre_shims.compat.sizevars` | the size-variable allocator, sympy helpers, version-normalised sizevars queries |
| :mod:`~spyre_shims.compat.dynamo` | ``allow_in_graph``, backend registration and helpers (``register_backend``, ``aot_autograd``), counters, Dynamo's utils and exceptions |
| :mod:`~spyre_shims.compat.aot` | AOTAutograd's entry points: ``aot_module_simplified``, boxed compilers, partitioners |
| :mod:`~spyre_shims.compat.guards` | Dynamo guards and sources |
| :mod:`~spyre_shims.compat.cudagraphs` | Inductor's cudagraph trees and the checks before recording one |
| :mod:`~spyre_shims.compat.utils` | helpers device backends share |

Classes are Inductor's own (``isinstance`` and subclassing work); functions are
Inductor's unless a release changed their signature or name, then the module
defines a stable one. Each module's ``__all__`` lists exactly what it serves;
where each name lives in each release is generated from the release wheels
(``surface/compat_table.json``). A name that cannot be resolved raises
:class:`~spyre_shims.errors.UnsupportedTorchError` naming it.

This package also keeps its first, flat names (``spyre_shims.compat.IndentedBuffer``,
``size_hint``, ``inductor_config`` ...): each is the same object as in its module.
Functions taking ``sizevars=None`` use the sizes of the graph being lowered
(``V.graph.sizevars``); concrete integers need no graph.
"""

from __future__ import annotations

from typing import Any

from .._torch import compat_api as _compat_api
from .codegen import (get_interface_for_device, register_backend_for_device, register_device_op_overrides,
                      register_interface_for_device)
from .config import inductor_config
from .sizevars import check_equals, free_unbacked_symbols, guard_int, size_hint, size_hint_or_throw

__all__ = [
    "PythonWrapperCodegen",
    "IndentedBuffer",
    "LoopBody",
    "BaseScheduling",
    "DeviceOpOverrides",
    "DeviceInterface",
    "register_backend_for_device",
    "register_device_op_overrides",
    "register_interface_for_device",
    "get_interface_for_device",
    "size_hint",
    "size_hint_or_throw",
    "check_equals",
    "guard_int",
    "free_unbacked_symbols",
    "inductor_config",
]

#: flat class name -> the module that serves it
_FLAT: dict[str, str] = {
    "PythonWrapperCodegen": "codegen",
    "IndentedBuffer": "codegen",
    "LoopBody": "graph",
    "BaseScheduling": "sched",
    "DeviceOpOverrides": "codegen",
    "DeviceInterface": "codegen",
}


def __getattr__(name: str) -> Any:
    module = _FLAT.get(name)
    if module is not None:
        return _compat_api.resolve(module, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_FLAT))
