"""Data-dependent DMA steps (gathers and scatters) as the emulator runs them:
results against torch indexing, in checked launches and in recorded replays;
bounds, span, stick accounting, and races between cores checked through the
program's own order (barriers). The programs are written by hand, two cores
each, so every planted fault is exactly the one named."""

from __future__ import annotations

import types

import pytest
import torch

from tests.support import kernels as K

from spyre_adapter.emulator.card import Card
from spyre_adapter.emulator.executor import execute
from spyre_adapter.emulator.replay import Replay
from spyre_adapter.model.errors import EmulatorError
from spyre_adapter.model.machine import DEFAULT
from spyre_adapter.model.program import (Barrier, CoreProgram, DmaGather, DmaLoad, DmaScatter, DmaStore, Lx, Program,
                                         Region)
from spyre_adapter.model.traffic import StickMarks

N = 64  # indices per core
ROWS = 100_000  # table elements
IDX = Lx(0, "int64", (N,), (1,))
VAL = Lx(1024, "float32", (N,), (1,))


def _program(name: str, cores: list[list], extra: tuple = ()) -> Program:
    bufs = (K.buf("table", (ROWS,), "float32", "inout"), K.buf("idx", (2 * N,), "int64"),
            K.buf("val", (2 * N,), "float32"), K.buf("out", (2 * N,), "float32", "output"), *extra)
    return Program(name, "loop", types.SimpleNamespace(buffers=bufs), (),
                   tuple(CoreProgram(c, tuple(s)) for c, s in enumerate(cores)), None)


def _load_idx(c: int) -> DmaLoad:
    return DmaLoad(Region("idx", c * N, (N,), (1,)), IDX)


def _gather(c: int) -> list:
    return [_load_idx(c), DmaGather("table", IDX, VAL), DmaStore(VAL, Region("out", c * N, (N,), (1,)))]


def _scatter(c: int, accumulate: bool = False) -> list:
    return [_load_idx(c), DmaLoad(Region("val", c * N, (N,), (1,)), VAL), DmaScatter(VAL, "table", IDX, accumulate)]


