"""Replayed launches run a program's steps in dependence levels, batched across
cores: the levels must order every conflicting pair of steps, and the batched
replay must compute what the program computes."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from spyre_shims.reference import run_kernel
from tests.support import kernels as K

from spyre_adapter.backend.spyre import plan
from spyre_adapter.emulator import Card, Replay, execute, grouping, regroup
from spyre_adapter.model.machine import DEFAULT
from spyre_adapter.model.program import DmaLoad, DmaStore, Lx, Region, RingRecv, RingSend
from spyre_adapter.model.rules import EmulatorError

X = Lx.dense(0, "float32", (32,))
Y = Lx.dense(4096, "float32", (32,))


def _load(buffer: str, offset: int, dst: Lx = X) -> DmaLoad:
    return DmaLoad(Region(buffer, offset, (32,), (1,)), dst)


def _store(buffer: str, offset: int, src: Lx = X) -> DmaStore:
    return DmaStore(src, Region(buffer, offset, (32,), (1,)), False)


def _levels(items, aliased=frozenset()):
    return regroup.levels(items, (), DEFAULT, {"a": 4096, "b": 4096}, aliased)


def test_levels_order_conflicting_steps_and_share_independent_ones() -> None:
    items = [
        (0, 0, _load("a", 0)),          # 1
        (1, 0, _load("a", 32)),         # 1: another core's LX
        (0, 1, _store("b", 0)),         # 2: reads what step 0 wrote
        (0, 2, _load("a", 64)),         # 3: overwrites what the store read
        (0, 3, _load("a", 96, Y)),      # 1: other LX bytes, nothing before touches them
        (1, 1, _load("b", 0, Y)),       # 3: reads DRAM the core-0 store wrote
        (1, 2, _store("b", 64, Y)),     # 4: its LX source was just loaded; DRAM elsewhere
    ]
    assert _levels(items) == [1, 1, 2, 3, 1, 3, 4]


def test_a_receive_follows_its_send_and_a_reused_tag_follows_the_receive() -> None:
    items = [
        (0, 0, _load("a", 0)),
        (0, 1, RingSend((1,), X, 7)),
        (1, 0, RingRecv(0, Y, 7)),
        (2, 0, _load("a", 0, Y)),
        (2, 1, RingSend((1,), Y, 7)),   # same (tag, receiver): after the first receive
        (1, 1, RingRecv(2, X, 7)),
    ]
    assert _levels(items) == [1, 2, 3, 1, 4, 5]


def test_a_receive_copies_from_the_sender_when_the_source_outlives_it() -> None:
    send = (0, 1, RingSend((1,), X, 7))
    direct: dict = {}
    # the sender's next load into X waits for the receive that reads X
    lv = regroup.levels([(0, 0, _load("a", 0)), send, (1, 0, RingRecv(0, Y, 7)), (0, 2, _load("a", 32))],
                        (), DEFAULT, {"a": 4096}, direct=direct)
    assert lv == [1, 2, 3, 4] and direct == {(7, 1): (0, X)}
    # overwritten before the receive (in the recorded order): the snapshot is needed
    direct = {}
    lv = regroup.levels([(0, 0, _load("a", 0)), send, (0, 2, _load("a", 32)), (1, 0, RingRecv(0, Y, 7))],
                        (), DEFAULT, {"a": 4096}, direct=direct)
    assert lv == [1, 2, 3, 3] and direct == {}


def test_direct_copies_split_where_receivers_or_senders_stop_stepping_evenly() -> None:
    pairs = [(0, 4), (1, 5), (2, 6), (3, 3), (4, 3), (5, 3), (6, 0)]
    assert grouping.even_pairs(pairs) == [[(0, 4), (1, 5), (2, 6)], [(3, 3), (4, 3), (5, 3)], [(6, 0)]]


def test_direct_copies_of_a_repeating_sender_pattern_are_one_grid_copy() -> None:
    pairs = [(4 + k, k % 4) for k in range(28)]
    assert grouping.core_grid(pairs) == ((7, 4), (4, (4, 1)), (0, (0, 1)))
    assert grouping.core_grid([(0, 4), (1, 5), (2, 6)]) == ((1, 3), (0, (0, 1)), (4, (0, 1)))
    assert grouping.core_grid([(0, 4), (1, 6), (2, 5)]) is None
    card = Card(DEFAULT)
    card.lx.view(torch.float32)[:, :4] = torch.arange(32.0).view(32, 1)
    got = card.grid_view(4, (4, 1), (7, 4), X)[..., :4]
    assert torch.equal(got[..., 0], torch.arange(4.0, 32.0).view(7, 4))


def test_buffers_sharing_storage_count_as_one_buffer() -> None:
    items = [(0, 0, _store("a", 0)), (1, 0, _load("b", 512, Y))]
    assert _levels(items) == [1, 1]
    assert _levels(items, frozenset({"a", "b"})) == [1, 2]
    shared = torch.zeros(64)
    assert regroup.aliasing({"a": shared[:32], "b": shared[32:], "c": torch.zeros(3)}) == {"a", "b"}


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 4), st.integers(0, 9)), min_size=1, max_size=3), st.integers(0, 5))
def test_a_view_called_disjoint_addresses_no_element_twice(dims, lead) -> None:
    sizes = tuple(n for n, _ in dims) + (lead,)
    strides = tuple(s for _, s in dims) + (3,)
    addrs = [sum(i * s for i, s in zip(ix, strides)) for ix in itertools.product(*(range(n) for n in sizes))]
    if grouping.disjoint(sizes, strides):
        assert len(addrs) == len(set(addrs))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 300), min_size=2, max_size=12), st.booleans())
def test_dma_spacing_is_found_only_where_one_strided_view_holds_every_region(offsets, store) -> None:
    """Any offsets: when _spacing names a layout, the stacked view's k-th region
    starts at the k-th offset (loads and stores), and stores never overlap."""
    group = [(c, 0, _store("a", o) if store else _load("a", o)) for c, o in enumerate(offsets)]
    lead = grouping.spacing(group)
    if lead is None:
        return
    assert len(lead) in (1, 2) and math.prod(n for n, _ in lead) == len(offsets)
    starts = [sum(i * d for i, (_, d) in zip(ix, lead)) for ix in itertools.product(*(range(n) for n, _ in lead))]
    assert [o - offsets[0] for o in offsets] == starts
    if store:
        flat = [s + j for s in starts for j in range(32)]
        assert len(flat) == len(set(flat))


def test_dma_spacing_recognises_a_2d_tiling_spread_over_cores() -> None:
    offs = [0, 256, 131072, 131328]
    assert grouping.spacing([(c, 0, _load("a", o)) for c, o in enumerate(offs)]) == ((2, 131072), (2, 256))
    assert grouping.spacing([(c, 0, _load("a", o)) for c, o in enumerate([0, 64, 128])]) == ((3, 64),)
    assert grouping.spacing([(c, 0, _load("a", o)) for c, o in enumerate([0, 64, 100])]) is None


def test_progressions_batch_evenly_stepped_cores() -> None:
    ins = _load("a", 0)
    items = [(c, 0, ins) for c in (1, 3, 5, 7, 8, 9)] + [(3, 1, ins)]
    runs = regroup._progressions(sorted(items, key=lambda t: t[0]))
    assert [[c for c, _, _ in r] for r in runs] == [[1, 3, 5, 7], [8, 9], [3]]


def _ring_matmul(dtype: str = "float32"):
    kernel = K.mm(128, 1408, 512, dtype)
    p = plan(kernel, DEFAULT, {})
    assert sum(isinstance(i, RingRecv) for c in p.cores for i in c.instrs) > 32
    return kernel, p


def test_replay_batches_the_ring_sharing_matmul_across_strided_core_sets() -> None:
    """Neighbouring cores of this plan keep their tiles at different LX addresses
    (core parity), so the round schedule batches little; the levelled replay
    batches every fourth core's identical step."""
    kernel, p = _ring_matmul()
    steps = sum(len(c.instrs) for c in p.cores)
    card, replay = Card(DEFAULT), Replay()
    for seed, checking in ((0, True), (1, False), (2, False)):
        got = K.buffers(kernel, seed)
        want = {k: v.clone() for k, v in got.items()}
        run_kernel(kernel, want)
        execute(p, got, card, checking=checking, replay=None if checking else replay)
        K.assert_same(got, want, K.outputs(kernel))
    assert len(replay.thunks) < steps / 4


