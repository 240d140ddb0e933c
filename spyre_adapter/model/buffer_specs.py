"""Buffer specs for Kernel IR written in code (the hand-written attention
kernel, the benchmark's kernels, tests): a contiguous tensor's layout."""

from __future__ import annotations

from collections.abc import Sequence

import sympy

from spyre_shims import kernel_ir as kir

__all__ = ["contiguous_buffer"]


def contiguous_buffer(name: str, shape: Sequence[int], dtype: str = "float16", role: str = "input") -> kir.BufferSpec:
    """The spec of a contiguous buffer ``name`` of ``shape`` (row-major strides, offset 0)."""
    stride, acc = [], 1
    for n in reversed(shape):
        stride.insert(0, acc)
        acc *= n
    return kir.BufferSpec(name, dtype, tuple(map(sympy.Integer, shape)), tuple(map(sympy.Integer, stride)),
                          sympy.Integer(0), sympy.Integer(acc), role)  # type: ignore[arg-type]