def _inputs(seed: int, idx: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {"table": torch.randn(ROWS, generator=g),
            "idx": idx if idx is not None else torch.randint(0, ROWS, (2 * N,), generator=g),
            "val": torch.randn(2 * N, generator=g), "out": torch.full((2 * N,), float("nan"))}


def _sticks(idx: torch.Tensor) -> int:
    """Distinct 128-byte sticks of float32 elements, by the buffer-wide bitmap."""
    marks = StickMarks(ROWS * 4 + 128)
    marks.add_indices(idx, 4)
    return marks.count() * 128


def test_gathers_read_the_indexed_elements_checked_and_replayed() -> None:
    """A checked launch, a recording launch and replays on new indices each read
    exactly ``table[idx]``, and count the sticks each descriptor moved."""
    p = _program("gather", [_gather(0), _gather(1)])
    card, replay = Card(DEFAULT), Replay()
    for seed, checking in ((0, True), (1, False), (2, False), (3, False)):
        bufs = _inputs(seed)
        if seed == 3:  # repeated and clustered indices: fewer sticks than elements
            bufs["idx"] = torch.arange(2 * N) // 3 + 5000
        stats = execute(p, bufs, card, checking=checking, replay=None if checking else replay)
        assert torch.equal(bufs["out"], bufs["table"][bufs["idx"]])
        for c in (0, 1):
            assert stats.dynamic_bytes[(c, 1)] == _sticks(bufs["idx"][c * N:(c + 1) * N])
    assert replay.ready(card)
    assert stats.dynamic_bytes[(0, 1)] < N * 128  # the clustered indices share sticks


@pytest.mark.parametrize("checking", [True, False])
def test_an_index_past_the_table_is_an_error(checking: bool) -> None:
    p = _program("gather", [_gather(0), _gather(1)])
    card, replay = Card(DEFAULT), Replay()
    if not checking:
        execute(p, _inputs(0), card, checking=False, replay=replay)  # recorded: the next launch replays
    idx = _inputs(1)["idx"]
    idx[N + 7] = ROWS + 3
    with pytest.raises(EmulatorError, match=rf"DMA outside a tensor's bytes in kernel gather, core 1, step 1.*"
                                            rf"element {ROWS + 3} of {ROWS}"):
        execute(p, _inputs(1, idx), card, checking=checking, replay=None if checking else replay)


def test_a_gather_spanning_more_than_a_core_may_address_is_an_error() -> None:
    p = _program("gather", [_gather(0), _gather(1)])
    idx = torch.arange(2 * N)
    idx[3] = 4096
    with pytest.raises(EmulatorError, match="per-core span exceeded in kernel gather, core 0, step 1"):
        execute(p, _inputs(0, idx), Card(DEFAULT.replace(span_bytes_per_core=8192)))


def test_scatters_write_the_indexed_elements() -> None:
    """Disjoint indices on the two cores: ``table[idx] = val``; accumulating
    scatters add, repeated indices included."""
    idx = torch.randperm(ROWS, generator=torch.Generator().manual_seed(5))[:2 * N]
    for accumulate in (False, True):
        if accumulate:
            idx = idx.clone()
            idx[N:] = idx[:N]  # both cores add to the same elements: atomic adds do not race
        p = _program("scatter", [_scatter(0, accumulate), _scatter(1, accumulate)])
        bufs = _inputs(0, idx)
        want = bufs["table"].clone().index_put_((idx,), bufs["val"], accumulate=accumulate)
        execute(p, bufs, Card(DEFAULT))
        torch.testing.assert_close(bufs["table"], want, atol=1e-6, rtol=1e-6)


def _unordered_then_ordered(second: list, idx: torch.Tensor, error: str) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """Core 0 scatters, core 1 runs ``second``: unordered, ``error``; ordered by a
    barrier, no error. The ordered launch's buffers, and the table core 0 left."""
    with pytest.raises(EmulatorError, match=error + r".*not ordered by any barrier or ring message"):
        execute(_program("race", [_scatter(0), second]), _inputs(0, idx), Card(DEFAULT))
    bufs = _inputs(0, idx)
    table = bufs["table"].clone()
    table[idx[:N]] = bufs["val"][:N]
    execute(_program("race", [_scatter(0) + [Barrier(1)], [Barrier(1)] + second]), bufs, Card(DEFAULT))
    return bufs, table


def test_two_cores_scattering_to_one_element_unordered_conflict() -> None:
    """Both scatter to one element: a conflict unless ordered; ordered, the later scatter wins."""
    idx = torch.arange(2 * N) * 3
    idx[N + 10] = idx[20]
    bufs, table = _unordered_then_ordered(_scatter(1), idx, rf"cross-core write conflict .*both scatter to element "
                                                            rf"{int(idx[20])}: ")
    table[idx[N:]] = bufs["val"][N:]
    assert torch.equal(bufs["table"], table)


def test_a_gather_of_what_another_core_scatters_needs_an_order() -> None:
    """Core 0 scatters into the table, core 1 gathers from it: unordered, a
    race on the shared element; after a barrier, core 1 reads core 0's values."""
    idx = torch.arange(2 * N) * 7
    idx[N + 3] = idx[9]  # core 1 reads an element core 0 writes
    bufs, table = _unordered_then_ordered(_gather(1), idx, rf"unordered DRAM access .*one gathers what the other "
                                                           rf"scatters to at element {int(idx[9])}: ")
    assert torch.equal(bufs["out"][N:], table[idx[N:]])
    assert bufs["out"][N + 3] == bufs["val"][9]


def test_cores_touching_different_elements_do_not_race() -> None:
    """Unordered, but no element in common (neighbours in one stick included): no error."""
    idx = torch.cat([torch.arange(N) * 2, torch.arange(N) * 2 + 1])  # interleaved: every stick shared
    p = _program("mixed", [_scatter(0), _gather(1)])
    bufs = _inputs(0, idx)
    table = bufs["table"].clone()
    execute(p, bufs, Card(DEFAULT))
    assert torch.equal(bufs["out"][N:], table[idx[N:]])
