"""spyre_adapter.scheduler.matmul: the grid search by the closed-form cost, and
the programs it emits computing the product on the emulator."""

from __future__ import annotations

import pytest
import torch

from spyre_shims.runtime import reset_compiled
from tests.support import kernels as K

from spyre_adapter.backend.spyre import plan
from spyre_adapter.harness.on_device import run_compiled
from spyre_adapter.model.errors import DoesNotFit
from spyre_adapter.model.machine import DEFAULT, Machine
from spyre_adapter.scheduler.matmul import TIE_SLACK, candidates, choose, plan_matmul, rank, shape_of


@pytest.mark.parametrize("shape", [(64, 64, 64), (200, 300, 500), (256, 1024, 384), (12, 4096, 1024)])
def test_matmul_programs_compute_the_product(shape) -> None:
    kern = K.mm(*shape)
    p = plan(kern, DEFAULT, {})
    got, want = K.run_program(p, kern)
    K.assert_same(got, want, ["c"], atol=0.1, rtol=1e-2)


def test_a_shared_slice_is_split_on_stick_boundaries() -> None:
    """Four cores share each A slice of a 12 x 1024 x 1080 fp16 product, each
    loading a part and multicasting it: a row is 2160 bytes, so only every 8th
    row starts on a stick and the parts are cut there (an even cut put a DMA at
    LX byte 6480, and gpt-oss's 12 x 201088 x 2880 lm_head had no program)."""
    from spyre_adapter.model.program import MatmulPlan, RingSend
    from spyre_adapter.scheduler.matmul import Grid
    from spyre_adapter.scheduler.matmul_program import build

    kern = K.mm(12, 1024, 1080)
    p = build(kern, shape_of(kern, {}), Grid(1, 1, 4, 1, 12, 256, 1080), DEFAULT, {}, "g", True,
              MatmulPlan((1, 1, 4, 1), (12, 256, 1080), "c", True, 1.0, 0.0))
    sends = [i for c in p.cores for i in c.instrs if isinstance(i, RingSend)]
    assert sorted(i.src.sizes[0] for i in sends) == [4, 8]  # rows [0, 8) and [8, 12): two owners of four
    got, want = K.run_program(p, kern)
    K.assert_same(got, want, ["c"], atol=0.1, rtol=1e-2)


def test_uneven_blocks_share_operands_only_with_matching_cores() -> None:
    """granite's lm_head (1 x 49159 x 4096): N does not split evenly, so the last
    core walks fewer tiles; the chosen program completes and is right."""
    kern = K.mm(1, 49159, 512, "bfloat16")
    p = plan_matmul(kern, DEFAULT, {}, "mm")
    got, want = K.run_program(p, kern)
    K.assert_same(got, want, ["c"], atol=0.1, rtol=2e-2)


@pytest.mark.parametrize("m", [DEFAULT, Machine.from_spec("cores=8,lx_kib=512")])
def test_ranking_is_cheapest_first_and_every_grid_fits(m: Machine) -> None:
    s = shape_of(K.mm(512, 1024, 768), {})
    ranked = rank(s, m)
    assert ranked and choose(s, m) == ranked[0]
    best = min(c.total_ns for _, c in ranked)
    near = [c for _, c in ranked if c.total_ns <= best * (1 + TIE_SLACK)]
    # the near-ties come first, the smallest program first; then cheapest first
    assert all(c.total_ns <= best * (1 + TIE_SLACK) for _, c in ranked[:len(near)])
    assert [c.instrs for c in near] == sorted(c.instrs for c in near)
    rest = [round(c.total_ns) for _, c in ranked[len(near):]]
    assert rest == sorted(rest)
    assert all(g.cores <= m.cores and c.lx_bytes <= m.lx_usable_bytes for g, c in ranked)


def test_max_cores_and_the_even_split_baseline() -> None:
    s = shape_of(K.mm(256, 512, 512), {})
    assert all(g.cores <= 4 for g, _ in rank(s, DEFAULT, max_cores=4))
    ((even, _),) = candidates(s, DEFAULT, naive=True)
    assert even.gk == 1 and even.order == "c" and (even.tm, even.tn, even.tk) == (64, 64, 64)


def test_a_matmul_no_tiling_fits_is_refused() -> None:
    tiny = DEFAULT.replace(lx_bytes=4096, lx_usable_bytes=2048)
    with pytest.raises(DoesNotFit):
        choose(shape_of(K.mm(64, 4096, 4096), {}), tiny)


@pytest.mark.parametrize("bias_shape", [(), (1,), (96,), (1, 96), (64, 1), (1, 1)])
def test_addmm_bias_broadcasts_from_any_shape(bias_shape) -> None:
    """A 0-d or size-1 bias (OpInfo's addmm samples) is read once per column
    tile and broadcast; the planned program runs, with no host fallback."""
    g = torch.Generator().manual_seed(0)
    b, x, y = torch.randn(bias_shape, generator=g), torch.randn(64, 40, generator=g), torch.randn(40, 96, generator=g)
    fn = lambda b, x, y: torch.addmm(b, x, y, alpha=0.6, beta=0.2)  # noqa: E731
    reset_compiled()
    out, fallbacks = run_compiled(fn, (b, x, y))
    assert not fallbacks
    torch.testing.assert_close(out, fn(b, x, y), atol=1e-4, rtol=1e-4)


