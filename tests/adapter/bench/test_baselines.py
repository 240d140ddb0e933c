"""The bench's baseline planners build real programs: they run in the emulator
with the numbers torch computes, follow the rules they claim (even split: no
ring sharing, no K split, every core; torch-spyre: its documented divisions),
and our planner is at least as fast as both on a GEMM big enough to matter."""

from __future__ import annotations

import math

import pytest
import torch

from tests.support import kernels as K

from spyre_adapter.bench import baselines
from spyre_adapter.emulator import Card, execute
from spyre_adapter.model.machine import DEFAULT
from spyre_adapter.model.program import RingRecv, RingSend
from spyre_adapter.scheduler import matmul_seeds
from spyre_adapter.scheduler.matmul import MatmulShape, shape_of


def _ring_ops(p) -> int:
    return sum(isinstance(op, (RingSend, RingRecv)) for core in p.cores for op in core.instrs)


@pytest.mark.parametrize("planner", [baselines.lx_even_split, baselines.torch_spyre_rules])
@pytest.mark.parametrize("mnk", [(256, 512, 384), (96, 320, 256)])
def test_baseline_programs_compute_the_matmul(planner, mnk) -> None:
    m, n, k = mnk
    kernel = K.mm(m, n, k)
    p = planner(kernel, DEFAULT)
    data = K.buffers(kernel, seed=3)
    a, b = data["a"].view(m, k).clone(), data["b"].view(k, n).clone()
    execute(p, data, Card(DEFAULT))
    want = (a.float() @ b.float()).half().float()
    torch.testing.assert_close(data["c"].view(m, n).float(), want, atol=0.05, rtol=0.02)


def test_even_split_rules() -> None:
    kernel = K.mm(1024, 1024, 1024)
    p = baselines.lx_even_split(kernel, DEFAULT)
    gb, gm, gn, gk = p.plan.grid
    assert gk == 1 and gb * gm * gn == DEFAULT.cores
    assert p.plan.share and _ring_ops(p) > 0  # at its strongest: operands shared over the ring


def test_torch_spyre_worked_example() -> None:
    # work_division_planning.md: A [8192, 32768] @ W [32768, 4096] fp16 on 32 cores; Pass 1 commits K = 2
    # for the per-core span, Pass 3 gives the other 16 cores to M: {M: 16, N: 1, K: 2}.
    s = MatmulShape(1, 8192, 4096, 32768, 2, 2, "")
    split, how = baselines.torch_spyre_split(s, DEFAULT)
    assert split == (1, 16, 1, 2) and how.startswith("pass 3")


def test_torch_spyre_pass2_uses_the_cores() -> None:
    s = shape_of(K.mm(2048, 2048, 2048), {})
    split, how = baselines.torch_spyre_split(s, DEFAULT)
    assert how == "pass 2" and math.prod(split) == DEFAULT.cores
    # the under-use penalty (150 us per halving) rules out leaving cores idle
    assert matmul_seeds._pass2_cost(s, DEFAULT, 1, 4, 4, 1) > matmul_seeds._pass2_cost(s, DEFAULT, *split)


def test_baselines_at_their_strongest_share_our_denominators_on_a_1024_gemm() -> None:
    """Both baselines share operands over the ring, and are scored against our
    plan's bounds and the kernel's compulsory bytes; our planner's program is
    at least as fast as either (it re-tiles the grid it chose, as a baseline
    tiles its own; before that, both were 0.6 % faster at 1024^3)."""
    kernel = K.mm(1024, 1024, 1024)
    row = baselines.gemm_baseline_row(kernel, DEFAULT)
    ours = row["ours"]
    for key in ("lx_even_split", "torch_spyre_rules"):
        base = row[key]
        assert base["share"]
        # same denominators: eta ratio is the inverse time ratio
        assert base["eta_sustained"] / ours["eta_sustained"] == pytest.approx(ours["modeled_ns"] / base["modeled_ns"])
        assert base["rho"] >= ours["rho"] >= 1.0
        assert ours["modeled_ns"] <= base["modeled_ns"]
    assert ours["eta_datasheet"] < ours["eta_sustained"]