def test_levels_that_ignore_dependences_break_the_replay(monkeypatch: pytest.MonkeyPatch) -> None:
    """The levels are what keeps the replay right: every step put at one level
    (dependences ignored) makes the program read data before it arrives."""
    kernel, p = _ring_matmul()
    monkeypatch.setattr(regroup, "levels", lambda items, *a, **k: [1] * len(items))
    card, replay = Card(DEFAULT), Replay()
    got = K.buffers(kernel, 0)
    execute(p, got, card)
    want = {k: v.clone() for k, v in got.items()}
    run_kernel(kernel, want)
    got = K.buffers(kernel, 1)
    want = {k: v.clone() for k, v in got.items()}
    run_kernel(kernel, want)
    try:
        execute(p, got, card, checking=False, replay=replay)
    except EmulatorError as exc:
        assert "receive before its send" in str(exc)
        return
    assert not torch.allclose(got["c"], want["c"], atol=1e-2)


def test_a_launch_whose_buffers_alias_differently_records_again() -> None:
    """In-place ``c = a + b`` into ``a``'s storage: the recording made with
    separate buffers is not replayed; a new one orders the shared storage."""
    kernel = K.add(4096, 512, "float32")
    p = plan(kernel, DEFAULT, {})
    card, replay = Card(DEFAULT), Replay()
    execute(p, K.buffers(kernel, 0), card)
    execute(p, K.buffers(kernel, 1), card, checking=False, replay=replay)
    first = replay.thunks
    bufs = K.buffers(kernel, 2)
    want = bufs["a"] + bufs["b"]
    bufs["c"] = bufs["a"]
    execute(p, bufs, card, checking=False, replay=replay)
    assert replay.thunks is not first and replay.aliased == {"a", "c"}
    torch.testing.assert_close(bufs["a"], want)
