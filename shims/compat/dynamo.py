"""Dynamo: graph capture controls, backends registry, counters and guards.

Tier 2 of the stable API (``spyre_shims.compat``): the names below are
Inductor's own objects on the installed release (classes keep ``isinstance``
and subclassing), resolved on first access from the per-release table
generated from the release wheels (``surface/compat_table.json``). Where a
release moved or renamed one, the table points at its home there. Their
members are Inductor's and are not promised; the names are, on every release
2.6 - 2.15.
"""

from __future__ import annotations

from typing import Any

from ._lazy import resolve as _resolve

__all__ = [
    'allow_in_graph',
    'disable',
    'reset',
    'mark_dynamic',
    'mark_static',
    'optimize',
    'counters',
    'get_debug_dir',
    'detect_fake_mode',
    'register_backend',
    'lookup_backend',
    'aot_autograd',
    'fake_tensor_unsupported',
    'OptimizedModule',
    'GuardBuilder',
    'identity',
    'preserve_rng_state',
    'TensorifyState',
    'assume_constant_result',
    'disallow_in_graph',
    'explain',
    'forbid_in_graph',
    'graph_break',
    'is_compiling',
    'is_dynamo_supported',
    'is_inductor_supported',
    'list_backends',
    'mark_static_address',
    'maybe_mark_dynamic',
    'on_compile_end',
    'on_compile_start',
    'replay',
    'reset_code_caches',
    'reset_code_state',
    'reset_frame_count',
    'run',
    'set_stance',
    'substitute_in_graph',
]


def __getattr__(name: str) -> Any:
    return _resolve(__name__, name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
