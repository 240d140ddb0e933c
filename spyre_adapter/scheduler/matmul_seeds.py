"""Divisions of a matmul that other planners choose: the bench's baselines
(:mod:`spyre_adapter.bench.baselines`) build programs on them, and
``torch_spyre.matmul_on_identical_splits`` prices them in both cost models.

* :func:`even_split_grid` - the output divided evenly over every core it can use
  (powers of two over batch, M and N; no K split), best first by the closed form.
* :func:`torch_spyre_split` - the division torch-spyre's compiler chooses, from its
  documented work-division planner (``work_division_planning.md`` in
  ``../shared/reference/torch-spyre-cost-model``): Pass 1 splits what the per-core
  span limit forces, Pass 2 prices matmul splits with its analytic cost and takes
  the cheapest, Pass 3 gives the cores to output dims first by decreasing
  stick-adjusted size. Pass 2 terms the document does not quantify (the M-lane
  underuse target, the value-matmul and shared-projection shape terms) are left out.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from spyre_adapter.model.machine import Machine
from spyre_adapter.scheduler.matmul import Grid, MatmulShape, cost

__all__ = ["even_split_grid", "torch_spyre_split", "divisors"]


def divisors(n: int) -> list[int]:
    """The divisors of ``n``, ascending."""
    return [d for d in range(1, n + 1) if n % d == 0]


def _pow2(cap: int) -> list[int]:
    return [1 << k for k in range(cap.bit_length()) if 1 << k <= cap]


def even_split_grid(s: MatmulShape, m: Machine) -> list[tuple[int, int, int, int]]:
    """Every way of dividing the output evenly over all the cores it can use
    (powers of two over batch, M and N; K never split), best first by the closed form
    at the largest tiles that fit."""
    stick = m.stick_elems(s.out_isz)
    n_units = max(1, -(-s.n // stick))
    splits = []
    for gb in _pow2(min(s.batch, m.cores)):
        for gm in _pow2(min(s.m, m.cores // gb)):
            gn = min(m.cores // (gb * gm), 1 << (n_units.bit_length() - 1))
            splits.append((gb, gm, gn, 1))
    most = max(math.prod(x) for x in splits)
    ranked = []
    for split in {x for x in splits if math.prod(x) == most}:
        best = None
        for tm in (1024, 512, 256, 128, 64, 32):
            for tn in (1024, 512, 256, 128, 64):
                c = cost(s, Grid(*split, tm, tn, 512, False, "c"), m)
                if c is not None and (best is None or c.total_ns < best):
                    best = c.total_ns
        if best is not None:
            ranked.append((best, split))
    return [x for _, x in sorted(ranked)]


#: Pass 2 constants as documented (microseconds where a term is a time).
_PT_ROWS, _TARGET_PT_PASSES, _COHORT_LIMIT = 8, 5, 8
_M_TILE_UNDERFILL_TARGET, _TARGET_N_TILE_ELEMS = 16, 512


def _span_splits(s: MatmulShape, m: Machine) -> dict[str, int]:
    """Pass 1 for a 2-D matmul: the fewest splits that keep every tensor's per-core
    span under the limit. Device layouts keep the stick dim outermost ([K/64, M, 64]
    for A, [N/64, K, 64] for B and [N/64, M, 64] for the output), so only a split of
    K (for A) or N (for B and the output) shortens a span."""
    stick = m.stick_elems(s.isz)
    k_st, n_st = -(-s.k // stick), -(-s.n // stick)
    need: dict[str, int] = {}
    for dim, sticks, stride in (("k", k_st, s.batch * s.m), ("n", n_st, s.k), ("n", n_st, s.batch * s.m)):
        span = lambda d: -(-sticks // d) * stride * m.stick_bytes  # noqa: E731
        if span(need.get(dim, 1)) > m.span_bytes_per_core:
            ok = [d for d in divisors(sticks) if d >= need.get(dim, 1) and span(d) <= m.span_bytes_per_core]
            need[dim] = min(ok) if ok else sticks
    return need


def _pass3(s: MatmulShape, m: Machine, committed: Mapping[str, int]) -> dict[str, int]:
    """Pass 3: committed splits as minimums, then output dims by decreasing
    stick-adjusted size take the largest divisor that fits the remaining budget,
    then at most one reduction dim."""
    stick = m.stick_elems(s.isz)
    sizes = {"b": s.batch, "m": s.m, "n": -(-s.n // stick), "k": -(-s.k // stick)}
    split = {d: committed.get(d, 1) for d in sizes}
    budget = m.cores // math.prod(split.values())
    for d in sorted(("b", "m", "n"), key=lambda d: -sizes[d]):
        extra = max(x for x in divisors(sizes[d]) if x % split[d] == 0 and x // split[d] <= budget) // split[d]
        split[d] *= extra
        budget //= extra
    if "k" not in committed and budget > 1:
        split["k"] *= max(x for x in divisors(sizes["k"]) if x <= budget)
    return split


def _pass2_cost(s: MatmulShape, m: Machine, b: int, mm: int, n: int, k: int) -> float:
    """torch-spyre's analytic matmul split cost (us), as documented."""
    cores = b * mm * n * k
    if cores == 0 or cores > m.cores:
        return math.inf
    rows = s.m / mm
    passes = rows / _PT_ROWS
    pt_eff = (passes / _TARGET_PT_PASSES) ** 0.25 if passes < _TARGET_PT_PASSES else 1.0
    compute = s.batch * s.m * s.n * s.k / cores / (m.peak_mac_per_ns_per_core * pt_eff) / 1e3
    true_bmm = s.batch > 1
    w = s.batch if true_bmm else 1
    fanout = n if true_bmm else max(mm, n)
    cohort = (fanout / _COHORT_LIMIT) ** 0.75 if fanout > _COHORT_LIMIT else 1.0
    hbm = (s.batch * s.m * s.k + w * s.k * s.n + s.batch * s.m * s.n) * 2 / m.dram_nominal_gbps * cohort / 1e3
    psum = max(0, k - 1) * (s.batch * s.m * s.n / (b * mm * n)) * (1e-4 if true_bmm else 1e-3)
    pen = 0.0
    if rows < _M_TILE_UNDERFILL_TARGET:
        pen += 30.0 * math.log2(_M_TILE_UNDERFILL_TARGET / max(rows, 1e-9))
    n_tile = s.n / n
    if n_tile > _TARGET_N_TILE_ELEMS:
        pen += 25.0 * math.log2(n_tile / _TARGET_N_TILE_ELEMS)
    if cores < m.cores:
        pen += 150.0 * math.log2(m.cores / cores)
    batch = math.log2(max(1, b)) * 10.0 if true_bmm else 0.0
    return compute + hbm + psum + pen + batch


