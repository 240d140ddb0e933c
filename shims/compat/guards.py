"""Dynamo guards and sources: what a compiled frame is checked against, and where each guarded value comes from.

Tier 2 of the stable API (``spyre_shims.compat``): the names below are
Dynamo's own objects on the installed release (classes keep ``isinstance``
and subclassing), resolved on first access from the per-release table
generated from the release wheels (``surface/compat_table.json``). Where a
release moved or renamed one, the table points at its home there. Their
members are Dynamo's and are not promised; the names are, on every release
2.6 - 2.15. ``GuardBuilder`` is served by :mod:`spyre_shims.compat.dynamo`.
"""

from __future__ import annotations

from typing import Any

from ._lazy import resolve as _resolve

__all__ = [
    'Guard',
    'Source',
    'GuardSource',
    'CheckFunctionManager',
    'DeletedGuardManagerWrapper',
    'GuardCodeList',
    'GuardManagerType',
    'GuardManagerWrapper',
    'NNModuleAttrAccessorInfo',
    'PyExprCSEPass',
    'build_guard_function',
    'convert_to_concrete_values',
    'from_numpy',
    'get_key_index',
    'get_key_index_source',
    'get_verbose_code_part',
    'get_verbose_code_parts',
    'getitem_on_dict_manager',
    'guard_error_hook',
    'install_guard',
    'is_recompiles_enabled',
    'is_recompiles_verbose_enabled',
    'make_dupe_guard',
    'match_on_id_for_tensor',
    'must_add_nn_module_guards',
    'recompilation_reason_for_no_tensor_aliasing_guard',
    'uninteresting_files',
    'unique',
    'AttrProxySource',
    'AttrSource',
    'BackwardStateSource',
    'CallFunctionNoArgsSource',
    'CallMethodItemSource',
    'ConstDictKeySource',
    'ConstantSource',
    'ConvertIntSource',
    'DefaultsSource',
    'EphemeralSource',
    'FSDPNNModuleSource',
    'FlattenScriptObjectSource',
    'FloatTensorSource',
    'GetItemSource',
    'GlobalSource',
    'GlobalStateSource',
    'GlobalWeakRefSource',
    'GradSource',
    'LocalCellSource',
    'LocalSource',
    'NNModuleSource',
    'NegateSource',
    'NumpyTensorSource',
    'OptimizerSource',
    'ParamBufferSource',
    'RandomValueSource',
    'ScriptObjectQualifiedNameSource',
    'ShapeEnvSource',
    'SubclassAttrListSource',
    'SyntheticLocalSource',
    'TensorProperty',
    'TensorPropertySource',
    'TorchFunctionModeStackSource',
    'TupleIteratorGetItemSource',
    'TypeSource',
    'UnspecializedBuiltinNNModuleSource',
    'UnspecializedNNModuleSource',
    'UnspecializedParamBufferSource',
    'WeakRefCallSource',
    'is_constant_source',
    'is_from_defaults',
    'is_from_flatten_script_object_source',
    'is_from_local_source',
    'is_from_optimizer_source',
    'is_from_unspecialized_param_buffer_source',
]


def __getattr__(name: str) -> Any:
    return _resolve(__name__, name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
