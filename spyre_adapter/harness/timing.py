"""Wall-clock timing of repeated calls (the run's steady-state figure, the
benchmark's speed rows)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

__all__ = ["median_time"]


def median_time(fn: Callable[[], Any], n: int) -> float:
    """Median wall time (s) of ``n`` calls of ``fn``."""
    times = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)
