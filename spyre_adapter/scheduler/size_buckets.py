"""Run-time sizes grouped into buckets, and what a planner chose per bucket.

A decode loop's KV length changes every token. A planner chooses its work
division once per bucket (each size rounded up to a power of two), planning the
kernel at the bucket's sizes with every check, and builds that choice for each
exact size; the program is still built, checked and timed for those sizes -
unless a size template (:mod:`.size_templates`) made from the bucket's programs
covers them: then the program is bound, not built.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from typing import Generic, TypeVar

import sympy

from spyre_shims.reference import KernelFault

from spyre_adapter.model.errors import DoesNotFit

__all__ = ["size_bucket", "bucket_of", "BucketChoices"]

T = TypeVar("T")


def size_bucket(sizes: Mapping[sympy.Symbol, int]) -> dict[sympy.Symbol, int]:
    """Run-time sizes rounded up to powers of two: the range a division is chosen for."""
    return {k: 1 << (v - 1).bit_length() if v > 0 else v for k, v in sizes.items()}


def bucket_of(sizes: Mapping[sympy.Symbol, int]) -> dict[sympy.Symbol, int] | None:
    """The bucket of ``sizes`` when it differs from them (None: no sizes, or they
    are a bucket's own, and the planner chooses at them directly)."""
    bucket = size_bucket(sizes)
    return bucket if bucket != dict(sizes) else None


class BucketChoices(Generic[T]):
    """What a planner chose at each bucket (None: nothing fits there), computed
    once per key; bounded (cleared when full)."""

    def __init__(self, limit: int = 1 << 12) -> None:
        self._limit = limit
        self._choices: dict[Hashable, T | None] = {}

    def get(self, key: Hashable, plan_at_bucket: Callable[[], T | None]) -> T | None:
        """The choice for ``key``; ``plan_at_bucket`` runs on a miss. A bucket whose
        rounded-up sizes do not fit, or break an index (sizes rounded up
        independently), has no choice: the exact sizes are planned instead."""
        if key not in self._choices:
            if len(self._choices) >= self._limit:
                self._choices.clear()
            try:
                self._choices[key] = plan_at_bucket()
            except (DoesNotFit, KernelFault):
                self._choices[key] = None
        return self._choices[key]

    def clear(self) -> None:
        """Forget every choice."""
        self._choices.clear()
