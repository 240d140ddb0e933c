"""The timing model's schedule obeys the program's order, checked pair by pair.

The simulator keeps, per range, only the latest reader of each engine queue and
the dependence edges that are not implied by queue order, and tells interleaved
LX views apart by their rows. These tests derive every constraint directly from
the program instead (all pairs of one core's steps, the bytes each touches
enumerated element by element, all barrier peers) and check each one in the
simulated events: an independent statement of the ordering rules the simulator
compresses."""

from __future__ import annotations

import functools
import itertools

import pytest
import torch

from spyre_shims import kernel_ir as kir
from spyre_shims.runtime import capture_graphs, reset_compiled

from spyre_adapter.backend.spyre import plan
from spyre_adapter.bench.suite import gemm_kernel
from spyre_adapter.model import isa, timing
from spyre_adapter.model.machine import DEFAULT
from spyre_adapter.model.program import Barrier, Program, Region, RingRecv
from spyre_adapter.scheduler.loops import plan_group

_EPS = 1e-6


@functools.lru_cache(maxsize=None)
def _lx_bytes(v) -> tuple[tuple[int, int], ...]:
    """The byte intervals a view touches, enumerated element row by element row
    (independent of the timing model's footprints)."""
    if v.numel == 0:
        return ()
    inner = [(st, n) for st, n in zip(v.strides, v.sizes)]
    starts = [v.addr]
    for st, n in inner:
        starts = [a + j * st * v.itemsize for a in starts for j in range(n)]
    merged: list[list[int]] = []
    for a in sorted(set(starts)):
        if merged and a <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], a + v.itemsize)
        else:
            merged.append([a, a + v.itemsize])
    return tuple((a, b) for a, b in merged)


def _lx_overlap(xs, ys) -> bool:
    for v in xs:
        for u in ys:
            if not _overlap(v.byte_range(), u.byte_range()):
                continue
            p, q = _lx_bytes(v), _lx_bytes(u)
            i = j = 0
            while i < len(p) and j < len(q):
                if p[i][0] < q[j][1] and q[j][0] < p[i][1]:
                    return True
                if p[i][1] <= q[j][1]:
                    i += 1
                else:
                    j += 1
    return False


def _dram_ranges(refs) -> list[tuple[str, int, int]]:
    out = []
    for r in refs:
        if isinstance(r, Region):
            lo, hi = r.bounds()
            out.append((r.buffer, lo, hi + 1))
        else:
            out.append((r, -(1 << 62), 1 << 62))
    return out


def _overlap(a: tuple[int, int], b: tuple[int, int]) -> bool:
    return a[0] < b[1] and b[0] < a[1]


def _conflicts(p: Program, x, y, written: set[str]) -> bool:
    """Whether two steps of one core touch common LX bytes or elements of a
    buffer the core writes, one of them writing."""
    (xr, xw), (yr, yw) = isa.lx_accesses(x, p.bodies), isa.lx_accesses(y, p.bodies)
    if _lx_overlap(xw, yr + yw) or _lx_overlap(xr, yw):
        return True
    (dxr, dxw), (dyr, dyw) = isa.dram_accesses(x), isa.dram_accesses(y)
    for a_list, b_list in ((_dram_ranges(dxw), _dram_ranges(dyr + dyw)), (_dram_ranges(dxr), _dram_ranges(dyw))):
        for (ba, lo_a, hi_a), (bb, lo_b, hi_b) in itertools.product(a_list, b_list):
            if ba == bb and ba in written and _overlap((lo_a, hi_a), (lo_b, hi_b)):
                return True
    return False


def _check_order(p: Program) -> int:
    """Assert every ordering constraint of ``p`` in its simulated events; the
    number of constraints checked."""
    tl = timing.simulate(p, DEFAULT)
    when = {(e.core, e.index): (e.start, e.end) for e in tl.events}
    assert len(when) == sum(len(c.instrs) for c in p.cores)
    checked = 0
    barriers: dict[int, list[tuple[int, int]]] = {}
    for core in p.cores:
        steps = core.instrs
        written = {r.buffer if isinstance(r, Region) else r for s in steps for r in isa.dram_accesses(s)[1]}
        engines = [isa.engine(s) for s in steps]
        for i, j in itertools.combinations(range(len(steps)), 2):
            si, sj = steps[i], steps[j]
            sync_i, sync_j = isa.step(si).sync, isa.step(sj).sync
            must = (engines[i] == engines[j] or sync_i == "barrier" or sync_j == "barrier"
                    or _conflicts(p, si, sj, written))
            if must:
                assert when[(core.core, j)][0] >= when[(core.core, i)][1] - _EPS, (
                    f"core {core.core}: step {j} ({type(sj).__name__}) starts before step {i} "
                    f"({type(si).__name__}) ends")
                checked += 1
        for i, s in enumerate(steps):
            if isa.step(s).sync == "barrier":
                barriers.setdefault(s.tag, []).append((core.core, i))
    for members in barriers.values():
        # a barrier releases no core before every member arrived
        arrived = max(when[m][0] for m in members)
        assert all(when[m][1] >= arrived - _EPS for m in members)
    return checked


