"""Loops in Spyre programs (spyre_adapter.model.loops, program.Loop): a looped
program is the program built unrolled, exactly; the emulator runs it and gets
CPU eager's product; the static rules and the timing model take it without
unrolling and agree with the unrolled program; its JSON is versioned and bounded."""

from __future__ import annotations

import dataclasses
import json

import pytest

from tests.support import kernels as K

from spyre_adapter.model import loop_steps, loops, rules, timing
from spyre_adapter.model.errors import EmulatorError
from spyre_adapter.model.isa import listing
from spyre_adapter.model.machine import DEFAULT
from spyre_adapter.model.program import (PROGRAM_VERSION, CoreProgram, DmaStore, Loop, MatmulPlan, Program,
                                         ProgramFormatError, from_json, to_json)
from spyre_adapter.scheduler.matmul import Grid, shape_of
from spyre_adapter.scheduler.matmul_program import build, build_looped

# (M, N, K) and a grid whose walk is long enough to loop: 16 or 32 tiles per core
CASES = [((2048, 512, 256), Grid(1, 4, 8, 1, 32, 64, 256, True, "b")),
         ((8192, 1024, 512), Grid(1, 4, 4, 2, 64, 256, 256, True, "b")),
         ((4096, 1024, 256), Grid(1, 4, 8, 1, 64, 64, 256, True, "a"))]


def _plan(g: Grid) -> MatmulPlan:
    return MatmulPlan((g.gb, g.gm, g.gn, g.gk), (g.tm, g.tn, g.tk), g.order, True, 1.0, 0.0)


def _both(shape: tuple[int, int, int], g: Grid) -> tuple[object, Program, Program]:
    kern = K.mm(*shape)
    s = shape_of(kern, {})
    looped = build_looped(kern, s, g, DEFAULT, {}, "mm", True, _plan(g))
    assert looped is not None
    return kern, looped, build(kern, s, g, DEFAULT, {}, "mm", True, _plan(g))


def _numels(kern: object) -> dict[str, int]:
    return {b.name: int(b.storage_numel) for b in kern.buffers}  # type: ignore[attr-defined]


@pytest.mark.parametrize("shape, g", CASES)
def test_a_looped_program_is_the_program_built_unrolled(shape, g) -> None:
    _, looped, flat = _both(shape, g)
    for a, b in zip(looped.cores, flat.cores):
        assert a.steps == b.instrs
        assert sorted(a.alloc_table, key=lambda x: (x.last, x.first, x.addr)) == \
            sorted(b.allocs, key=lambda x: (x.last, x.first, x.addr))
    stored = sum(len(c.instrs) for c in looped.cores)
    assert any(c.looped for c in looped.cores) and stored * 4 < sum(c.n_steps for c in looped.cores)


def test_a_walk_ending_on_an_edge_tile_is_not_looped() -> None:
    """4032 rows: every core walks 1008 rows in 32 tiles of 32, the last one 16
    rows short, which no prefix shows (a loop extrapolated from the prefixes
    would store 16 rows too many on every core)."""
    from spyre_adapter.scheduler.matmul_program import loop_unit
    kern = K.mm(4032, 512, 256)
    g = Grid(1, 4, 8, 1, 32, 64, 256, True, "b")
    assert loop_unit(shape_of(kern, {}), g, DEFAULT) is None
    assert build_looped(kern, shape_of(kern, {}), g, DEFAULT, {}, "mm", True, _plan(g)) is None


def test_mutants_of_a_looped_program_are_caught() -> None:
    """The mutation operators edit the program unrolled; the checker and the
    reference comparison kill them as they do the unrolled program's."""
    from spyre_adapter.bench.mutants import mutants
    _, looped, flat = _both(*CASES[0])
    got = mutants(looped, DEFAULT, 1, seed=3)
    want = mutants(flat, DEFAULT, 1, seed=3)
    # (operators choosing by the allocation table may pick another allocation: the
    # unrolled table is ordered by last step, the builder's by first)
    by_table = {"overlap_alloc", "lx_overflow", "misalign_alloc", "shrink_alloc"}
    assert got and [m.operator for m in got] == [m.operator for m in want]
    assert all(a.program.cores[a.core].instrs == b.program.cores[b.core].instrs
               for a, b in zip(got, want) if a.operator not in by_table)


