"""The collector is paused over planning, checking and simulating (model/gc_pause.py):
no collection runs inside a pass (one young one at its end), the collector's state is restored after it,
nested passes resume it only at the outermost, and an error restores it too."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from spyre_adapter.bench.kernels import mm
from spyre_adapter.model.gc_pause import gc_paused, paused_gc
from spyre_adapter.model.machine import DEFAULT
from spyre_adapter.scheduler.matmul import plan_matmul


@pytest.fixture
def collections() -> Iterator[list[int]]:
    seen: list[int] = []

    def cb(phase: str, info: dict) -> None:
        if phase == "start":
            seen.append(info["generation"])
    gc.callbacks.append(cb)
    try:
        yield seen
    finally:
        gc.callbacks.remove(cb)


def test_planning_a_gemm_runs_no_collection_and_leaves_the_collector_on(collections: list[int]) -> None:
    assert gc.isenabled()
    gc.collect()
    collections.clear()
    p = plan_matmul(mm(512, 1024, 512), DEFAULT, {}, "x")  # allocates far past gen0's threshold
    # at most the young collection the pause deferred, once it ends (unpaused: hundreds)
    assert p.cores and collections in ([], [0])
    assert gc.isenabled()


def test_nested_passes_resume_only_at_the_outermost_and_errors_restore() -> None:
    @gc_paused
    def inner() -> bool:
        return gc.isenabled()

    with paused_gc():
        assert not inner() and not gc.isenabled()
    assert gc.isenabled()

    @gc_paused
    def failing() -> None:
        raise ValueError("x")
    with pytest.raises(ValueError):
        failing()
    assert gc.isenabled()
    gc.disable()
    try:
        with paused_gc():
            pass
        assert not gc.isenabled()  # a caller's own pause is left alone
    finally:
        gc.enable()