def _grid_plan(g):
    from spyre_adapter.model.program import MatmulPlan
    return MatmulPlan((g.gb, g.gm, g.gn, g.gk), (g.tm, g.tn, g.tk), g.order, g.share, 1.0, 0.0)


def _assert_timelines_agree(est, whole) -> None:
    """An extrapolated timeline against the whole simulation's: the total, the
    bytes moved, each core's end and every engine's busy time within 1 %."""
    def near(a: float, b: float) -> bool:
        return abs(a - b) <= 0.01 * max(abs(b), 1.0)

    assert near(est.total_ns, whole.total_ns), (est.total_ns, whole.total_ns)
    assert near(est.dram_read_bytes, whole.dram_read_bytes) and near(est.dram_write_bytes, whole.dram_write_bytes)
    assert near(est.ring_bytes, whole.ring_bytes)
    assert est.core_end.keys() == whole.core_end.keys() and est.busy.keys() == whole.busy.keys()
    assert all(near(est.core_end[c], whole.core_end[c]) for c in whole.core_end)
    assert all(est.busy[c].keys() == whole.busy[c].keys() and all(near(est.busy[c][e], v) for e, v in per.items())
               for c, per in whole.busy.items())


@pytest.mark.parametrize("grid", [(1, 8, 1, 1, 64, 64, 64, "a"), (1, 16, 1, 1, 32, 128, 128, "a")])
def test_a_time_extrapolated_from_prefixes_is_within_one_percent_of_the_whole_simulation(grid) -> None:
    """8192 x 256 x 256 in A-stationary passes of 4 and 8 tiles per core: three
    prefixes of the program time it within 1 % of simulating all of it."""
    from spyre_adapter.model.timing import simulate
    from spyre_adapter.scheduler.matmul import Grid, extrapolated, prefix_tiles
    from spyre_adapter.scheduler.matmul_program import build

    kern = K.mm(8192, 256, 256)
    s, g = shape_of(kern, {}), Grid(*grid[:7], True, grid[7])
    assert prefix_tiles(s, g, DEFAULT) is not None
    est = extrapolated(kern, s, g, DEFAULT, {}, "mm", True, _grid_plan(g))
    whole = simulate(build(kern, s, g, DEFAULT, {}, "mm", True, _grid_plan(g)), DEFAULT, keep_events=False)
    assert est is not None
    _assert_timelines_agree(est, whole)


def test_a_one_pass_program_is_timed_from_prefixes_of_single_tiles() -> None:
    """A one-dimensional A-stationary division (2048 x 4096 x 512 on 32 x 1
    cores): the panel stays for the whole program, so prefixes of 2, 3 and 4
    tiles time its 16 tiles, within 1 % of simulating all of it."""
    from spyre_adapter.model.timing import simulate
    from spyre_adapter.scheduler.matmul import Grid, extrapolated, prefix_tiles
    from spyre_adapter.scheduler.matmul_program import build

    kern = K.mm(2048, 4096, 512)  # (m, n, k)
    s, g = shape_of(kern, {}), Grid(1, 32, 1, 1, 64, 256, 128, True, "a")
    assert prefix_tiles(s, g, DEFAULT) == (16, (2, 3, 4))
    est = extrapolated(kern, s, g, DEFAULT, {}, "mm", True, _grid_plan(g))
    whole = simulate(build(kern, s, g, DEFAULT, {}, "mm", True, _grid_plan(g)), DEFAULT, keep_events=False)
    assert est is not None
    _assert_timelines_agree(est, whole)


@pytest.mark.parametrize("case", [((2048, 2048, 512), (1, 4, 8, 1, 64, 64, 128)),
                                  ((4096, 1024, 1024), (1, 8, 4, 1, 128, 64, 128))])
def test_a_program_with_nothing_stationary_is_timed_from_prefixes_of_two_four_and_six_tiles(case) -> None:
    """Order "c" (no operand stays in LX): from its first pair of tiles every pair
    is alike, and prefixes of 2, 4 and 6 tiles time the whole program within
    1 % in every figure."""
    from spyre_adapter.model.timing import simulate
    from spyre_adapter.scheduler.matmul import Grid, extrapolated, prefix_tiles
    from spyre_adapter.scheduler.matmul_program import build, tile_loops

    (mm, nn, kk), grid = case
    kern = K.mm(mm, nn, kk)
    s, g = shape_of(kern, {}), Grid(*grid, True, "c")
    assert prefix_tiles(s, g, DEFAULT) == (tile_loops(s, g, DEFAULT)[0], (2, 4, 6))
    est = extrapolated(kern, s, g, DEFAULT, {}, "mm", True, _grid_plan(g))
    whole = simulate(build(kern, s, g, DEFAULT, {}, "mm", True, _grid_plan(g)), DEFAULT, keep_events=False)
    assert est is not None
    _assert_timelines_agree(est, whole)