def test_the_emulator_runs_a_looped_program() -> None:
    kern, looped, _ = _both(*CASES[0])
    got, want = K.run_program(looped, kern)
    K.assert_same(got, want, ["c"], atol=0.1, rtol=1e-2)


@pytest.mark.parametrize("shape, g", CASES)
def test_the_rules_check_a_loop_without_unrolling_it(shape, g) -> None:
    kern, looped, flat = _both(shape, g)
    assert rules._looped_check(looped, DEFAULT, _numels(kern)) is not None  # the shortcut applies
    assert rules.static_check(looped, DEFAULT, _numels(kern)) == rules.static_check(flat, DEFAULT, _numels(kern))


def _move_store(p: Program, core: int, fn) -> Program:
    """``p`` with core ``core``'s looped store's region changed by ``fn(store, loop)``."""
    c = p.core(core)
    pos = next(i for i, x in enumerate(c.instrs) if isinstance(x, Loop))
    loop = c.instrs[pos]
    j = next(i for i, x in enumerate(loop.body) if isinstance(x, DmaStore))
    body = list(loop.body)
    body[j], advance = fn(body[j], loop, j)
    loop = dataclasses.replace(loop, body=tuple(body), advance=advance)
    cores = tuple(dataclasses.replace(x, instrs=x.instrs[:pos] + (loop,) + x.instrs[pos + 1:]) if x.core == core else x
                  for x in p.cores)
    return dataclasses.replace(p, cores=cores)


def test_a_store_out_of_bounds_in_the_last_iteration_is_caught() -> None:
    """The first iterations are in bounds; only the last one runs past the output."""
    kern, looped, _ = _both(*CASES[0])

    def longer_stride(st, loop, j):
        k = loop_steps.leaf_labels(st).index("Region.offset")
        assert any((jj, kk) == (j, k) for jj, kk, _ in loop.advance)  # the store's offset moves
        return st, tuple((jj, kk, s * 3 if (jj, kk) == (j, k) else s) for jj, kk, s in loop.advance)
    bad = _move_store(looped, 31, longer_stride)
    with pytest.raises(EmulatorError, match="DMA outside a tensor's bytes"):
        rules.static_check(bad, DEFAULT, _numels(kern))


def test_a_race_in_a_late_iteration_is_caught() -> None:
    """Core 1 starts its stores where core 0's tenth iteration stores: the first
    iterations of both are apart, the footprints over the loop are not, and the
    unrolled check names the race."""
    kern, looped, _ = _both(*CASES[0])
    c0 = looped.core(0)
    loop0 = next(x for x in c0.instrs if isinstance(x, Loop))
    j0 = next(i for i, x in enumerate(loop0.body) if isinstance(x, DmaStore))
    k0 = loop_steps.leaf_labels(loop0.body[j0]).index("Region.offset")
    step0 = next(s for jj, kk, s in loop0.advance if (jj, kk) == (j0, k0))
    target = loop0.body[j0].dst.offset + 10 * step0

    def onto_core0(st, loop, j):
        return dataclasses.replace(st, dst=dataclasses.replace(st.dst, offset=target)), loop.advance
    bad = _move_store(looped, 1, onto_core0)
    assert rules._looped_check(bad, DEFAULT, _numels(kern)) is None  # not apart: the unrolled check decides
    with pytest.raises(EmulatorError, match="cross-core write conflict|misaligned sticks"):
        rules.static_check(bad, DEFAULT, _numels(kern))


@pytest.mark.parametrize("shape, g", CASES)
def test_a_loop_is_timed_from_three_runs_within_one_percent(shape, g) -> None:
    _, looped, flat = _both(shape, g)
    extrapolated = timing._looped(looped, DEFAULT)
    assert extrapolated is not None
    whole = timing.simulate(flat, DEFAULT, keep_events=False)
    assert abs(extrapolated.total_ns - whole.total_ns) <= 0.01 * whole.total_ns
    assert abs(extrapolated.dram_bytes - whole.dram_bytes) <= 0.01 * whole.dram_bytes


