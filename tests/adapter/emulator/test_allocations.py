"""A program's allocation table is held to its instructions: no two live
allocations share a byte, every step stays inside an allocation live at that
step, and bytes an allocation takes over hold nothing for it until it writes
them (a read of what the previous owner left there is a stale read)."""

from __future__ import annotations

import dataclasses
import random

import pytest

from tests.support import kernels as K

from spyre_adapter.model.machine import DEFAULT
from spyre_adapter.model.program import Alloc, CoreProgram, DmaLoad, Program
from spyre_adapter.model.rules import EmulatorError, static_check
from spyre_adapter.scheduler.loops import Division, plan_group

ROWS, COLS = 256, 4096


@pytest.fixture(scope="module")
def tiled():
    """One core streaming many tiles: its allocations reuse each other's bytes."""
    g = K.add(ROWS, COLS, "float32")
    p = plan_group(g, DEFAULT, {}, "add", force=Division(1))
    return p, g


def _numels():
    return {n: ROWS * COLS for n in "abc"}


def _with_core(p: Program, c: CoreProgram) -> Program:
    return dataclasses.replace(p, cores=tuple(c if k.core == c.core else k for k in p.cores))


def _reused(c: CoreProgram) -> tuple[Alloc, Alloc]:
    """(x, y): y starts with a load into bytes x held earlier in the stream."""
    for y in c.allocs:
        if not isinstance(c.instrs[y.first], DmaLoad):
            continue
        for x in c.allocs:
            if x.last < y.first and x.addr < y.addr + y.nbytes and y.addr < x.addr + x.nbytes:
                return x, y
    raise AssertionError("no reused bytes")


def test_the_planned_program_keeps_its_table(tiled) -> None:
    p, g = tiled
    got, want = K.run_program(p, g)
    K.assert_same(got, want, ["c"], atol=0, rtol=0)


def test_a_stale_read_is_an_error(tiled) -> None:
    """The load that fills a reused allocation is dropped: the step that reads it
    finds bytes written earlier in the same launch, by the previous owner."""
    p, g = tiled
    c = p.cores[0]
    x, y = _reused(c)
    bad = _with_core(p, c.spliced(y.first, 1))
    with pytest.raises(EmulatorError, match="read of a reassigned allocation") as e:
        K.run_program(bad, g)
    assert "never wrote it" in str(e.value)


def test_two_live_allocations_on_shared_bytes_are_an_error(tiled) -> None:
    p, _ = tiled
    c = p.cores[0]
    x, y = _reused(c)
    live = next(a for a in c.allocs if a.first <= y.first <= a.last and a is not y and a.addr != y.addr)
    allocs = tuple(dataclasses.replace(a, addr=live.addr) if a is y else a for a in c.allocs)
    with pytest.raises(EmulatorError, match="overlapping allocations"):
        static_check(_with_core(p, dataclasses.replace(c, allocs=allocs)), DEFAULT, _numels())


def test_overlapping_allocations_are_found_wherever_they_are_in_the_table(tiled) -> None:
    """Random tables of slots reused over the stream, a few with a planted
    overlap: the rule flags exactly the tables some pair of allocations live at
    once on shared bytes makes wrong (checked pair by pair here)."""
    p, _ = tiled
    c = p.cores[0]
    steps = len(c.instrs)
    rng = random.Random(7)
    for trial in range(60):
        allocs = []
        for slot in range(4):  # each slot: back-to-back allocations at one address
            at = 0
            while at < steps:
                n = rng.randint(1, 40)
                allocs.append(Alloc(f"s{slot}.{at}", slot * 4096, 4096, at, min(steps, at + n) - 1))
                at += n
        x = rng.choice(allocs)
        if trial % 3 == 0:  # anywhere
            f = rng.randrange(steps)
            allocs.append(Alloc("planted", x.addr + rng.choice([0, 2048]), 4096 * rng.randint(1, 2), f,
                                min(steps - 1, f + rng.randint(0, 30))))
        elif trial % 3 == 1:  # for the one step another allocation of its bytes ends at
            allocs.append(Alloc("planted", x.addr, 4096, x.last, x.last))
        rng.shuffle(allocs)
        clash = any(a.addr < b.addr + b.nbytes and b.addr < a.addr + a.nbytes and a.first <= b.last and b.first <= a.last
                    for i, a in enumerate(allocs) for b in allocs[i + 1:])
        found = None
        try:  # (a table unlike the steps' own may break the next rule, steps outside allocations, instead)
            static_check(_with_core(p, dataclasses.replace(c, allocs=tuple(allocs))), DEFAULT, _numels())
        except EmulatorError as exc:
            found = exc.kind
        assert (found == "overlapping allocations") == clash, (trial, found)


def test_a_step_reaching_outside_its_allocation_is_an_error(tiled) -> None:
    """A load moved to straddle the end of another live allocation (the table
    unchanged): its bytes are not inside any one allocation live at that step."""
    p, _ = tiled
    c = p.cores[0]
    x, y = _reused(c)
    ld = c.instrs[y.first]
    live = next(a for a in c.allocs if a.first < y.first < a.last and a.addr != y.addr)
    at = live.addr + live.nbytes - DEFAULT.stick_bytes
    moved = dataclasses.replace(ld, dst=dataclasses.replace(ld.dst, addr=at))
    assert y.nbytes > DEFAULT.stick_bytes
    with pytest.raises(EmulatorError, match="LX access outside its allocation") as e:
        static_check(_with_core(p, c.spliced(y.first, 1, (moved,))), DEFAULT, _numels())
    assert live.name in str(e.value)


def test_splicing_keeps_the_table_in_step() -> None:
    c = CoreProgram(0, tuple(DmaLoad(None, None) for _ in range(6)),  # type: ignore[arg-type]
                    (Alloc("u", 0, 128, 0, 2), Alloc("v", 0, 128, 3, 5)))
    assert [(a.first, a.last) for a in c.spliced(3, 1).allocs] == [(0, 2), (3, 4)]
    assert [(a.first, a.last) for a in c.spliced(1, 0, [None, None]).allocs] == [(0, 4), (5, 7)]  # type: ignore[list-item]
    assert [(a.first, a.last) for a in c.spliced(2, 1, [None]).allocs] == [(0, 2), (3, 5)]  # type: ignore[list-item]
