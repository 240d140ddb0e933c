"""spyre_adapter.scheduler.analysis: what the loop scheduler reads off a kernel
(accesses, op counts per point) and the box decomposition of flat ranges."""

from __future__ import annotations

import math

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support import kernels as K

from spyre_adapter.scheduler.analysis import analyse, boxes


def _dtypes(group) -> dict[str, str]:  # type: ignore[no-untyped-def]
    return {b.name: b.dtype for b in group.buffers}


def test_an_add_reads_two_buffers_writes_one_and_costs_one_vector_op() -> None:
    g = K.add(4, 64)
    info = analyse(g.kernels[0], _dtypes(g), {})
    assert info.numel == 256 and info.rnumel == 1
    assert [(a.buffer, a.store) for a in info.accesses] == [("a", False), ("b", False), ("c", True)]
    assert all(a.itemsize == 2 for a in info.accesses)
    assert (info.vec_pre, info.sfu_pre, info.vec_post, info.sfu_post) == (1, 0, 0, 0)


def test_a_row_sum_reduces_and_an_exp_chain_uses_the_sfu() -> None:
    g = K.row_sum(8, 128)
    info = analyse(g.kernels[0], _dtypes(g), {})
    assert info.rnumel == 128 and info.reduction_kinds == ("sum",)
    assert any(a.reduced for a in info.accesses)
    chain = K.exp_chain(4, 64, 5)
    c = analyse(chain.kernels[0], _dtypes(chain), {})
    assert c.sfu_pre == 5 and c.vec_pre >= 5


# (generation is tiny; the slow-generation check tripped once on a loaded CI machine)
@settings(suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.integers(1, 6), min_size=1, max_size=4), st.data())
def test_boxes_cover_the_flat_range_exactly_once(shape: list[int], data: st.DataObject) -> None:
    n = math.prod(shape)
    a = data.draw(st.integers(0, n))
    b = data.draw(st.integers(a, n))
    inner = [math.prod(shape[d + 1:]) for d in range(len(shape))]
    covered = []
    for box in boxes(shape, a, b):
        assert len(box) == len(shape)
        ranges = [range(lo, hi) for lo, hi in box]
        points = [0]
        for r, stride in zip(ranges, inner):
            points = [p + i * stride for p in points for i in r]
        covered += points
    assert sorted(covered) == list(range(a, b))