def torch_spyre_split(s: MatmulShape, m: Machine, shared_weight: bool = False) -> tuple[tuple[int, int, int, int], str]:
    """The (batch, M, N, K) core split torch-spyre's planner gives a matmul, and
    which pass chose it (``shared_weight``: a batched A times one 2-D weight, which
    Pass 2 declines)."""
    stick = m.stick_elems(s.isz)
    committed = _span_splits(s, m)
    default = _pass3(s, m, committed)
    as_tuple = lambda d: (d["b"], d["m"], d["n"], d["k"])  # noqa: E731
    if committed:
        return as_tuple(default), "pass 3 (pass 1 committed a span split)"
    if shared_weight:
        return as_tuple(default), "pass 3 (pass 2 declines a shared 2-D weight)"
    best, best_cost = None, math.inf
    for b in divisors(s.batch):
        for mm in divisors(s.m):
            for n in divisors(-(-s.n // stick)):
                for k in divisors(-(-s.k // stick)):
                    if b * mm * n * k <= m.cores:
                        c = _pass2_cost(s, m, b, mm, n, k)
                        if c < best_cost:
                            best, best_cost = (b, mm, n, k), c
    if best is None or math.prod(best) < math.prod(as_tuple(default)):
        return as_tuple(default), "pass 3 (pass 2 declined)"
    return best, "pass 2"
