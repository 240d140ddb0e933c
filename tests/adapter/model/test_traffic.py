"""What compile-time shortcuts rely on: stick counts that depend on a region's
shape and phase within a stick only, and a lower bound no simulation undercuts
(plan_matmul skips simulating candidates by it)."""

from __future__ import annotations

import random

import pytest
import torch

from tests.support import kernels as K

from spyre_adapter.model import traffic
from spyre_adapter.model.machine import DEFAULT, Machine
from spyre_adapter.model.program import Region
from spyre_adapter.model.timing import lower_bound_ns, simulate
from spyre_adapter.model.traffic import StickMarks, compulsory_bytes, index_sticks, region_stick_set, region_sticks
from spyre_adapter.scheduler.loops import plan_group
from spyre_adapter.scheduler.matmul import plan_matmul


def _elements(r: Region) -> torch.Tensor:
    idx = torch.tensor([r.offset])
    for n, s in zip(r.sizes, r.strides):
        idx = (idx[:, None] + s * torch.arange(n)[None, :]).reshape(-1)
    return idx


@pytest.mark.parametrize("isz", [1, 2, 4])
def test_stick_counts_match_the_elements_at_any_offset(isz: int) -> None:
    """The cache keyed by phase within a stick gives every offset's own answer
    (regions of one shape asked at many offsets, as a planner's tiles are)."""
    rng = random.Random(isz)
    for _ in range(200):
        nd = rng.randint(1, 3)
        sizes = tuple(rng.choice([1, 2, 3, 8, 17, 64]) for _ in range(nd))
        strides = tuple(rng.choice([0, 1, 3, 64, 100, 128, 640]) for _ in range(nd))
        for offset in (0, rng.randint(0, 127), rng.randint(128, 100_000)):
            r = Region("x", offset, sizes, strides)
            sticks = torch.unique(_elements(r) * isz // 128)
            assert region_sticks(r, isz) == sticks.numel()
            first, last = region_stick_set(r, isz)
            covered = torch.cat([torch.arange(int(a), int(b) + 1) for a, b in zip(first, last)])
            assert torch.equal(covered, sticks)


@pytest.mark.parametrize("isz", [1, 2, 4, 8])
def test_index_sticks_count_what_the_buffer_bitmap_marks(isz: int) -> None:
    """A gather's sticks counted from its indices alone (sorted, repeated,
    clustered or scattered) equal the sticks a bitmap over the whole buffer marks."""
    g = torch.Generator().manual_seed(isz)
    n = 50_000
    for idx in (torch.randint(0, n, (3000,), generator=g), torch.arange(0, n, 7), torch.full((9,), n - 1),
                torch.arange(4096).flip(0) // 5, torch.empty(0, dtype=torch.int64)):
        marks = StickMarks(n * isz + 128)
        marks.add_indices(idx, isz)
        assert index_sticks(idx, isz) == marks.count()


@pytest.mark.parametrize("case", ["add", "row_sum", "gather_row_sum", "transpose", "rope"])
def test_compulsory_traffic_traced_in_chunks_equals_one_tile(case: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Large kernels are traced in boxes (memory): cut anywhere, mid-stick and
    mid-row, the count is the one-tile count, reads of sticks an earlier kernel
    of the group wrote still excluded (gather_row_sum's internal buffer)."""
    kernel = {"add": lambda: K.add(37, 100), "row_sum": lambda: K.row_sum(33, 100),
              "gather_row_sum": lambda: K.gather_scale_row_sum(64, 100), "transpose": lambda: K.transpose_copy(12, 7, 33),
              "rope": lambda: K.rotate_half(16, 4, 64)}[case]()
    bufs = K.buffers(kernel, 1)
    if case == "gather_row_sum":
        bufs["idx"] = torch.randint(0, 4, (64,), generator=torch.Generator().manual_seed(1))
    whole = compulsory_bytes(kernel, bufs, {})
    # a, b, c: 7400 B each, 58 sticks; x 200, idx 4, w 8 (every stick holds some row's choice), s 2 (t internal)
    assert whole == {"add": 3 * 58 * 128, "gather_row_sum": (200 + 4 + 8 + 2) * 128}.get(case, whole)
    monkeypatch.setattr(traffic, "_TRACE_POINTS", 150)
    assert len(traffic._trace_boxes(kernel.kernels[0], {})) > 3
    assert compulsory_bytes(kernel, bufs, {}) == whole


@pytest.mark.parametrize("m", [DEFAULT, Machine.from_spec("cores=8,lx_kib=512")])
def test_lower_bound_never_exceeds_the_simulated_time(m: Machine) -> None:
    programs = [plan_matmul(K.mm(*shape), m, {}, "mm") for shape in [(1, 2048, 512), (64, 512, 512), (512, 1024, 768)]]
    programs += [plan_group(g, m, {}, "g") for g in (K.add(1000, 4096), K.row_sum(64, 4096), K.exp_chain(7, 33, 3))]
    for p in programs:
        t = simulate(p, m, keep_events=False).total_ns
        bound = lower_bound_ns(p, m)
        assert 0 < bound <= t
        if p.kind == "matmul":
            assert bound > 0.5 * t  # tight enough to rule out clearly slower candidates
