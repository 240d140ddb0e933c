"""DRAM traffic of planned loop kernels, on kernels Inductor really generates:
every byte a program moves is accounted for (rho >= 1: nothing is read for
free) and data is not moved twice when it need not be (rho close to 1).

Each case also runs compiled on the device and is compared with CPU eager.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

from spyre_adapter.backend import plan
from spyre_adapter.emulator import checks, metrics, timing
from spyre_adapter.machine import DEFAULT
from spyre_adapter.scheduler.loops import Division, plan_group
from spyre_shims import kernel_ir as kir
from spyre_shims.runtime import capture_graphs


def _programs(fn: Callable[..., torch.Tensor], *args: torch.Tensor) -> list:
    with capture_graphs() as graphs:
        out = torch.compile(fn, dynamic=False)(*[a.to("spyre") for a in args])
    torch.testing.assert_close(out.cpu(), fn(*args), atol=2e-2, rtol=2e-2)
    kernels = [k for g in graphs for k in g.kernels if isinstance(k, kir.KernelGroup)]
    assert kernels
    progs = [plan(k, DEFAULT, {}) for k in kernels]
    for p in progs:
        checks.check_program(p, DEFAULT, {})
    return progs


def _rho(p) -> float:
    return metrics.compute(p, timing.simulate(p, DEFAULT), DEFAULT).rho


def _dma_in(p, buffer: str) -> int:
    return sum(i.bytes for s in p.cores for i in s.instrs if i.op == "dma_in" and i.buffer == buffer)


def _rms(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return w * (x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-5)).to(x.dtype)


def test_split_reduction_reads_the_whole_norm_weight() -> None:
    """Fewer rows than cores: the reduction is split over cores, and the norm
    weight each chunk's pointwise part multiplies by is still read whole."""
    x, w = torch.randn(64, 512).half(), torch.randn(512).half()
    (p,) = _programs(_rms, x, w)
    assert p.rsplit > 1
    weight = next(b.name for b in p.kernel.buffers if tuple(b.size) == (512,) and b.role == "input")
    assert _dma_in(p, weight) == 512 * 2
    assert 1.0 <= _rho(p) <= 1.02


def _rotate_half(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    h = x.shape[-1] // 2
    return x * cos + torch.cat([-x[..., h:], x[..., :h]], -1) * sin


@pytest.mark.parametrize("fn, shapes", [
    (lambda a, b: torch.cat([a, b], -1) * 2, [(256, 64), (256, 192)]),  # masked loads of a cat
    (_rotate_half, [(8, 256, 128), (256, 128), (256, 128)]),  # the same rows read at two offsets
], ids=["cat", "rotate_half"])
def test_masked_and_shifted_loads_move_their_data_once(fn, shapes) -> None:
    args = [torch.randn(*s).half() for s in shapes]
    for p in _programs(fn, *args):
        assert 1.0 <= _rho(p) <= 1.02, p.name


def test_grouped_query_heads_share_their_kv_head_over_the_ring() -> None:
    """repeat_kv: 8 query heads read 2 KV heads. Cores whose rows map to the
    same KV head receive it over the ring instead of reading DRAM again."""
    def repeat_kv(k: torch.Tensor) -> torch.Tensor:
        return k[:, :, None].expand(1, 2, 4, 256, 128).reshape(1, 8, 256, 128) + 1

    (chosen,) = _programs(repeat_kv, torch.randn(1, 2, 256, 128).half())
    assert 1.0 <= _rho(chosen) <= 1.02
    # On 8 cores (one per query head), 4 cores read each KV head.
    p = plan_group(chosen.kernel, DEFAULT, {}, "repeat_kv", force=Division(8))
    checks.check_program(p, DEFAULT, {})
    received = [i for s in p.cores for i in s.instrs if i.op == "ring" and "same data" in i.note]
    assert len({i.peer for i in received}) == 2 and len(received) >= 6
    assert 1.0 <= _rho(p) <= 1.02


def test_a_division_whose_shares_break_stick_alignment_is_passed_over() -> None:
    """_chunk_cat stores through a transposed index: two cores would be cheapest by
    the estimate, but core 1's share would not start on a whole stick."""
    # OpInfo's sample: non-contiguous inputs (transposed last two dims, except the 4-d one)
    shapes = [(2, 3, 3), (2, 3, 1, 2), (2, 3), (2, 3, 2), (2, 3, 271)]
    tensors = [torch.randn(*s).half() if len(s) == 4 else torch.randn(*s[:-2], s[-1], s[-2]).half().transpose(-1, -2)
               for s in shapes]
    assert not tensors[-1].is_contiguous()
    fn = lambda *ts: torch._chunk_cat(list(ts), 1, 3)  # noqa: E731
    for p in _programs(fn, *tensors):  # _programs runs the emulator's checks on every plan
        assert p.division["candidates"]
