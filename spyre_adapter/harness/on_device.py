"""Compile-and-compare's one harness: run a function compiled for the Spyre
device and collect the fallbacks it announced. ``spyre-adapter run``, the
workload runner (and the OpInfo sweep through it), the transformers runs, the
benchmark and the tests all use it, so "ran on the device" and "fell back"
mean the same everywhere."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch
from torch.utils._pytree import tree_map

from spyre_shims.backend import FallbackWarning

__all__ = ["DEVICE", "announced_fallbacks", "to_device", "run_compiled"]

#: The device the harness compiles for.
DEVICE = "spyre"


@contextmanager
def announced_fallbacks() -> Iterator[list[str]]:
    """Inside: every :class:`FallbackWarning` is recorded (repeats included, in
    order); the list yielded holds their messages once the block ends."""
    found: list[str] = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", FallbackWarning)
        try:
            yield found
        finally:
            found.extend(str(w.message) for w in caught if issubclass(w.category, FallbackWarning))


def to_device(value: Any, device: str) -> Any:
    """``value`` with every tensor in it (nested lists, tuples, dicts) moved to ``device``."""
    return tree_map(lambda t: t.to(device) if isinstance(t, torch.Tensor) else t, value)


def run_compiled(fn: Callable[..., Any], args: Sequence[Any], *, dynamic: bool | None = False) -> tuple[Any, list[str]]:
    """``fn`` compiled for the device and run on device copies of ``args``: its
    outputs copied to the host, and the fallbacks announced while compiling and
    running."""
    # A lambda frame: Dynamo traces into torch functions from user code on
    # every release (some releases run a bare torch function eagerly).
    compiled = torch.compile(lambda *a: fn(*a), dynamic=dynamic)
    with announced_fallbacks() as fallbacks:
        out = compiled(*to_device(list(args), DEVICE))
    return to_device(out, "cpu"), fallbacks
