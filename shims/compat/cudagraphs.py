"""CUDA graphs: Inductor's cudagraph trees and the checks Dynamo's cudagraphs backend runs before recording one.

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
    'cudagraphify_impl',
    'reset_cudagraph_trees',
    'get_manager',
    'BoxedDeviceIndex',
    'get_placeholder_info',
    'CheckInvariantStatus',
    'CudagraphCachedInfo',
    'FunctionID',
    'PlaceholderInfo',
    'WrappedFunction',
    'check_for_mutation',
    'check_lowering_disable_cudagraph',
    'check_multiple_devices_or_any_cpu_nodes',
    'format_default_skip_message',
    'get_mutating_use_stack_trace',
    'get_mutating_use_stack_trace_from_node',
    'get_mutation_stack_trace',
    'get_placeholder_stack_trace',
    'log_cudagraph_skip_and_bump_counter',
    'log_data_ptr_mismatch',
    'maybe_warning_due_to_dynamic_shape',
    'to_placeholder_info',
    'AliasesNewOutput',
    'AliasesPriorGraphOutput',
    'AllocatorState',
    'CUDAGraphNode',
    'CUDAGraphTreeManager',
    'CUDAWarmupNode',
    'CompilationMode',
    'ExecutionState',
    'GraphID',
    'MarkStepBox',
    'OutputAliasInfo',
    'StorageWeakRefWrapper',
    'TreeManagerContainer',
    'check_memory_pool',
    'clear_cublas_manager',
    'clear_cublass_cache',
    'cudagraphify',
    'disable_conv_cache_emptying',
    'enable_history_recording',
    'format_tb',
    'get_block_addrs',
    'get_container',
    'get_cudagraph_segments',
    'get_history_recording',
    'get_obj',
    'is_live',
    'map_to_ref',
    'mark_step_begin',
    'maybe_deref',
]


def __getattr__(name: str) -> Any:
    return _resolve(__name__, name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
