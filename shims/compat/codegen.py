"""Codegen pieces: kernel and scheduling base classes, CSE, argument kinds, printers, wrapper codegen, device registration.

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

from .._torch import inductor as _inductor
from ._lazy import resolve as _resolve

__all__ = [
    'Kernel',
    'KernelArgs',
    'KernelArgType',
    'SizeArg',
    'TensorArg',
    'WorkspaceArg',
    'InplacedBuffer',
    'CSE',
    'CSEVariable',
    'DeferredLine',
    'BackendFeature',
    'DeviceOpOverrides',
    'PythonPrinter',
    'CodeGen',
    'KernelTemplate',
    'DTYPE_TO_COMPUTATION_DTYPE',
    'boolean_ops',
    'index_prevent_reordering',
    'get_device_op_overrides',
    'get_scheduling_for_device',
    'get_wrapper_codegen_for_device',
    'init_backend_registration',
    'DeferredLineBase',
    'IndentedBuffer',
    'ScopedDict',
    'Placeholder',
    'cache_on_self',
    'get_kernel_metadata',
    'get_fused_kernel_name',
    'is_welford_reduction',
    'get_bounds_index_expr',
    'SIMDKernel',
    'SIMDScheduling',
    'IterationRangesEntry',
    'IterationRangesRoot',
    'constant_repr',
    'TritonKernel',
    'TritonScheduling',
    'TritonOverrides',
    'TritonCSEVariable',
    'TritonPrinter',
    'texpr',
    'CppScheduling',
    'CppKernel',
    'CppOverrides',
    'CppPrinter',
    'cexpr',
    'PythonWrapperCodegen',
    'SubgraphPythonWrapperCodegen',
    'WrapperLine',
    'SymbolicCallArg',
    'pexpr',
    'CppWrapperCpu',
    'CppWrapperGpu',
    'config_of',
    'signature_to_meta',
    'signature_of',
    'DeviceInterface',
    'get_registered_device_interfaces',
    'DeviceProperties',
    'TileHint',
    'BracesBuffer',
    'OptimizationContext',
    'DataTypePropagation',
    'WorkspaceZeroMode',
    'DTYPE_TO_CPP',
    'IterationRanges',
    'SIMDKernelFeatures',
    'MemoryPlanningLine',
    'BufferLike',
    'DeviceCodegen',
    'OverridesData',
    'TMADescriptorArg',
    'data_type_logger',
    'deduce_output_dtype_by_name',
    'get_backend_features',
    'has_backend_feature',
    'jinja2_env',
    'AllocateLine',
    'EnterDeviceContextManagerLine',
    'EnterSubgraphLine',
    'ExitDeviceContextManagerLine',
    'ExitSubgraphLine',
    'FreeIfNotReusedLine',
    'MemoryPlanningState',
    'NullLine',
    'ReuseLine',
    'buffer_reuse_key',
    'user_defined_kernel_grid_fn_code',
    'user_defined_triton_kernel_transitive_closure_source_code',
    'CpuDeviceProperties',
    'CpuInterface',
    'CudaInterface',
    'DeviceGuard',
    'XpuInterface',
    'init_device_reg',
    'register_backend_for_device',
    'register_device_op_overrides',
    'register_interface_for_device',
    'get_interface_for_device',
]


def __getattr__(name: str) -> Any:
    return _resolve(__name__, name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


def register_backend_for_device(
    device: str,
    scheduling: Any,
    wrapper: Any,
    *,
    cpp_wrapper: Any = None,
    fx_wrapper: Any = None,
    custom_pass: Any = None,
    custom_config: Any = None,
) -> None:
    """Register Inductor's scheduling and wrapper codegen for ``device``.

    The optional arguments go to Inductor by keyword (2.9 inserted
    ``device_fx_wrapper_codegen`` before ``device_custom_pass``), and only those
    that are not ``None``. Raises
    :class:`~spyre_shims.errors.UnsupportedTorchError` naming the argument when
    the installed release has no such parameter (``custom_pass`` before 2.8,
    ``fx_wrapper`` and ``custom_config`` before 2.9).
    """
    options = {"cpp_wrapper": cpp_wrapper, "fx_wrapper": fx_wrapper,
               "custom_pass": custom_pass, "custom_config": custom_config}
    _inductor.compat_register_backend(device, scheduling, wrapper, options)


def register_device_op_overrides(device: str, overrides: Any) -> None:
    """Register a ``DeviceOpOverrides`` instance for ``device``."""
    _inductor.compat_register_op_overrides(device, overrides)


def register_interface_for_device(device: str, interface: Any) -> None:
    """Register a ``DeviceInterface`` subclass for ``device`` with Dynamo."""
    _inductor.compat_register_interface(device, interface)


def get_interface_for_device(device: str) -> type:
    """The ``DeviceInterface`` subclass registered for ``device``."""
    interface: type = _inductor.compat_get_interface(device)
    return interface
