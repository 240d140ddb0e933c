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
]


def __getattr__(name: str) -> Any:
    return _resolve(__name__, name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
