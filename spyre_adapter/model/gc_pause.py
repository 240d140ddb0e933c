"""Cyclic garbage collection paused over a burst of allocation.

Planning, checking and simulating a program allocate millions of small objects
(steps, views, events) that live as long as the program. Each allocation
counts towards Python's collector, whose full collections walk every live
object: planning a 4096^3 GEMM ran 20 of them, 7.4 s of its 24.9 s. Nothing
these passes allocate needs the collector (the objects are freed by reference
count, or live on in the program cache), so the collector is paused for the
outermost pass and resumed after it, as it was.
"""

from __future__ import annotations

import contextlib
import functools
import gc
from collections.abc import Callable, Iterator
from typing import ParamSpec, TypeVar

__all__ = ["paused_gc", "gc_paused"]

P = ParamSpec("P")
R = TypeVar("R")


@contextlib.contextmanager
def paused_gc() -> Iterator[None]:
    """Pause cyclic collection for the block (a no-op when already paused, so nested
    passes resume it only at the outermost one)."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def gc_paused(fn: Callable[P, R]) -> Callable[P, R]:
    """``fn`` run under :func:`paused_gc`."""
    @functools.wraps(fn)
    def run(*args: P.args, **kwargs: P.kwargs) -> R:
        with paused_gc():
            return fn(*args, **kwargs)
    return run
