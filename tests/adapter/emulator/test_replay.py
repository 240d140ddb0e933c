"""Recorded replay steps decide what depends only on their views once, at
recording; every launch must still move and compute the launch's data."""

from __future__ import annotations

import types

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from spyre_shims.reference import run_kernel
from tests.support import kernels as K

from spyre_adapter.backend.spyre import plan
from spyre_adapter.emulator import Card, Replay, execute
from spyre_adapter.emulator import replay as rp
from spyre_adapter.emulator import steps
from spyre_adapter.model.machine import DEFAULT
from spyre_adapter.model.program import Region


@settings(max_examples=40, deadline=None)
@given(batch=st.sampled_from([None, 1, 3]), m=st.integers(1, 9), k=st.integers(1, 9), n=st.integers(1, 9),
       dtype=st.sampled_from([torch.float32, torch.float16]), accumulate=st.booleans(), threads=st.sampled_from([1, 2]))
def test_a_pe_step_computes_what_torch_matmul_does_in_fp32(batch, m, k, n, dtype, accumulate, threads) -> None:
    lead = () if batch is None else (batch,)
    g = torch.Generator().manual_seed(m * 100 + k * 10 + n)
    a, b = torch.randn(*lead, m, k, generator=g).to(dtype), torch.randn(*lead, k, n, generator=g).to(dtype)
    acc = torch.randn(*lead, m, n, generator=g)
    want = torch.matmul(a.float(), b.float()) + (acc if accumulate else 0)
    step = rp.pe(a, b, acc, accumulate)
    step(types.SimpleNamespace(pe_threads=threads))
    assert torch.equal(acc, want)
    # the views are the LX: new contents on the next launch give the new product
    a.copy_(torch.randn(a.shape, generator=g).to(dtype))
    acc.zero_()
    step(types.SimpleNamespace(pe_threads=threads))
    assert torch.equal(acc, torch.matmul(a.float(), b.float()))


@pytest.mark.parametrize("accumulate", [False, True])
def test_a_store_of_a_view_that_cannot_be_reshaped_in_place_stores_each_launchs_data(accumulate: bool) -> None:
    lx = torch.arange(64, dtype=torch.float32)
    src = lx.as_strided((4, 4), (8, 1))  # rows 8 apart: flattening it needs a copy
    step = rp.store(src, Region("out", 0, (16,), (1,)), accumulate)
    out = torch.zeros(16)
    step(types.SimpleNamespace(buffers={"out": out}))
    assert torch.equal(out, src.reshape(16))
    lx.mul_(-1)
    step(types.SimpleNamespace(buffers={"out": out}))
    assert torch.equal(out, torch.zeros(16) if accumulate else src.reshape(16))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("lead", [(), ((3, 5),)])
def test_a_transposing_load_copies_the_regions_elements_each_launch(dtype: torch.dtype, lead) -> None:
    """A load reading across a weight's rows (unit stride not innermost) into LX
    rows: the two-pass copy puts every element where one strided copy would."""
    w = torch.randn(12 * 40).to(dtype)
    r = Region("w", 2, (6, 8), (1, 40))  # an (8, 6) block of a (12, 40) matrix, transposed
    sizes, strides = (*(n for n, _ in lead), 6, 8), (*(d for _, d in lead), 1, 40)
    lx = torch.zeros(*sizes, dtype=dtype)
    step = rp.batched_load(lx, r, lead) if lead else rp.load(lx, r)
    assert "transposed" in step.__qualname__
    for _ in range(2):
        step(types.SimpleNamespace(buffers={"w": w}))
        assert torch.equal(lx, w.as_strided(sizes, strides, 2))
        w.copy_(torch.randn(w.shape).to(dtype))


@pytest.mark.parametrize("shape", [(1, 1 << 20), (8, 4096)])
def test_a_split_reductions_combine_steps_replay_with_their_tile_kept(monkeypatch: pytest.MonkeyPatch, shape) -> None:
    """A reduction split over cores combines its partials in Combine steps (into
    LX for a long row, then through the finish phase). Replayed launches reuse
    the tile and memory their recording built, and must still combine each
    launch's partials: the sums match the reference on new data every launch."""
    kernel = K.row_sum(*shape)
    p = plan(kernel, DEFAULT, {})
    kept_runs: list[bool] = []
    orig = steps._combine

    def spy(ex, core, step, ins, kept=None):
        kept_runs.append(kept is not None and kept[0] is not None)
        return orig(ex, core, step, ins, kept)
    monkeypatch.setattr(steps, "_combine", spy)
    card, replay = Card(DEFAULT), Replay()
    for n, seed in enumerate((0, 1, 2, 3)):
        kept_runs.clear()
        got = K.buffers(kernel, seed)
        want = {k: v.clone() for k, v in got.items()}
        run_kernel(kernel, want)
        execute(p, got, card, checking=n == 0, replay=None if n == 0 else replay)
        K.assert_same(got, want, K.outputs(kernel))
        assert kept_runs and all(kept_runs) == (n >= 2)
