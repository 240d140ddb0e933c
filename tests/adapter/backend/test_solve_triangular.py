"""Triangular solves on the device: gated delta-rule layers (Qwen3-Next,
Qwen3.5, OLMo-hybrid) solve their UT transform with
``linalg_solve_triangular``, which has no Inductor lowering; on "spyre" it
runs as batched matmuls, against CPU eager's LAPACK solve."""

from __future__ import annotations

import pytest
import torch

from spyre_adapter.harness.on_device import announced_fallbacks, run_compiled


def _system(n: int, batch: tuple[int, ...], seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(*batch, n, n, generator=g) * (0.5 / n ** 0.5)
    return a + torch.diag_embed(1 + torch.rand(*batch, n, generator=g))


@pytest.mark.parametrize("n,upper,left,unit", [(64, False, True, True), (7, False, True, False), (13, True, True, False),
                                               (5, True, False, True), (9, False, False, False), (1, False, True, False)])
def test_solve_triangular_runs_on_the_device(report, n: int, upper: bool, left: bool, unit: bool) -> None:
    a = _system(n, (2, 3), n)
    b = torch.randn(2, 3, n, 6) if left else torch.randn(2, 3, 6, n)

    def solve(m: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
        return torch.linalg.solve_triangular(m, r, upper=upper, left=left, unitriangular=unit)

    got, fallbacks = run_compiled(solve, (a, b))
    assert not fallbacks and report.launch_count > 0
    torch.testing.assert_close(got, solve(a, b), rtol=1e-4, atol=1e-5)


def test_the_delta_rule_ut_transform_under_dynamic_shapes() -> None:
    """The chunk count is a symbol under dynamic=True; the chunk (64) is not.
    The strict upper triangle and the diagonal hold values the unit solve must
    not read, as in the models."""
    def ut(keys: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
        system = (keys @ keys.transpose(-1, -2)).tril()
        return torch.linalg.solve_triangular(system, values, upper=False, unitriangular=True)

    compiled = torch.compile(ut, dynamic=True)
    for chunks in (2, 3, 5):
        g = torch.Generator().manual_seed(chunks)
        keys = torch.nn.functional.normalize(torch.randn(1, 2, chunks, 64, 16, generator=g), dim=-1) * 0.3
        values = torch.randn(1, 2, chunks, 64, 16, generator=g)
        with announced_fallbacks() as fallbacks:
            got = compiled(keys.to("spyre"), values.to("spyre")).cpu()
        assert not fallbacks, fallbacks
        torch.testing.assert_close(got, ut(keys, values), rtol=1e-4, atol=1e-5)
