"""IR nodes, buffers, layouts and views (Inductor's own classes: `isinstance` and subclassing work).

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
    'IRNode',
    'Operation',
    'Buffer',
    'ComputedBuffer',
    'InputBuffer',
    'ConstantBuffer',
    'TensorBox',
    'StorageBox',
    'MutableBox',
    'Loops',
    'Pointwise',
    'Reduction',
    'WelfordReduction',
    'Scatter',
    'Scan',
    'Sort',
    'FallbackKernel',
    'ExternKernel',
    'ExternKernelOut',
    'ExternKernelAlloc',
    'MultiOutput',
    'MultiOutputLayout',
    'ConcatKernel',
    'InputsKernel',
    'TemplateBuffer',
    'TritonTemplateBuffer',
    'MutationOutput',
    'ShapeAsConstantBuffer',
    'Subgraph',
    'Layout',
    'FixedLayout',
    'FlexibleLayout',
    'NoneLayout',
    'MutationLayoutSHOULDREMOVE',
    'NonOwningLayout',
    'CommBufferLayout',
    'OutputSpec',
    'BaseView',
    'View',
    'ReinterpretView',
    'ExpandView',
    'PermuteView',
    'SqueezeView',
    'SliceView',
    'GenericView',
    'DtypeView',
    'IndexingConstant',
    'Constant',
    'ReductionHint',
    'ChoiceCaller',
    'ir_dataclass',
    'get_reduction_combine_fn',
    'ops_wrapper',
    'is_triton',
    'is_cpu',
    'get_device_type',
    'is_storage_and_layout',
    'as_storage_and_layout',
    'IndexPutFallback',
    'ScatterFallback',
    'MultiTemplateBuffer',
    'UserDefinedTritonKernel',
    'get_stride_order',
    'stride_order2fill_order',
    'is_contiguous_strides_for_shape',
    'fuse_reindexing',
    'same_reorder',
    'AssertScalar',
    'BaseConstant',
    'CommBufferType',
    'ComplexView',
    'CppTemplateBuffer',
    'DeviceCopy',
    'DonatedBuffer',
    'DynamicScalar',
    'EffectfulKernel',
    'ExternKernelNode',
    'InplaceBernoulliFallback',
    'InplaceCopyFallback',
    'InvokeSubgraph',
    'MutatingFirstArgExternKernel',
    'NoneAsConstantBuffer',
    'NopKernel',
    'OperationBuffer',
    'RandomSeeds',
    'ResizeStorageBytes',
    'SetSourceTensorKernel',
    'SplitScan',
    'TMADescriptor',
    'TorchBindObject',
    'TritonTemplateCallerBase',
    'WhileLoop',
    'get_align_for_dtype',
    'get_fill_order',
    'inverse_reorder',
    'is_contiguous_storage_and_layout',
    'is_stride_order_storage_and_layout',
    'may_convert_to_optional',
    'maybe_free_unbacked_symbols',
    'nop_loader_fn',
    'validate_ir',
]


def __getattr__(name: str) -> Any:
    return _resolve(__name__, name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