def test_a_program_whose_passes_are_not_steady_is_not_extrapolated(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two A panels per core row (8 x 2 cores), LX placed first fit: successive
    passes' times differ, and the prefixes decline to time it (it is then
    simulated whole). (Placed by role, as the planner does, its passes are
    steady and the extrapolation is exact.)"""
    import functools

    from spyre_adapter.scheduler import matmul, matmul_program
    from spyre_adapter.scheduler.matmul import Grid, extrapolated, prefix_tiles

    monkeypatch.setattr(matmul, "build_program", functools.partial(matmul_program.build, periodic=False))
    kern = K.mm(8192, 256, 256)
    s, g = shape_of(kern, {}), Grid(1, 8, 2, 1, 64, 64, 64, True, "a")
    assert prefix_tiles(s, g, DEFAULT) is not None
    assert extrapolated(kern, s, g, DEFAULT, {}, "mm", True, _grid_plan(g)) is None


def test_a_candidate_timed_from_prefixes_is_built_whole_when_chosen(monkeypatch: pytest.MonkeyPatch) -> None:
    """With every candidate long enough timed from prefixes, the chosen program
    still computes the whole product, and it is as fast as what whole
    simulations choose (4 cores with 512 KiB of LX: 64 tiles a core)."""
    from spyre_adapter.model.timing import simulate
    from spyre_adapter.scheduler import matmul

    m = Machine.from_spec("cores=4,lx_kib=512")
    kern = K.mm(2048, 512, 512)
    whole = plan_matmul(kern, m, {}, "mm")
    monkeypatch.setattr(matmul, "EXTRAPOLATE_MIN_STEPS", 0)
    calls = []
    real = matmul.extrapolated
    monkeypatch.setattr(matmul, "extrapolated", lambda *a: calls.append(real(*a)) or calls[-1])
    p = plan_matmul(kern, m, {}, "mm")
    assert any(t is not None for t in calls)  # some candidate was timed from prefixes
    # (with events: simulated step by step, not the time the planner found)
    t_whole, t_p = (simulate(x, m, keep_events=True).total_ns for x in (whole, p))
    assert t_p <= 1.01 * t_whole
    # what measuring the chosen program answers (its prefixes' timeline, kept) is its simulation's
    assert abs(simulate(p, m, keep_events=False).total_ns / t_p - 1) < 0.01
    got, want = K.run_program(p, kern, m)
    K.assert_same(got, want, ["c"], atol=0.1, rtol=1e-2)


def test_a_chosen_program_timed_from_prefixes_is_measured_by_that_timeline(monkeypatch: pytest.MonkeyPatch) -> None:
    """When the program chosen was timed from its prefixes, measuring it answers
    with that timeline instead of simulating every step again (an 8192^3 GEMM's
    program is a million steps); the answer agrees with the step-by-step
    simulation within 1 % in every figure (8 cores, 512 KiB of LX)."""
    from spyre_adapter.model import timing
    from spyre_adapter.scheduler import matmul

    m = Machine.from_spec("cores=8,lx_kib=512")
    kern = K.mm(2048, 1024, 256)
    monkeypatch.setattr(matmul, "EXTRAPOLATE_MIN_STEPS", 0)
    kept = []
    monkeypatch.setattr(matmul, "remember", lambda p, mm, tl: (kept.append(p), timing.remember(p, mm, tl)))
    p = plan_matmul(kern, m, {}, "mm")
    assert any(x is p for x in kept)
    measured = timing.simulate(p, m, keep_events=False)
    assert measured is timing.simulate(p, m, keep_events=False)  # kept, not simulated again
    _assert_timelines_agree(measured, timing.simulate(p, m, keep_events=True))


def test_a_grid_whose_cores_span_too_much_is_refused_before_building_with_the_rules_figure() -> None:
    # A decode LM head shape scaled down: 12 x 8192 x 1024 fp16 split over N only, so
    # each core's B block runs over K rows of the whole row-major weight.
    from spyre_adapter.bench.suite import gemm_kernel
    from spyre_adapter.model.errors import EmulatorError
    from spyre_adapter.model.rules import static_check
    from spyre_adapter.scheduler.matmul import plan_grid

    k = gemm_kernel("lm", 12, 8192, 1024)
    numels = {b.name: int(b.storage_numel) for b in k.buffers}
    tight = DEFAULT.replace(span_bytes_per_core=1 << 20)
    with pytest.raises(DoesNotFit, match=r"per-core span of b \(b\): (\d+) B > 1048576 B") as refused:
        plan_grid(k, tight, {}, "lm", (1, 1, 32, 1))
    # the same grid built where the span is allowed, then checked against the tight limit
    p = plan_grid(k, DEFAULT, {}, "lm", (1, 1, 32, 1))
    with pytest.raises(EmulatorError, match="per-core span exceeded") as rules:
        static_check(p, tight, numels)
    closed_form = refused.value.what.rsplit(": ", 1)[1].split(" B")[0]
    assert f"{closed_form} B > 1048576 B" in str(rules.value)
