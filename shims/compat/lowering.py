"""Lowerings and decompositions: the tables Inductor lowers aten ops with, and the helpers lowerings are written with.

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
    'register_lowering',
    'lowerings',
    'fallbacks',
    'fallback_handler',
    'make_fallback',
    'add_needs_realized_inputs',
    'needs_realized_inputs',
    'clone',
    'to_dtype',
    'expand',
    'view',
    'permute',
    'squeeze',
    'full',
    'empty_strided',
    'sum_',
    'get_promoted_dtype',
    'is_boolean_type',
    'decompositions',
    'select_decomp_table',
    'register_decomposition',
    'fast_random_decomps',
    'constant_pad_nd',
    'copy',
    'slice_',
    'make_pointwise',
]


def __getattr__(name: str) -> Any:
    return _resolve(__name__, name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


def make_pointwise(
    fn: Any,
    override_return_dtype: Any = None,
    override_device: Any = None,
    override_fn_when_input_bool: Any = None,
    allow_alpha: bool = False,
    triton_fallback: Any = None,
) -> Any:
    """Inductor's ``make_pointwise``: a lowering that applies ``fn`` elementwise.

    2.8 removed ``override_fn_when_gpu_float64``, which shifted the positional
    order of the later parameters; these are passed by keyword so one call works
    on every release.
    """
    return _inductor.compat_make_pointwise(
        fn, override_return_dtype=override_return_dtype, override_device=override_device,
        override_fn_when_input_bool=override_fn_when_input_bool, allow_alpha=allow_alpha,
        triton_fallback=triton_fallback)
