"""Async compilation, algorithm selection and kernel templates.

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
    'AsyncCompile',
    'autotune_select_algorithm',
    'AlgorithmSelectorCache',
    'ExternKernelChoice',
    'TritonTemplate',
    'TritonTemplateCaller',
    'TritonTemplateKernel',
    'PartialRender',
    'mm_args',
    'TensorMeta',
    'after_fork',
    'caching_device_properties',
    'get_compile_threads',
    'pre_fork_setup',
    'shutdown_compile_workers',
    'AutotuneArgs',
    'BenchmarkTensors',
    'DataProcessorChoiceCallerWrapper',
    'DataProcessorTemplateWrapper',
    'ErrorFromChoice',
    'ExternKernelCaller',
    'KernelNamespace',
    'ModificationWrapper',
    'NoValidChoicesError',
    'add_feedback_saver',
    'append_to_log',
    'create_inputs_key',
    'create_precompile_key',
    'get_mm_log_filename',
    'realize_inputs',
]


def __getattr__(name: str) -> Any:
    return _resolve(__name__, name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
