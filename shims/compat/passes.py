"""FX passes: the pattern matcher, Inductor's post-grad and joint-graph pattern tables, custom graph passes.

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
    'PatternMatcherPass',
    'register_graph_pattern',
    'register_replacement',
    'register_lowering_pattern',
    'gen_register_replacement',
    'CallFunction',
    'CallFunctionVarArgs',
    'CallMethod',
    'Arg',
    'KeywordArg',
    'Ignored',
    'ListOf',
    'Match',
    'MultiOutputPattern',
    'PatternExpr',
    'fwd_only',
    'joint_fwd_bwd',
    'init_once_fakemode',
    'stable_topological_sort',
    'CustomGraphPass',
    'get_hash_for_files',
    'post_grad_patterns',
    'joint_graph_patterns',
    'get_fake_args_kwargs',
    'FakeTensorUpdater',
    'ConstantFolder',
    'constant_fold',
    'ConstructorMoverPass',
    'decompose_auto_functionalized',
    'CallMethodVarArgs',
    'CallModule',
    'CallModuleVarArgs',
    'ExclusiveKeywordArg',
    'FailedMatch',
    'GraphPatternEntry',
    'LoweringPatternEntry',
    'MatchContext',
    'Multiple',
    'PatternEntry',
    'PatternPrettyPrinter',
    'RepeatedExpr',
    'ReplaceFn',
    'ReplacementPatternEntry',
    'SearchFn',
    'TraceFn',
    'clone_graph',
    'compute_mutation_region_ids',
    'config_flag',
    'extract_target',
    'filter_nodes',
    'fixme_incorrect_inductor_schema_op',
    'fx_to_pattern',
    'gen_pattern',
    'get_arg_value',
    'get_mutation_region_id',
    'is_match',
    'is_mutation_op',
    'is_start_of_fx_graph',
    'log_trace_failure',
    'same_mutation_regions',
    'should_compute_mutation_region_ids',
]


def __getattr__(name: str) -> Any:
    return _resolve(__name__, name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
