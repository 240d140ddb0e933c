"""Mixture-of-experts routing on the device: small-k topk decomposes into max
reductions (no host fallback), with torch's results including ties, -inf and
NaN; other topk forms stay whole and fall back visibly."""

from __future__ import annotations

import pytest
import torch

from spyre_adapter.on_device import run_compiled


def _run(f, x):  # type: ignore[no-untyped-def]
    got, fallbacks = run_compiled(f, (x,))
    return list(got), fallbacks


@pytest.mark.parametrize("k,dim", [(1, -1), (2, -1), (4, 0), (8, 1)])
def test_router_topk_runs_on_the_device(report, k: int, dim: int) -> None:
    x = torch.randn(6, 16, 9)

    def route(a: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.topk(torch.softmax(a, dim), k, dim=dim)

    (v, i), fallbacks = _run(route, x)
    ve, ie = route(x)
    assert not fallbacks and report.launch_count > 0
    assert torch.equal(i, ie)
    torch.testing.assert_close(v, ve)


def test_topk_with_ties_infinities_and_nan_matches_torch() -> None:
    x = torch.tensor([[1.0, float("-inf"), 3.0], [float("-inf"), float("-inf"), 3.0], [0.0, 2.0, 3.0],
                      [float("nan"), 5.0, 3.0], [2.0, 2.0, 3.0]])
    (v, i), fallbacks = _run(lambda a: torch.topk(a, 3, dim=0), x)
    ve, ie = torch.topk(x, 3, dim=0)
    assert not fallbacks
    torch.testing.assert_close(v, ve, equal_nan=True)
    assert torch.equal(i[:, :2], ie[:, :2])  # -inf and NaN columns: the same picks
    # all-equal column: torch leaves the order of ties unspecified; ours is index order
    assert i[:, 2].tolist() == [0, 1, 2] and torch.equal(x[i[:, 2], 2], ve[:, 2])


def test_other_topk_forms_fall_back_visibly() -> None:
    x = torch.randn(4, 40)
    (v, i), fallbacks = _run(lambda a: torch.topk(a, 3, largest=False), x)
    assert any("topk" in f for f in fallbacks)
    assert torch.equal(i, torch.topk(x, 3, largest=False).indices)
    (v, i), fallbacks = _run(lambda a: torch.topk(a, 20), x)
    assert any("topk" in f for f in fallbacks)
    assert torch.equal(i, torch.topk(x, 20).indices)


@pytest.mark.parametrize("shape,dim,k", [((64, 71, 256), 1, 2), ((64, 71, 256), 1, 3), ((6, 17, 7, 64), 1, 2),
                                         ((6, 17, 7, 64), 1, 3), ((6, 17, 7, 64), 2, 7), ((6, 17, 7, 64), 0, 4),
                                         ((5, 9, 13), 0, 5), ((33, 7), 0, 8), ((3, 129, 5), 1, 8), ((3, 129, 5), 1, 1)])
def test_topk_along_any_dimension_on_odd_sizes(report, shape, dim: int, k: int) -> None:
    """Issue 33: topk(k=2, 3) along dim 1 of (64, 71, 256) and (6, 17, 7, 64) read
    indices never written (a phased kernel's store was elided by LX residency);
    every k the decomposition takes, along non-last dimensions of odd sizes."""
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(k * 31 + dim))
    (v, i), fallbacks = _run(lambda a: torch.topk(a, k, dim=dim), x)
    ve, ie = torch.topk(x, k, dim=dim)
    assert not fallbacks and report.launch_count > 0
    assert torch.equal(i, ie) and torch.equal(v, ve)