def _loop_groups(fn, *args) -> list[kir.KernelGroup]:
    reset_compiled()
    with capture_graphs() as graphs:
        torch.compile(fn, dynamic=False)(*[a.to("spyre") for a in args])
    return [k for g in graphs for k in g.kernels if isinstance(k, kir.KernelGroup)]


def _rms(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return b * a * torch.rsqrt(a.pow(2).mean(-1, keepdim=True) + 1e-5)


@pytest.mark.parametrize("shape", [(256, 384, 512), (64, 512, 2048)])
def test_matmul_schedule_obeys_every_pairwise_constraint(shape):
    # stationary panels read by many PE steps, ring-shared slices, K chains
    p = plan(gemm_kernel("mm", *shape), DEFAULT, {})
    assert _check_order(p) > 1000


def test_split_reduction_schedule_obeys_every_pairwise_constraint():
    # few rows: the reduction is split over cores, partials combined over the ring
    groups = _loop_groups(_rms, torch.randn(8, 4096), torch.randn(4096))
    progs = [plan(k, DEFAULT, {}) for k in groups]
    assert any(isinstance(s, RingRecv) for p in progs for c in p.cores for s in c.instrs)
    assert sum(_check_order(p) for p in progs) > 50


def test_phased_schedule_obeys_barriers():
    # without LX planning each kernel of the group is a phase: barriers between them
    groups = [g for g in _loop_groups(_rms, torch.randn(256, 1024), torch.randn(1024)) if len(g.kernels) > 1]
    assert groups
    progs = [plan_group(g, DEFAULT, {}, "phased", lx_planning=False) for g in groups]
    assert any(isinstance(s, Barrier) for p in progs for c in p.cores for s in c.instrs)
    assert sum(_check_order(p) for p in progs) > 50


def test_a_stationary_panel_overlaps_like_its_mirror():
    """The k-slices of a stationary A panel interleave in one LX slot (rows of
    tk elements, K apart): loading the next slice does not touch the bytes the
    PE step reads, so it overlaps the multiply as the mirrored B-stationary
    program's does. Read as whole byte ranges they looked overlapping and the
    A-stationary program simulated 17-26 % slower than its mirror."""
    from spyre_adapter.model.program import MatmulPlan
    from spyre_adapter.scheduler import matmul as mm
    from spyre_adapter.scheduler.matmul_program import build

    kernel = gemm_kernel("mm", 1024, 1024, 1024)
    s = mm.shape_of(kernel, {})
    times = {}
    for grid, tile, order in (((1, 1, 16, 2), (512, 64, 64), "b"), ((1, 16, 1, 2), (64, 512, 64), "a")):
        g = mm.Grid(*grid, *tile, True, order)
        p = build(kernel, s, g, DEFAULT, {}, "mm", True, MatmulPlan(grid, tile, order, True, 1.0, 0.0, 0))
        times[order] = timing.simulate(p, DEFAULT).total_ns
    assert times["a"] <= 1.01 * times["b"], times


def test_a_program_is_simulated_once_per_machine_without_events() -> None:
    """The planner, the residency pass and the first launch ask for the same
    program's time: without events it is simulated once per machine; with
    events (a trace) it is simulated again, to the same total."""
    from spyre_adapter.model.machine import Machine

    p = plan(gemm_kernel("g", 256, 256, 256), DEFAULT, {})
    first = timing.simulate(p, DEFAULT, keep_events=False)
    assert timing.simulate(p, DEFAULT, keep_events=False) is first and not first.events
    traced = timing.simulate(p, DEFAULT)
    assert traced is not first and traced.events and traced.total_ns == first.total_ns
    slower = Machine.from_spec("sustained_mac_per_ns_per_core=100")
    assert timing.simulate(p, slower, keep_events=False).total_ns > first.total_ns
