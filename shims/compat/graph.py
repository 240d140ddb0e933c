"""The graph being lowered and the virtualized context: `V.graph`, `V.ops`, `V.kernel`.

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
    'V',
    'ops',
    'OpsValue',
    'OpsWrapper',
    'NullHandler',
    'GraphLowering',
    'LoopBody',
    'MemoryUsageType',
    'NullKernelHandler',
    'Virtualized',
    'SubgraphLowering',
    'get_user_visible_output_strides',
    'getattr_recursive',
    'log_module_code',
    'mark_nodes_dislike_padding',
    'may_get_constant_buffer_dtype',
    'CountOps',
    'InterpreterShim',
    'LightTracer',
    'LoopBodyBlock',
    'MemoryEntry',
]


def __getattr__(name: str) -> Any:
    return _resolve(__name__, name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
