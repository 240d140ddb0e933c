"""Kernels the family sweep found crashing or falling back, each reduced to the
graph shape that did it, compiled on spyre against CPU eager."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from spyre_adapter.harness.on_device import announced_fallbacks, run_compiled


def test_a_cat_feeding_a_clamped_gather_compiles(report) -> None:
    """Inkling-2's relative-position scores: a gather at clamped (query - key)
    positions, concatenated with a sink column. Inductor's loop simplification
    raised "The argument '-((0))' is not comparable" on the cat's Identity."""
    def scores(s: torch.Tensor, table: torch.Tensor, sink: torch.Tensor) -> torch.Tensor:
        q, k = s.shape[-2], s.shape[-1]
        pos = torch.arange(q, device=s.device)[:, None] - torch.arange(k, device=s.device)[None, :]
        bias = table[pos.clamp(0, 1023)].permute(2, 0, 1)
        bias = torch.where((pos < 0) | (pos >= 1024), 0.0, bias)
        return torch.cat([s * 0.25 + bias, sink], -1)

    args = (torch.randn(1, 4, 6, 9), torch.randn(1024, 4), torch.randn(1, 4, 6, 1))
    got, fallbacks = run_compiled(scores, args)
    assert not fallbacks and report.launch_count > 0
    torch.testing.assert_close(got, scores(*args))


def test_a_pad_by_a_symbolic_amount_runs_under_dynamic_shapes() -> None:
    """LFM-3's conv state: the sequence padded on the left to the kernel's
    length, by (kernel - length). Inductor names such a bound a precomputed
    size (ps0) the wrapper never defined: NameError at the first launch."""
    def state(x: torch.Tensor) -> torch.Tensor:
        return F.pad(x, (8 - x.shape[-1], 0)) * 2

    compiled = torch.compile(state, dynamic=True)
    for n in (3, 5, 6):
        x = torch.randn(1, 16, n)
        with announced_fallbacks() as fallbacks:
            got = compiled(x.to("spyre")).cpu()
        assert not fallbacks, fallbacks
        torch.testing.assert_close(got, state(x))


def test_a_cat_written_in_place_keeps_the_part_a_later_kernel_reads(report) -> None:
    """PhiMoE's sparsemixer: the first expert's index is written through a view
    of the cat's buffer and read by the next kernel as a gather index. LX
    residency took that kernel for its only reader and elided the store, so the
    cat's first half was never written (the expert gather then read garbage)."""
    def route(scores: torch.Tensor, weights: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        _, first = scores.max(dim=-1, keepdim=True)
        masked = torch.scatter(scores, -1, first, float("-inf"))
        _, second = masked.max(dim=-1, keepdim=True)
        chosen = torch.cat([first, second], -1)
        return chosen, weights[chosen.view(-1)]

    args = (torch.randn(1, 4), torch.randn(4, 8))
    (chosen, picked), fallbacks = run_compiled(route, args)
    assert not fallbacks and report.launch_count > 0
    want = route(*args)
    assert torch.equal(chosen, want[0]) and torch.equal(picked, want[1])
