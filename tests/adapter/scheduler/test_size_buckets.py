"""Kernels with run-time sizes (a decode loop's KV length) choose their division
once per size bucket and build it for the exact sizes: fewer estimates, the
same checked programs, the same results."""

from __future__ import annotations

import warnings

import pytest
import torch

from spyre_shims.reference import run_kernel
from tests.support import kernels as K

from spyre_adapter.emulator import Card, execute
from spyre_adapter.model.machine import DEFAULT
from spyre_adapter.scheduler import loop_estimates, loops
from spyre_adapter.scheduler.matmul import plan_matmul
from spyre_adapter.scheduler.size_buckets import size_bucket


def test_sizes_round_up_to_a_power_of_two() -> None:
    assert size_bucket({K.S0: 17}) == {K.S0: 32}
    assert size_bucket({K.S0: 32, K.I0: 1}) == {K.S0: 32, K.I0: 1}
    assert size_bucket({K.S0: 0}) == {K.S0: 0}


@pytest.mark.parametrize("rows", [17, 23, 31, 32, 33])
def test_a_bucket_s_division_runs_right_at_every_size_in_it(rows: int) -> None:
    """Built for the exact size, checked on its first launch, compared with the
    reference semantics; divided as at the bucket."""
    kernel = K.rows_times_row(512)
    sizes = {K.S0: rows}
    p = loops.plan_group(kernel, DEFAULT, sizes, "k")
    at_bucket = loops.plan_group(kernel, DEFAULT, size_bucket(sizes), "k")
    assert (p.plan.row_cores, p.plan.rsplit, p.plan.grid) == \
        (at_bucket.plan.row_cores, at_bucket.plan.rsplit, at_bucket.plan.grid)
    got = K.sized_buffers(kernel, sizes, seed=rows)
    want = {k: v.clone() for k, v in got.items()}
    run_kernel(kernel, want, sizes)
    execute(p, got, Card(DEFAULT), sizes, checking=True)
    torch.testing.assert_close(got["out"], want["out"], rtol=0, atol=0)


def test_sizes_of_one_bucket_estimate_their_candidates_once(monkeypatch: pytest.MonkeyPatch) -> None:
    kernel = K.rows_times_row(384)
    calls: list[object] = []
    real = loop_estimates._estimate
    monkeypatch.setattr(loop_estimates, "_estimate", lambda gm, m, d: calls.append(d) or real(gm, m, d))
    loops._RECIPES.clear()
    loop_estimates._ESTIMATES.clear()
    loops.plan_group(kernel, DEFAULT, {K.S0: 65}, "k")
    first = len(calls)
    assert first > 0
    for rows in range(66, 128, 7):
        loops.plan_group(kernel, DEFAULT, {K.S0: rows}, "k")
    assert len(calls) == first  # rows 66..127 share the bucket of 128
    loops.plan_group(kernel, DEFAULT, {K.S0: 129}, "k")
    assert len(calls) > first  # a new bucket chooses again


@pytest.mark.parametrize("rows", [65, 100, 127])
def test_a_matmul_with_run_time_rows_uses_its_bucket_s_core_grid(rows: int) -> None:
    kernel = K.mm_rows(512, 256)
    sizes = {K.S0: rows}
    p = plan_matmul(kernel, DEFAULT, sizes, "k")
    at_bucket = plan_matmul(kernel, DEFAULT, size_bucket(sizes), "k")
    assert (p.plan.grid, p.plan.order) == (at_bucket.plan.grid, at_bucket.plan.order)
    got = K.sized_buffers(kernel, sizes, seed=rows)
    want = {k: v.clone() for k, v in got.items()}
    run_kernel(kernel, want, sizes)
    execute(p, got, Card(DEFAULT), sizes, checking=True)
    torch.testing.assert_close(got["c"].float(), want["c"].float(), rtol=1e-2, atol=1e-2)


def test_matmul_sizes_of_one_bucket_are_not_simulated_again(monkeypatch: pytest.MonkeyPatch) -> None:
    from spyre_adapter.scheduler import matmul

    kernel = K.mm_rows(384, 192)
    calls: list[object] = []
    real = matmul.simulate
    monkeypatch.setattr(matmul, "simulate", lambda *a, **kw: calls.append(a) or real(*a, **kw))
    matmul._BUCKET_GRIDS.clear()
    plan_matmul(kernel, DEFAULT, {K.S0: 70}, "k")
    first = len(calls)
    assert first > 0  # the bucket's candidates were simulated
    for rows in (80, 99, 127):
        plan_matmul(kernel, DEFAULT, {K.S0: rows}, "k")
    assert len(calls) == first


def test_a_kernel_no_program_fits_at_its_run_time_sizes_runs_on_the_host_announced() -> None:
    """Known only at launch: the reference semantics run on the host, with a
    fallback warning naming the kernel and the sizes (once per size), instead
    of an error deep inside the model's forward."""
    from spyre_shims.backend import FallbackWarning

    from spyre_adapter.backend.session import Session
    from spyre_adapter.backend.spyre import plan
    from spyre_adapter.emulator import Executable
    from spyre_adapter.model.kinds import kind_of

    tiny = DEFAULT.replace(lx_usable_bytes=256)  # not even one stick per operand, double-buffered
    kernel = K.rows_times_row(256)
    session = Session(tiny)
    exe = Executable(kernel, kind_of(kernel), plan, lambda: session)
    for rows, warned in ((40, True), (40, False), (70, True)):
        sizes = {K.S0: rows}
        got = K.sized_buffers(kernel, sizes, seed=rows)
        want = {k: v.clone() for k, v in got.items()}
        run_kernel(kernel, want, sizes)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            exe(got, sizes)
        fallbacks = [str(w.message) for w in caught if issubclass(w.category, FallbackWarning)]
        assert bool(fallbacks) == warned
        if warned:
            assert "rows_times_row" in fallbacks[0] and f"'s0': {rows}" in fallbacks[0] and "LX" in fallbacks[0]
        torch.testing.assert_close(got["out"], want["out"], rtol=0, atol=0)
