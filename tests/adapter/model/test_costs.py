"""Vector cost of a step: reductions along the stick pay for combining lanes,
reductions across sticks do not, and that is what makes a row reduction on few
cores slow while the same bytes reduced down the columns stream at DMA rate."""

from __future__ import annotations

import pytest
import torch

from spyre_shims import kernel_ir as kir
from spyre_shims.runtime import capture_graphs, reset_compiled

from spyre_adapter.bench import kernels as sk
from spyre_adapter.bench.calibration import kernel_ns
from spyre_adapter.model.costs import lane_reductions
from spyre_adapter.model.machine import DEFAULT


def _loop_kernels(fn, x: torch.Tensor) -> list[kir.LoopKernel]:
    reset_compiled()
    with capture_graphs() as graphs:
        torch.compile(fn, dynamic=False)(x.to("spyre"))
    return [lk for g in graphs for k in g.kernels if isinstance(k, kir.KernelGroup) for lk in k.kernels]


@pytest.mark.parametrize("fn, along", [
    (lambda x: x.sum(-1), True), (lambda x: x.amax(-1), True), (lambda x: x.sum(0), False),
    (lambda x: torch.softmax(x, 0), False), (lambda x: torch.softmax(x, -1), True),
])
def test_inductor_reductions_are_told_apart_by_their_stride(fn, along) -> None:
    kernels = _loop_kernels(fn, torch.randn(64, 256).half())
    lanes = [lane_reductions(lk.body, len(lk.reduction_ranges)) for lk in kernels if lk.is_reduction]
    assert lanes and all(bool(x) == along for x in lanes), lanes


def test_a_row_reduction_on_one_core_is_lane_bound_and_a_column_one_is_not() -> None:
    one, card = DEFAULT.replace(cores=1), DEFAULT
    row, col = sk.kernels("sumrow", 4096, 2048), sk.kernels("sumcol", 4096, 2048)  # the same bytes read
    assert kernel_ns(row, one) > 3 * kernel_ns(col, one)
    # without the lane cost the two are DMA-bound alike
    free = one.replace(lane_reduce_cycles_per_stick=0.0)
    assert kernel_ns(row, free) == pytest.approx(kernel_ns(col, free), rel=0.15)
    # on the whole card both stream at the DRAM rate
    assert kernel_ns(row, card) == pytest.approx(kernel_ns(col, card), rel=0.35)
