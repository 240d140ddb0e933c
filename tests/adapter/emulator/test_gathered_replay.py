"""Steps of one dependence level with equal shapes at unrelated cores and LX
addresses run as one gather and scatter in a replayed launch: the tiles view
must address exactly each step's elements, and the gathered replay must compute
what the program computes, for every dtype (bits are copied as integers)."""

from __future__ import annotations

import collections

import numpy as np
import pytest
import sympy
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from spyre_shims.kernel_ir import BufferSpec, ExternKernel
from spyre_shims.reference import run_kernel
from tests.support import kernels as K

from spyre_adapter.backend.spyre import plan
from spyre_adapter.emulator import Card, Replay, execute, regroup
from spyre_adapter.emulator import replay as rp
from spyre_adapter.model.machine import DEFAULT
from spyre_adapter.scheduler.matmul import Grid, shape_of
from spyre_adapter.scheduler.matmul_program import build as build_program


@settings(max_examples=60, deadline=None)
@given(dims=st.lists(st.tuples(st.integers(1, 5), st.integers(0, 9)), min_size=1, max_size=3),
       starts=st.lists(st.integers(0, 40), min_size=1, max_size=5, unique=True))
def test_tiles_address_the_tile_at_each_start(dims, starts) -> None:
    sizes, strides = tuple(n for n, _ in dims), tuple(s for _, s in dims)
    extent = sum(s * (n - 1) for n, s in dims) + 1
    flat = torch.arange(extent + 48, dtype=torch.int32)
    view = rp.tiles(rp.bits(flat), sizes, strides)
    got = view[np.array(starts)]
    for k, o in enumerate(starts):
        assert np.array_equal(got[k], flat.as_strided(sizes, strides, o).numpy())


def test_a_scatter_through_tiles_writes_only_the_chosen_tiles() -> None:
    flat = torch.zeros(64, dtype=torch.bfloat16)
    view = rp.tiles(rp.bits(flat), (2, 3), (8, 1))
    src = torch.tensor([[1.5, 2.5, 3.5], [4.5, 5.5, 6.5]], dtype=torch.bfloat16)
    view[np.array([4, 30])] = rp.bits(src.reshape(-1)).reshape(1, 2, 3)
    want = torch.zeros(64, dtype=torch.bfloat16)
    for o in (4, 30):
        want.as_strided((2, 3), (8, 1), o).copy_(src)
    assert torch.equal(flat, want)


def _gathered_kinds(monkeypatch: pytest.MonkeyPatch) -> collections.Counter:
    seen: collections.Counter = collections.Counter()
    orig = regroup.regroup

    def spy(*a, **k):
        out = orig(*a, **k)
        seen.update(type(g[0][2]).__name__ for g in out if isinstance(g, regroup.Gathered))
        return out
    monkeypatch.setattr(regroup, "regroup", spy)
    return seen


def _run(kernel, p, seeds=(0, 1, 2, 3)) -> Replay:
    """A checked launch, a recording one, then replays, each on new inputs
    against the kernel's reference semantics."""
    card, replay = Card(DEFAULT), Replay()
    for n, seed in enumerate(seeds):
        got = K.buffers(kernel, seed)
        want = {k: v.clone() for k, v in got.items()}
        run_kernel(kernel, want)
        execute(p, got, card, checking=n == 0, replay=None if n == 0 else replay)
        K.assert_same(got, want, K.outputs(kernel))
    return replay


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_a_ring_matmul_replays_its_drifting_steps_gathered(monkeypatch: pytest.MonkeyPatch, dtype: str) -> None:
    """The ring-sharing matmul's cores drift apart, so a level holds the same
    copy or load at unrelated cores and addresses: they run gathered, in fewer
    replayed ops than with strided core runs alone, and compute the same."""
    kernel = K.mm(128, 1408, 512, dtype)
    # a division sharing both operands over the ring, no K split, A-stationary with
    # whole-K slices, LX placed first fit: its stores drift apart too (fixed here:
    # the planner's own choice follows its cost model, and places LX by role)
    p = build_program(kernel, shape_of(kernel, {}), Grid(1, 4, 2, 1, 32, 64, 512, True, "a"), DEFAULT, {},
                      kernel.name, True, None, periodic=False)
    seen = _gathered_kinds(monkeypatch)
    gathered = _run(kernel, p)
    assert seen["RingRecv"] > 0 and seen["DmaLoad"] > 0
    if dtype == "bfloat16":
        assert seen["DmaStore"] > 0
    orig = regroup.regroup
    monkeypatch.setattr(regroup, "regroup", lambda items, lvls, sig, shape=None: orig(items, lvls, sig, None))
    strided = _run(kernel, p)
    assert len(gathered.thunks) < len(strided.thunks)


@pytest.mark.parametrize("kind", ["gathered_copy", "gathered_load"])
def test_a_gather_that_pairs_tiles_wrongly_breaks_the_replay(monkeypatch: pytest.MonkeyPatch, kind: str) -> None:
    """The replay comparisons above see a wrong gather: destinations rotated by
    one tile (each step's data lands at another step's place)."""
    kernel = K.mm(128, 1408, 512, "float32")
    p = plan(kernel, DEFAULT, {})
    orig = getattr(rp, kind)
    monkeypatch.setattr(rp, kind, lambda dst, dst_idx, *a: orig(dst, np.roll(dst_idx, 1), *a))
    with pytest.raises(AssertionError):
        _run(kernel, p, seeds=(0, 1))


def _linear(m: int, n: int, k: int, dtype: str = "float32") -> ExternKernel:
    """c = a @ w.T with w stored (n, k) row-major, as nn.Linear keeps its weight:
    the program loads w's tiles transposed, at offsets no core stride spaces."""
    I = sympy.Integer
    w = BufferSpec("b", dtype, (I(k), I(n)), (I(1), I(k)), I(0), I(k * n), "input")
    return ExternKernel("linear", "mm", (K.buf("a", (m, k), dtype), w), K.buf("c", (m, n), dtype, "output"),
                        ("a", "b", "c"))


def _kinds(replay: Replay) -> collections.Counter:
    return collections.Counter(t.__qualname__.split(".")[0] for t in replay.thunks or ())


def test_a_core_run_loading_unevenly_spaced_regions_replays_as_one_gather(monkeypatch: pytest.MonkeyPatch) -> None:
    """Consecutive cores loading regions no stride spaces (a transposed weight's
    tiles) run as one gather and scatter, not a copy per core, and compute the same."""
    kernel = _linear(256, 1024, 1024)
    # a 4x4 grid with a K split of 2, A-stationary 64x64x64 tiles, LX placed first
    # fit (fixed here: the planner's own choice follows its cost model, and its
    # placement by role lines the cores' steps up into strided runs instead)
    p = build_program(kernel, shape_of(kernel, {}), Grid(1, 4, 4, 2, 64, 64, 64, True, "a"), DEFAULT, {},
                      kernel.name, True, None, periodic=False)
    orig = regroup.regroup
    # no level pools: every gathered step below comes from a run of cores
    monkeypatch.setattr(regroup, "regroup", lambda items, lvls, sig, shape=None: orig(items, lvls, sig, None))
    runs = _kinds(_run(kernel, p))
    assert runs["gathered_load"] > 0
    monkeypatch.setattr(rp, "gather_key", lambda ex, ins: None)
    per_core = _kinds(_run(kernel, p))
    assert "gathered_load" not in per_core and per_core["sequence"] > runs["sequence"]
    assert sum(runs.values()) == sum(per_core.values())
