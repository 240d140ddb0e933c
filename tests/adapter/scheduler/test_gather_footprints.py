"""A small buffer read at every point through a data-dependent index (MoE
routing weights): the planner bounds its footprint by the buffer, so the group
plans and runs (it was refused as needing 1 MB of LX per row block)."""

from __future__ import annotations

import torch

from spyre_shims.reference import run_kernel
from tests.support import kernels as K

from spyre_adapter.emulator import Card, execute
from spyre_adapter.model.machine import DEFAULT
from spyre_adapter.scheduler import loops
from spyre_adapter.scheduler.analysis import access_footprint


def _inputs(rows: int, cols: int, seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {"x": torch.randn(rows * cols, generator=g), "idx": torch.randint(0, 4, (rows,), generator=g),
            "w": torch.randn(rows * 4, generator=g), "s": torch.zeros(rows)}


def test_a_gather_never_touches_more_sticks_than_its_buffer_has() -> None:
    group = K.gather_scale_row_sum(16, 256)
    gm = loops.model_group(group, DEFAULT, {})
    stick = DEFAULT.stick_bytes
    gather = next(a for a in gm.accesses if a.buffer == "w")
    _, nbytes = access_footprint(gather.info, gather.acc, 0, 16 * 256, stick)
    assert nbytes <= (16 * 4 * 4 // stick + 2) * stick  # w: 64 floats, two sticks (+1 for alignment)
    assert loops._row_bytes(gm, DEFAULT) < DEFAULT.lx_usable_bytes // 2


def test_the_moe_combine_and_norm_group_plans_and_runs_right() -> None:
    group = K.gather_scale_row_sum(16, 256)
    p = loops.plan_group(group, DEFAULT, {}, "g")
    card = Card(DEFAULT)
    for seed, checking in ((0, True), (1, False), (2, False)):
        got = _inputs(16, 256, seed)
        want = {k: v.clone() for k, v in got.items()}
        run_kernel(group, want)
        execute(p, got, card, checking=checking)
        torch.testing.assert_close(got["s"], want["s"], rtol=1e-5, atol=1e-4)
