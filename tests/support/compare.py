"""Differential-testing helpers: run a function compiled on "spyre" and eagerly
on the CPU, and compare."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from torch.utils._pytree import tree_flatten

from spyre_adapter.backend.session import current
from spyre_adapter.harness.on_device import run_compiled

#: Tolerances of device results against CPU eager, per dtype.
TOLERANCES = {
    torch.float32: {"atol": 1e-4, "rtol": 1e-4},
    torch.float16: {"atol": 1e-2, "rtol": 1e-2},
    torch.bfloat16: {"atol": 8e-2, "rtol": 5e-2},
}


def assert_matches_eager(fn: Callable[..., Any], args: Sequence[Any], *, atol: float, rtol: float,
                         allow_fallback: bool = False) -> list[str]:
    """Compiled-on-spyre result equals CPU eager within tolerance; every output
    came back on the host; at least one device kernel ran."""
    expected = fn(*args)
    launches_before = current().report.launch_count
    got, fallbacks = run_compiled(fn, args)
    if not allow_fallback:
        assert not fallbacks, f"unexpected fallback: {fallbacks}"
    exp_flat, _ = tree_flatten(expected)
    got_flat, _ = tree_flatten(got)
    assert len(exp_flat) == len(got_flat)
    for e, g in zip(exp_flat, got_flat):
        if isinstance(e, torch.Tensor):
            assert g.device.type == "cpu"
            assert g.dtype == e.dtype and g.shape == e.shape, (g.dtype, e.dtype, g.shape, e.shape)
            if e.dtype.is_floating_point:
                torch.testing.assert_close(g, e, atol=atol, rtol=rtol, equal_nan=True)
            else:
                assert torch.equal(g, e)
    assert current().report.launch_count > launches_before or fallbacks, "no device kernel ran"
    return fallbacks


def shared_workloads() -> Path:
    """``shared/workloads`` beside the checkout (the real-model files): the first
    one found going up from the tests (a git worktree sits one level deeper)."""
    here = Path(__file__).resolve()
    for parent in here.parents:
        if (parent / "shared" / "workloads").is_dir():
            return parent / "shared" / "workloads"
    return here.parents[1] / "shared" / "workloads"
