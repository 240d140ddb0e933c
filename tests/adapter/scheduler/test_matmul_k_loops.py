"""Matmul programs with each output tile's K walk written as a loop: the builder
writes three iterations and folds them, and the program is, step for step, the
one it writes unrolled; checking, timing and running it give what the unrolled
program gives."""

from __future__ import annotations

import pytest

from tests.support import kernels as K

from spyre_adapter.model.loop_steps import max_depth
from spyre_adapter.model.loops import Run, fold_runs
from spyre_adapter.model.machine import DEFAULT
from spyre_adapter.model.program import DmaLoad, Loop, Lx, MatmulPlan, Region, Resident, RingSend
from spyre_adapter.model.rules import static_check
from spyre_adapter.model.timing import simulate
from spyre_adapter.scheduler.matmul import Grid, plan_matmul, shape_of
from spyre_adapter.scheduler.matmul_program import build, build_k_looped, k_loop_split


def _plan(g: Grid) -> MatmulPlan:
    return MatmulPlan((g.gb, g.gm, g.gn, g.gk), (g.tm, g.tn, g.tk), g.order, g.share, 1.0, 0.0)


def _numels(kern) -> dict[str, int]:
    return {b.name: int(b.storage_numel) for b in kern.buffers}


def _alloc_key(a):
    return a.first, a.last, a.addr, a.name, a.nbytes


# (M, N, K), grid (gb, gm, gn, gk, tm, tn, tk, share, order): streamed slices (order "c"),
# stationary panels ("a", "b"), a K split, an odd number of K steps, no ring sharing
CASES = [
    ((256, 256, 4096), (1, 4, 4, 2, 64, 64, 64, True, "c")),
    ((512, 512, 4096), (1, 4, 4, 2, 128, 64, 64, True, "a")),
    ((512, 512, 4096), (1, 4, 4, 2, 64, 128, 64, True, "b")),
    ((256, 512, 4224), (1, 2, 4, 1, 64, 128, 128, True, "c")),
    ((256, 256, 4096), (1, 4, 4, 1, 64, 64, 128, False, "c")),
    # K loops cut to a few iterations can look steady and change pace later: simulated unrolled
    ((1024, 1024, 2048), (1, 4, 8, 1, 32, 128, 64, True, "b")),
]


@pytest.mark.parametrize(("mnk", "grid"), CASES)
def test_a_k_looped_program_is_the_unrolled_program(mnk, grid) -> None:
    kern = K.mm(*mnk)
    s, g = shape_of(kern, {}), Grid(*grid)
    unrolled = build(kern, s, g, DEFAULT, {}, "mm", g.share, _plan(g))
    looped = build_k_looped(kern, s, g, DEFAULT, {}, "mm", g.share, _plan(g))
    assert looped is not None
    busy = [c for c in looped.cores if c.instrs]
    assert busy and all(any(isinstance(x, Loop) for x in c.instrs) for c in busy)
    assert all(max_depth(c.instrs) == 1 for c in busy)
    assert sum(len(c.instrs) for c in looped.cores) < sum(len(c.instrs) for c in unrolled.cores) / 2
    for u, f in zip(unrolled.cores, looped.cores):
        assert f.steps == u.steps
        assert sorted(f.alloc_table, key=_alloc_key) == sorted(u.alloc_table, key=_alloc_key)
    assert static_check(looped, DEFAULT, _numels(kern)) == static_check(unrolled, DEFAULT, _numels(kern))
    t_u, t_f = (simulate(p, DEFAULT, keep_events=False).total_ns for p in (unrolled, looped))
    assert t_f == pytest.approx(t_u, rel=1e-12)  # simulated unrolled: the same steps


def test_a_k_looped_program_streaming_a_from_held_rows_is_the_unrolled_program() -> None:
    """A rows an earlier kernel left in four cores' LX, sent over the ring to
    the rest of each grid row: the K loop carries the sends and receives."""
    m_, n_, k_ = 256, 1024, 4096
    kern = K.mm(m_, n_, k_)
    s, g = shape_of(kern, {}), Grid(1, 4, 8, 1, 64, 128, 128, False, "c")
    rows = m_ // 4
    held = [Resident(c * 8, "a", c * rows * k_, (c + 1) * rows * k_, DEFAULT.lx_usable_bytes - rows * k_ * 2,
                     "float16") for c in range(4)]
    unrolled = build(kern, s, g, DEFAULT, {}, "mm", False, _plan(g), held)
    looped = build_k_looped(kern, s, g, DEFAULT, {}, "mm", False, _plan(g), a_held=held)
    assert looped is not None and any(isinstance(x, Loop) for c in looped.cores for x in c.instrs)
    assert any(isinstance(x, RingSend) for c in looped.cores for x in c.instrs if isinstance(x, Loop) for x in x.body)
    for u, f in zip(unrolled.cores, looped.cores):
        assert f.steps == u.steps
        assert sorted(f.alloc_table, key=_alloc_key) == sorted(u.alloc_table, key=_alloc_key)
    assert static_check(looped, DEFAULT, _numels(kern)) == static_check(unrolled, DEFAULT, _numels(kern))


def test_a_k_looped_program_computes_the_product() -> None:
    kern = K.mm(128, 128, 4096)
    s, g = shape_of(kern, {}), Grid(1, 2, 2, 1, 64, 64, 128, True, "c")
    p = build_k_looped(kern, s, g, DEFAULT, {}, "mm", True, _plan(g))
    assert p is not None and any(isinstance(x, Loop) for c in p.cores for x in c.instrs)
    got, want = K.run_program(p, kern)
    K.assert_same(got, want, ["c"], atol=0.5, rtol=2e-2)


def test_the_planner_writes_long_k_walks_as_loops_and_times_them_unrolled() -> None:
    kern = K.mm(256, 256, 8192)
    p = plan_matmul(kern, DEFAULT, {}, "mm")
    assert any(isinstance(x, Loop) for c in p.cores for x in c.instrs)
    s = shape_of(kern, {})
    g = Grid(p.plan.grid[0], p.plan.grid[1], p.plan.grid[2], p.plan.grid[3], *p.plan.tile, p.plan.share, p.plan.order)
    unrolled = build(kern, s, g, DEFAULT, {}, "mm", p.plan.share, p.plan)
    assert simulate(p, DEFAULT, keep_events=False).total_ns == pytest.approx(
        simulate(unrolled, DEFAULT, keep_events=False).total_ns, rel=1e-12)


def test_a_short_k_walk_is_not_a_loop() -> None:
    assert k_loop_split(31) is None
    head, period, trips, tail = k_loop_split(33)
    assert head + period * trips + tail == 33 and tail >= 2


def _load(offset: int, addr: int) -> DmaLoad:
    return DmaLoad(Region("a", offset, (4, 8), (8, 1)), Lx(addr, "float16", (4, 8), (8, 1)))


def test_iterations_that_do_not_move_alike_are_not_folded() -> None:
    steady = [_load(0, 0), _load(32, 0), _load(64, 0), _load(96, 0)]
    folded = fold_runs(steady, (), [Run(1, 1, 10)])
    assert folded is not None and folded[0][1] == Loop(10, (steady[1],), ((0, 0, 32),))
    bent = [_load(0, 0), _load(32, 0), _load(64, 0), _load(100, 0)]
    assert fold_runs(bent, (), [Run(1, 1, 10)]) is None