def test_json_keeps_the_loops_and_the_listing_shows_them() -> None:
    _, looped, _ = _both(*CASES[0])
    text = to_json(looped)
    back = from_json(text)
    assert back == looped and back.cores[0].looped
    assert json.loads(text)["version"] == PROGRAM_VERSION >= 4
    shown = listing(looped, max_instrs=60)
    assert "loop " in shown and "end loop" in shown and "steps unrolled" in shown
    # what follows a loop is shown as it runs: the allocations after it end where the unrolled table's do
    import re
    core0 = listing(dataclasses.replace(looped, cores=looped.cores[:1]))
    lasts = [int(x) for x in re.findall(r"steps \d+-(\d+)", core0)]
    assert max(lasts) == max(a.last for a in looped.cores[0].alloc_table)


def _with_core0(p: Program, core: CoreProgram) -> str:
    return to_json(dataclasses.replace(p, cores=(core, *p.cores[1:])))


@pytest.mark.parametrize("change, message", [
    (lambda lp: dataclasses.replace(lp, trips=0), "trips 0"),
    (lambda lp: dataclasses.replace(lp, trips=1 << 40), "trips"),
    (lambda lp: dataclasses.replace(lp, advance=((len(lp.body), 0, 1),)), "names no integer"),
    (lambda lp: dataclasses.replace(lp, advance=((0, 99, 1),)), "names no integer"),
    (lambda lp: Loop(2, (Loop(2, (Loop(2, (Loop(2, (dataclasses.replace(lp, after=()),)),)),)),)), "nested deeper"),
    (lambda lp: dataclasses.replace(lp, after=((10**6, 0, 1),)), "names no integer of a later step"),
])
def test_the_loader_rejects_malformed_loops(change, message) -> None:
    _, looped, _ = _both(*CASES[0])
    c = looped.cores[0]
    pos = next(i for i, x in enumerate(c.instrs) if isinstance(x, Loop))
    bad = dataclasses.replace(c, instrs=c.instrs[:pos] + (change(c.instrs[pos]),) + c.instrs[pos + 1:])
    with pytest.raises(ProgramFormatError, match=message):
        from_json(_with_core0(looped, bad))


def test_fold_finds_no_loop_where_the_moves_change() -> None:
    """A stream whose offsets step 1, 2, 3 (not constant) has no loop."""
    from spyre_adapter.model.program import DmaLoad, Lx, Region
    steps = [DmaLoad(Region("a", off, (4,), (1,)), Lx(0, "float16", (4,), (1,))) for off in (0, 1, 3, 6, 10, 15)]
    assert loops.fold(steps, 1) is None
    even = [DmaLoad(Region("a", 4 * i, (4,), (1,)), Lx(0, "float16", (4,), (1,))) for i in range(6)]
    f = loops.fold(even, 1)
    assert f is not None and f.trips == 6 and list(loop_steps.expand(loops.looped(f))) == even


def test_a_compiled_matmul_runs_its_looped_program_on_the_device(monkeypatch: pytest.MonkeyPatch) -> None:
    """With walks of 3 loop units looped (24 in use), the planner's chosen program
    for a compiled product is looped: launched, checked, timed from its loop and
    reported, it computes what CPU eager does."""
    import torch

    from spyre_shims.runtime import reset_compiled

    from spyre_adapter.backend.session import current
    from spyre_adapter.emulator import executable
    from spyre_adapter.harness.on_device import run_compiled
    from spyre_adapter.scheduler import matmul_program

    monkeypatch.setattr(matmul_program, "LOOP_MIN_UNITS", 3)
    ran: list[Program] = []
    real = executable.execute
    monkeypatch.setattr(executable, "execute", lambda p, *a, **k: ran.append(p) or real(p, *a, **k))  # records
    g = torch.Generator().manual_seed(0)
    x, w = torch.randn(4096, 256, generator=g), torch.randn(256, 512, generator=g)
    reset_compiled()
    before = current().report.launch_count
    out, fallbacks = run_compiled(lambda a, b: a @ b, (x, w))
    assert not fallbacks
    torch.testing.assert_close(out, x @ w, atol=1e-3, rtol=1e-3)
    assert ran and all(any(c.looped for c in p.cores) for p in ran)  # the launched program is looped
    assert current().report.launch_count > before
    assert any(r["kind"] == "matmul" and r["launches"] and r["modeled_ns"] > 0 for r in current().report.per_kernel())
