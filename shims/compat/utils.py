"""Inductor helpers device backends share.

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
    'get_dtype_size',
    'decode_device',
    'is_gpu',
    'get_gpu_type',
    'use_triton_template',
    'run_and_get_code',
    'is_dynamic',
    'unique',
    'get_device_tflops',
    'parallel_num_threads',
    'metrics',
    'LoweringException',
    'has_free_symbols',
    'triton_type',
    'upcast_compute_type',
    'expr_fits_within_32bit',
    'do_bench_using_profiling',
    'is_same_tensor',
    'BoxedBool',
    'CachedMethod',
    'DebugDirManager',
    'DelayReplaceLine',
    'FakeIndentedBuffer',
    'OpDtypeRule',
    'add_scheduler_init_hook',
    'aggregate_origins',
    'align',
    'any_is_symbolic',
    'argsort',
    'argsort_sym',
    'boolean_ops',
    'buf_name_to_fused_snode',
    'clone_preserve_strides',
    'cmp',
    'collect_defined_kernels',
    'contains_collective',
    'contains_wait',
    'copy_misaligned_inputs',
    'count_tangents',
    'developer_warning',
    'device_need_guard',
    'dominated_nodes',
    'dump_node_schedule',
    'find_recursive_deps_of_node',
    'find_recursive_users_of_node',
    'gather_origins',
    'gen_gm_and_inputs',
    'generate_assert',
    'get_backend_num_stages',
    'get_benchmark_name',
    'get_cloned_parameter_buffer_name',
    'get_code',
    'get_donated_idxs',
    'get_first_incompatible_cudagraph_node',
    'get_gpu_dram_gbps',
    'get_gpu_shared_memory',
    'get_sympy_Expr_dtype',
    'get_triton_code',
    'has_torchvision_roi_align',
    'ir_dataclass',
    'is_big_gpu',
    'is_collective',
    'is_cpu_device',
    'is_fallback_op',
    'is_ones',
    'is_pointwise_use',
    'is_same_mkldnn_tensor',
    'is_symbolic',
    'is_view',
    'is_wait',
    'is_windows',
    'is_zeros',
    'maybe_get_suppress_shape_guards_ctx',
    'maybe_profile',
    'needs_fallback_due_to_atomic_add_limitations',
    'normalize_name',
    'num_fw_fixed_arguments',
    'output_node',
    'override_lowering',
    'pad_listlike',
    'pass_execution_and_save',
    'precompute_method',
    'precompute_methods',
    'reduction_num_outputs',
    'register_op_dtype_propagation_rules',
    'remove_unaligned_input_idxs',
    'run_and_get_cpp_code',
    'run_and_get_graph_lowering',
    'run_and_get_triton_code',
    'run_fw_bw_and_get_code',
    'set_tracing_context_output_strides',
    'shape_env_from_inputs',
    'should_assume_input_aligned',
    'should_use_remote_fx_graph_cache',
    'synchronize',
    'tensor_is_aligned',
    'timed',
    'triton_type_to_torch',
    'try_import_ck_lib',
    'tuple_sorted',
    'use_aten_gemm_kernels',
    'use_ck_conv_template',
    'use_ck_gemm_template',
    'use_ck_template',
    'use_cpp_bmm_template',
    'use_cpp_gemm_template',
    'use_cutlass_template',
    'use_scatter_fallback',
]


def __getattr__(name: str) -> Any:
    return _resolve(__name__, name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
