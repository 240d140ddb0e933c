"""Inductor's compile entry points.

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
    'compile_fx',
    'compile_fx_inner',
    'clone_preserve_strides',
    'aoti_compile_and_package',
    'aoti_load_package',
    'FxCompile',
    'compile_fx_aot',
    'cudagraphify',
    'cudagraphify_impl',
    'fake_tensor_prop',
    'fx_codegen_and_compile',
    'get_cpp_wrapper_config',
    'get_cuda_device_context',
    'get_input_idxs_to_check',
    'get_patched_config_dict',
    'get_static_input_idxs',
    'graph_returns_tuple',
    'handle_dynamo_export_graph',
    'index_expanded_dims_and_copy_',
    'is_tf32_warning_applicable',
    'make_graph_return_tuple',
    'maybe_disable_comprehensive_padding',
    'record_original_output_strides',
    'split_const_gm',
    'static_input',
    'with_fresh_cache_if_config',
    'CompiledAOTI',
    'CompiledFxGraph',
    'CompiledFxGraphConstants',
    'CompiledFxGraphConstantsWithGm',
    'MockFXGraphCacheOutput',
    'OutputCode',
    'get_expanded_dims',
    'index_expanded_dims',
]


def __getattr__(name: str) -> Any:
    return _resolve(__name__, name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
