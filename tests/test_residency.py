"""LX residency across kernels on graphs Inductor really compiles: a norm's
output feeding several matmuls stays in LX (its store elided, the matmuls'
A reads served from LX and the ring), results still match CPU eager, every
plan passes the emulator's checks, and what cannot be kept is not."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from spyre_adapter.backend import plan
from spyre_adapter.emulator import checks, metrics, timing
from spyre_adapter.machine import DEFAULT
from spyre_adapter.scheduler.residency import plan_residency
from spyre_shims import kernel_ir as kir
from spyre_shims.runtime import capture_graphs


def _rms(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return w * (x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-5)).to(x.dtype)


def _qkv(x: torch.Tensor, w: torch.Tensor, wq: torch.Tensor, wk: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    h = _rms(x, w)
    return h @ wq, h @ wk


def _args(*shapes: tuple[int, ...]) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(3)
    return [(torch.randn(*s, generator=g) * 0.1).half() for s in shapes]


def _compile(fn, args, report):
    report.reset()
    with capture_graphs() as graphs:
        out = torch.compile(fn, dynamic=False)(*[a.to("spyre") for a in args])
    expected = fn(*args)
    for got, want in zip(out, expected):
        torch.testing.assert_close(got.cpu(), want, atol=2e-2, rtol=2e-2)
    return graphs, report.to_dict()["lx_residency"]


def test_norm_output_stays_in_lx_for_every_matmul_reading_it(report) -> None:
    graphs, lx = _compile(_qkv, _args((64, 512), (512,), (512, 256), (512, 128)), report)
    assert lx["kept"] == 1 and lx["readers_served"] == 2 and lx["stores_elided"] == 1
    # The same decisions, made again on fresh plans, and what they change.
    kernels = [k for g in graphs for k in g.kernels]
    before = [plan(k, DEFAULT, {}) for k in kernels]
    after = [plan(k, DEFAULT, {}) for k in kernels]
    outputs = set(dict(graphs[0].meta).get("outputs", ()))
    decisions = plan_residency(after, outputs, DEFAULT)
    (norm,) = [p for p in after if isinstance(p.kernel, kir.KernelGroup)]
    h = decisions[0].buffer
    assert {d.consumer for d in decisions} == {k.name for k in kernels if isinstance(k, kir.ExternKernel)}
    assert norm.division["lx_elided_outputs"] == [h]
    # Each matmul's A rows come from the holder's LX: in place there, over the ring elsewhere.
    for p in after:
        if isinstance(p.kernel, kir.ExternKernel):
            a = [i for s in p.cores for i in s.instrs if i.buffer == h]
            assert a and all(i.resident or i.from_lx for i in a)
            assert not any(i.op == "dma_in" and not i.resident for i in a)
    sims_before = [timing.simulate(p, DEFAULT) for p in before]
    sims_after = [timing.simulate(p, DEFAULT) for p in after]
    h_bytes = 64 * 512 * 2
    assert sum(t.dram_bytes for t in sims_before) - sum(t.dram_bytes for t in sims_after) == 3 * h_bytes
    assert sum(t.total_ns for t in sims_after) < sum(t.total_ns for t in sims_before)
    for p, t in zip(after, sims_after):
        checks.check_program(p, DEFAULT, {})  # kept rows still fit every holder's LX
        assert metrics.compute(p, t, DEFAULT).rho >= 1.0


def test_a_kernel_the_planner_cannot_see_into_keeps_the_store(report) -> None:
    """The norm's output is also read by the hand-written attention kernel: the
    matmul before it may use LX, but the value must still reach DRAM."""
    def fn(x, w, wq):
        h = _rms(x, w)
        q = h.view(1, 1, 64, 512)
        return h @ wq, F.scaled_dot_product_attention(q, q, q, is_causal=True)

    _, lx = _compile(fn, _args((64, 512), (512,), (512, 256)), report)
    assert lx["stores_elided"] == 0


def test_rows_that_do_not_fit_lx_go_through_dram(report) -> None:
    """4096 rows of 4096: one core cannot hold a matmul's row block."""
    _, lx = _compile(_qkv, _args((2048, 4096), (4096,), (4096, 256), (4096, 128)), report)
    assert lx["kept"] == 0 and lx["stores_elided"] == 0
