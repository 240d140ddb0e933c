"""Mixture-of-experts routing on the device: small-k topk decomposes into max
reductions (no host fallback), with torch's results including ties, -inf and
NaN; larger k, smallest-k and sort by rank; only dimensions longer than the
rank limit stay whole and fall back visibly."""

from __future__ import annotations

import pytest
import torch

from spyre_adapter.harness.on_device import announced_fallbacks, run_compiled


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


@pytest.mark.parametrize("k,largest,shape", [(20, True, (4, 40)), (3, False, (4, 40)), (16, True, (3, 7, 33)),
                                              (33, False, (3, 33))])
def test_larger_k_and_smallest_k_sort_by_rank_on_the_device(report, k: int, largest: bool,
                                                            shape: tuple[int, ...]) -> None:
    """Sparse-attention indexers take top-k of a few thousand: beyond the k max
    rounds, the first k places of a sort by rank (pairwise comparisons, a sum)."""
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(k))
    (v, i), fallbacks = _run(lambda a: torch.topk(a, k, dim=-1, largest=largest), x)
    ve, ie = torch.topk(x, k, dim=-1, largest=largest)
    assert not fallbacks and report.launch_count > 0
    assert torch.equal(i, ie) and torch.equal(v, ve)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64])
@pytest.mark.parametrize("dim,descending", [(-1, False), (0, True), (1, True)])
def test_stable_sort_and_argsort_match_torch(dtype: torch.dtype, dim: int, descending: bool, report) -> None:
    """Ties (many in bf16 and small ints) keep their index order, NaN sorts as the
    largest value: what torch's stable sort gives."""
    g = torch.Generator().manual_seed(3)
    x = (torch.randn(9, 31, generator=g) * 3).to(dtype) if dtype != torch.int64 else torch.randint(0, 4, (9, 31),
                                                                                                   generator=g)
    if dtype.is_floating_point:
        x[2, 5] = x[4, 0] = float("nan")
    got, fallbacks = run_compiled(lambda a: torch.sort(a, dim=dim, descending=descending, stable=True), (x,))
    want = torch.sort(x, dim=dim, descending=descending, stable=True)
    assert not fallbacks and report.launch_count > 0
    assert torch.equal(got[1], want.indices) and torch.allclose(got[0].double(), want.values.double(), equal_nan=True)
    idx, _ = run_compiled(lambda a: torch.argsort(a, dim=dim, descending=descending, stable=True), (x,))
    assert torch.equal(idx, want.indices)


def test_sorts_longer_than_the_rank_limit_fall_back_visibly() -> None:
    from spyre_adapter.backend.decompositions import SORT_MAX_N

    x = torch.randn(2, SORT_MAX_N + 1)
    (v, i), fallbacks = _run(lambda a: torch.topk(a, 20), x)
    assert any("topk" in f for f in fallbacks)
    assert torch.equal(i, torch.topk(x, 20).indices)
    (v, i), fallbacks = _run(lambda a: torch.sort(a, stable=True), x)
    assert any("sort" in f for f in fallbacks)
    assert torch.equal(i, torch.sort(x, stable=True).indices)


def test_sort_and_topk_along_a_symbolic_length_run_on_the_device() -> None:
    """dynamic=True: a sparse-attention indexer sorts or takes a large top-k
    along the sequence, whose length is a symbol (the family sweep's axk2 fell
    back on topk). The rank limit becomes a guard: a longer sequence recompiles
    and falls back visibly instead."""
    from spyre_adapter.backend.decompositions import SORT_MAX_N

    def index(a: torch.Tensor) -> tuple[torch.Tensor, ...]:
        top = torch.topk(a, min(12, a.shape[-1]), dim=-1)
        return (*top, torch.sort(a, dim=-1, stable=True).indices)

    compiled = torch.compile(lambda a: index(a), dynamic=True)
    for n in (20, 33, 47):
        x = torch.randn(3, n, generator=torch.Generator().manual_seed(n))
        with announced_fallbacks() as fallbacks:
            got = [t.cpu() for t in compiled(x.to("spyre"))]
        want = index(x)
        assert not fallbacks, (n, fallbacks)
        assert all(torch.equal(g, w) for g, w in zip(got, want)), n
    x = torch.randn(2, SORT_MAX_N + 1)
    with announced_fallbacks() as fallbacks:
        got = [t.cpu() for t in compiled(x.to("spyre"))]
    assert any("topk" in f for f in fallbacks) and any("sort" in f for f in fallbacks), fallbacks
    assert all(torch.equal(g, w) for g, w in zip(got, index(x)))


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
