"""AOTAutograd: the entry points a Dynamo backend compiles its graphs with, boxed compilers, partitioners.

Tier 2 of the stable API (``spyre_shims.compat``): what an out-of-tree Dynamo
backend takes from ``torch._functorch`` (``functorch.compile``): wrapping its
compiler with :func:`aot_module_simplified` (or Dynamo's ``aot_autograd``, in
:mod:`spyre_shims.compat.dynamo`), boxing it (``make_boxed_func``,
``make_boxed_compiler``), choosing a partitioner (``default_partition``,
``min_cut_rematerialization_partition``). The names below are AOTAutograd's own
objects on the installed release, resolved on first access from the per-release
table generated from the release wheels (``surface/compat_table.json``); where a
release moved one (``make_boxed_func`` into ``torch._functorch._aot_autograd.utils``
...), the table points at its home there. Their members are AOTAutograd's and are
not promised; the names are, on every release 2.6 - 2.15.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .._torch import aot as _aot
from ._lazy import resolve as _resolve

__all__ = [
    'aot_function',
    'aot_module',
    'aot_export_module',
    'aot_export_joint_simple',
    'make_boxed_func',
    'make_boxed_compiler',
    'get_aot_graph_name',
    'get_graph_being_compiled',
    'get_aot_compilation_context',
    'AOTConfig',
    'ViewAndMutationMeta',
    'SerializableAOTDispatchCompiler',
    'default_partition',
    'min_cut_rematerialization_partition',
    'nop',
    'default_decompositions',
    'InvalidNodeBase',
    'MinCutOptions',
    'NodeInfo',
    'OpTypes',
    'choose_saved_values_set',
    'draw_graph',
    'estimate_runtime',
    'functionalize_rng_ops',
    'get_default_op_list',
    'get_name_to_node',
    'has_recomputable_ops',
    'has_recomputable_rng_ops',
    'must_recompute',
    'pointwise_ops',
    'reordering_to_mimic_autograd_engine',
    'solve_min_cut',
    'sort_depths',
    'sym_node_size',
    'visualize_min_cut_graph',
    'DebugInterpreter',
    'debug_compile',
    'debug_nop',
    'draw_graph_compile',
    'get_inputs',
    'graph_dumper_aot',
    'memory_efficient_fusion',
    'nnc_jit',
    'print_compile',
    'simple_ts_compile',
    'ts_compile',
    'aot_module_simplified',
]


def __getattr__(name: str) -> Any:
    return _resolve(__name__, name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


def aot_module_simplified(mod: Any, args: Any, fw_compiler: Callable[..., Any],
                          bw_compiler: Callable[..., Any] | None = None, partition_fn: Callable[..., Any] | None = None,
                          decompositions: dict[Any, Any] | None = None,
                          keep_inference_input_mutations: bool = False,
                          inference_compiler: Callable[..., Any] | None = None, **options: Any) -> Any:
    """Trace ``mod`` (an FX graph module) with AOTAutograd and compile its forward
    (and backward) graphs with ``fw_compiler`` / ``bw_compiler``; returns the
    compiled callable a Dynamo backend returns.

    The parameters above are AOTAutograd's on every release 2.6 - 2.15; a
    parameter left ``None`` keeps the installed release's default
    (``partition_fn``: ``default_partition``). 2.12 replaced the keywords after
    ``inference_compiler`` (``cudagraphs`` and ``boxed_forward_device_index``
    became ``compiler_config_extra``): those are Inductor's business and go, in
    ``options``, to the installed release's function unchanged, so only pass the
    ones it has.
    """
    return _aot.aot_module_simplified(mod, args, fw_compiler, bw_compiler=bw_compiler, partition_fn=partition_fn,
                                      decompositions=decompositions,
                                      keep_inference_input_mutations=keep_inference_input_mutations,
                                      inference_compiler=inference_compiler, **options)
