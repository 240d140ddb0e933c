"""Cores are ordered by what the hardware does, not by counting: a barrier joins
the cores holding its tag, a ring message orders its sender before its
receiver. A program whose synchronisation leaves a DRAM write and another core's
access to the same bytes unordered is a race, whatever its outputs."""

from __future__ import annotations

import dataclasses

import pytest
import sympy

from spyre_shims.kernel_ir import Instr, KernelGroup, LoopKernel, Ref
from tests.support import kernels as K

from spyre_adapter.model.machine import DEFAULT
from spyre_adapter.model.ordering import order_of
from spyre_adapter.model.program import Alloc, Barrier, DmaLoad, DmaStore, Lx, Program, RingRecv, RingSend
from spyre_adapter.model.rules import EmulatorError, static_check
from spyre_adapter.scheduler.loops import Division, plan_group

N = 128


def _transpose_group() -> KernelGroup:
    """Two phases: every core writes rows of ``t``, then reads columns of it
    (bytes other cores wrote): the cores must be ordered in between."""
    k0 = LoopKernel("op0", (sympy.Integer(N), sympy.Integer(N)), (), (
        Instr("load", ("a", K.I0 * N + K.I1), "float32"), Instr("store", ("t", K.I0 * N + K.I1, Ref(0), None))))
    k1 = LoopKernel("op1", (sympy.Integer(N), sympy.Integer(N)), (), (
        Instr("load", ("t", K.I1 * N + K.I0), "float32"), Instr("store", ("c", K.I0 * N + K.I1, Ref(0), None))))
    return KernelGroup("tr", (k0, k1), (K.buf("a", (N, N), "float32"), K.buf("t", (N, N), "float32", "internal"),
                                        K.buf("c", (N, N), "float32", "output")), ("a", "c"))


@pytest.fixture(scope="module")
def phased() -> tuple[Program, KernelGroup]:
    g = _transpose_group()
    p = plan_group(g, DEFAULT, {}, "tr", force=Division(4))
    assert p.plan.workspace == ("t",)
    assert all(any(isinstance(i, Barrier) for i in c.instrs) for c in p.cores if c.instrs)
    return p, g


def _spliced(p: Program, core: int, at: int, remove: int, insert: list) -> Program:
    """``p`` with core ``core``'s stream spliced (its allocation table kept in step)."""
    cores = tuple(c.spliced(at, remove, insert) if c.core == core else c for c in p.cores)
    return dataclasses.replace(p, cores=cores)


def _barriers(p: Program, core: int) -> list[int]:
    return [i for i, ins in enumerate(p.core(core).instrs) if isinstance(ins, Barrier)]


def test_the_planned_phases_are_ordered_and_compute_the_reference(phased) -> None:
    p, g = phased
    got, want = K.run_program(p, g)
    K.assert_same(got, want, ["c"], atol=0, rtol=0)


def test_a_retagged_barrier_orders_nothing(phased) -> None:
    """The same number of barriers on every core, one of them with a tag no other
    core holds: that core passes alone, so its writes race the others' reads."""
    p, g = phased
    core = p.cores[1].core
    i = _barriers(p, core)[0]
    bad = _spliced(p, core, i, 1, [Barrier(10_000 + p.core(core).instrs[i].tag)])
    with pytest.raises(EmulatorError, match="unordered DRAM access|cross-core write conflict") as e:
        K.run_program(bad, g)
    assert "not ordered by any barrier or ring message" in str(e.value)


def test_dropping_one_cores_barrier_is_a_race(phased) -> None:
    """One core skips its (last) barrier: the other cores' barrier releases
    without it, and its writes are no longer ordered before their reads."""
    p, g = phased
    core = p.cores[0].core
    i = _barriers(p, core)[-1]
    with pytest.raises(EmulatorError, match="unordered DRAM access|cross-core write conflict"):
        K.run_program(_spliced(p, core, i, 1, []), g)


def test_ring_messages_order_their_sender_before_their_receiver(phased) -> None:
    """The barrier replaced by ring messages (every core tells every other it is
    done, then waits to hear from all): ordered, the same results; drop one
    receive's partner message and the order is gone."""
    p, g = phased
    cores = [c.core for c in p.cores if c.instrs]
    assert len({len(_barriers(p, c)) for c in cores}) == 1
    inbox = Lx(DEFAULT.lx_usable_bytes - DEFAULT.stick_bytes, "float32", (1,), (1,))  # bytes no step uses
    out = p
    for c in cores:
        instrs = p.core(c).instrs
        i = _barriers(p, c)[0]
        stored = next(ins.src for ins in reversed(instrs[:i]) if isinstance(ins, DmaStore))
        token = Lx(stored.addr, stored.dtype, (1,), (1,))  # a word this core has written by now
        others = tuple(o for o in cores if o != c)
        msgs = [RingSend(others, token, 500 + c)] + [RingRecv(o, inbox, 500 + o) for o in others]
        out = _spliced(out, c, i, 1, msgs)
        # the inbox is the core's own allocation, live over the whole stream
        box = Alloc("inbox", inbox.addr, DEFAULT.stick_bytes, 0, len(out.core(c).instrs) - 1)
        out = dataclasses.replace(out, cores=tuple(dataclasses.replace(k, allocs=k.allocs + (box,)) if k.core == c else k
                                                   for k in out.cores))
    got, want = K.run_program(out, g)
    K.assert_same(got, want, ["c"], atol=0, rtol=0)
    # the first core hears only from itself: its reads are no longer after the others' writes
    first = cores[0]
    drop = next(k for k, ins in enumerate(out.core(first).instrs) if isinstance(ins, RingRecv) and ins.peer == cores[1])
    bad = _spliced(out, first, drop, 1, [])
    numels = {"a": N * N, "t": N * N, "c": N * N}
    with pytest.raises(EmulatorError, match="unordered DRAM access|cross-core write conflict"):
        static_check(bad, DEFAULT, numels)


def test_the_order_is_partial_not_global() -> None:
    """Two pairs of cores each joined by their own barrier tag: each pair is ordered
    within itself and concurrent with the other pair."""
    g = K.add(64, 512)
    p = plan_group(g, DEFAULT, {}, "add", force=Division(4))
    cores = [c.core for c in p.cores if c.instrs]
    assert len(cores) == 4
    out = p
    for k, c in enumerate(cores):
        out = _spliced(out, c, 1, 0, [Barrier(7 + k // 2)])
    o = order_of(out)
    a, b, c_, d = ((c, o.segment_of(c, len(out.core(c).instrs) - 1)) for c in cores)
    first = [(c, 0) for c in cores]
    assert o.before(first[0], b) and o.before(first[1], a)       # same pair: before each other's after-barrier part
    assert o.concurrent(first[0], c_) and o.concurrent(first[2], a)  # other pair: concurrent
    assert o.concurrent(a, b)                                    # after the barrier, the pair runs concurrently


def test_a_barrier_some_core_never_reaches_deadlocks_statically() -> None:
    g = K.add(64, 512)
    p = plan_group(g, DEFAULT, {}, "add", force=Division(2))
    c0, c1 = (c.core for c in p.cores if c.instrs)
    out = _spliced(p, c0, len(p.core(c0).instrs), 0, [Barrier(1)])
    recv = RingRecv(c0, next(i.dst for i in p.core(c1).instrs if isinstance(i, DmaLoad)), 3)
    out = _spliced(out, c1, len(p.core(c1).instrs), 0, [Barrier(1)])
    out = _spliced(out, c1, 0, 0, [recv])
    with pytest.raises(EmulatorError, match="deadlock"):
        order_of(out)
