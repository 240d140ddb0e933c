"""Scan programs on the emulated card: cumsum, cumprod, logcumsumexp, cummax
and cummin run as per-core chunk scans with a carry pass over the ring,
against CPU eager, in every dtype the OpInfo sweep covers and in integers."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from spyre_shims import index as sidx
from spyre_shims.compilation import count_compiles
from spyre_shims.reference import concrete
from spyre_shims.runtime import capture_graphs

from spyre_adapter.backend.session import current, use_machine
from spyre_adapter.backend.spyre import plan
from spyre_adapter.harness.on_device import run_compiled
from spyre_adapter.model.isa import listing
from spyre_adapter.model.machine import DEFAULT
from spyre_adapter.model.program import RingRecv, RingSend, Vec
from spyre_adapter.model.rules import static_check
from spyre_adapter.scheduler.scan_program import is_scan

_OPS = {
    "cumsum": lambda a: torch.cumsum(a, -1),
    "cumsum_dim0": lambda a: torch.cumsum(a, 0),
    "cumprod": lambda a: torch.cumprod(a, -1),
    "logcumsumexp": lambda a: torch.logcumsumexp(a, -1),
    "cummax": lambda a: torch.cummax(a, -1),
    "cummin_dim0": lambda a: torch.cummin(a, 0),
}
_TOL = {torch.float32: 2e-5, torch.float16: 2e-3, torch.bfloat16: 2e-2}


def _input(name: str, shape: tuple[int, ...], dtype: torch.dtype, seed: int = 0) -> torch.Tensor:
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(seed))
    if name == "cumprod":  # products of factors near one stay finite over long rows
        x = 1 + 0.002 * x
    return x.to(dtype)


def _run(fn, x: torch.Tensor, report):  # type: ignore[no-untyped-def]
    report.reset()
    with capture_graphs() as graphs:
        got, fallbacks = run_compiled(fn, (x,))
    scans = [k for g in graphs for k in g.kernels if is_scan(k)]
    assert not fallbacks and scans and report.launch_count >= len(scans), fallbacks
    return got, scans


def _check(got, want, dtype: torch.dtype, rel_scale: float = 1.0) -> None:  # type: ignore[no-untyped-def]
    got, want = (list(got), list(want)) if isinstance(want, tuple) else ([got], [want])
    for g, w in zip(got, want):
        if not w.is_floating_point():
            assert torch.equal(g, w)
            continue
        tol = _TOL[dtype] * rel_scale
        torch.testing.assert_close(g.float(), w.float(), atol=tol * max(1.0, float(w.abs().max())), rtol=tol)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("name", sorted(_OPS))
def test_scans_match_eager(name: str, dtype: torch.dtype, report) -> None:
    x = _input(name, (5, 37) if "dim0" not in name else (37, 5), dtype)
    fn = _OPS[name]
    got, _ = _run(fn, x, report)
    want = fn(x.float())
    _check(got, tuple(w.to(dtype) if w.is_floating_point() else w for w in want) if isinstance(want, tuple)
           else want.to(dtype), dtype)


@pytest.mark.parametrize("make", [lambda m: m.long().cumsum(-1) - 1, lambda m: m.cumsum(-1),
                                  lambda m: m.int().cumsum(0, dtype=torch.int32)])
def test_integer_scans_are_exact(make, report) -> None:
    """Position ids from an attention mask, counts from a bool mask: exact."""
    m = torch.rand(3, 700, generator=torch.Generator().manual_seed(5)) > 0.4
    got, _ = _run(make, m, report)
    assert torch.equal(got, make(m))


@pytest.mark.parametrize("name,shape", [("cumsum", (1, 40000)), ("cummax", (2, 16384)), ("logcumsumexp", (1, 9000)),
                                        ("cumsum_dim0", (20000, 32))])
def test_long_scans_split_over_cores_carry_over_the_ring(name: str, shape: tuple[int, ...], report) -> None:
    """Few long rows: each row's scan is cut over cores; every core scans its
    chunk and takes the carry of the chunks before it from its ring neighbour."""
    x = _input(name, shape, torch.float32, seed=2)
    fn = _OPS[name]
    got, scans = _run(fn, x, report)
    _check(got, fn(x), torch.float32, rel_scale=10)
    for k in scans:
        p = plan(k, current().machine, {})
        assert p.kind == "scan" and p.plan.rsplit > 1, p.plan
        sends = [i for c in p.cores for i in c.instrs if isinstance(i, RingSend)]
        recvs = [i for c in p.cores for i in c.instrs if isinstance(i, RingRecv)]
        assert len(sends) == len(recvs) >= p.plan.rsplit - 1
        static_check(p, current().machine, {b.name: concrete(b.storage_numel, {}) for b in k.buffers})
        assert "ring.send" in listing(p) and "vec.all" in listing(p)


def test_chunks_longer_than_lx_run_in_order_with_the_carry_in_lx(report) -> None:
    """A small scratchpad: each core cuts its chunk into sub-chunks, the carry
    passed from one to the next in LX."""
    x = torch.randint(0, 9, (3, 30000), generator=torch.Generator().manual_seed(1))
    with use_machine(DEFAULT.replace(cores=4, lx_kib=16)):
        got, scans = _run(lambda a: a.cumsum(-1), x, report)
        p = plan(scans[0], current().machine, {})
    assert torch.equal(got, x.cumsum(-1))
    vecs = [i for c in p.cores for i in c.instrs if isinstance(i, Vec) and i.body == 1]
    assert len(vecs) > 3 * p.plan.rsplit * p.plan.row_cores  # several sub-chunks per core and row


def test_dynamic_lengths_do_not_recompile(report) -> None:
    """transformers' position ids: the mask grows every decode step."""
    f = torch.compile(lambda m: (m.long().cumsum(-1) - 1).clamp(min=0), dynamic=True)
    with count_compiles() as c:
        for n in (5, 9, 300, 2000):
            m = torch.rand(2, n, generator=torch.Generator().manual_seed(n)) > 0.3
            assert torch.equal(f(m.to("spyre")).cpu(), (m.long().cumsum(-1) - 1).clamp(min=0)), n
    assert c.compiles == 1 and report.launch_count >= 4


@pytest.mark.parametrize("fn,gathered", [(lambda a: F.pad(a, (1, 0)).cumsum(-1), True),
                                         (lambda a: torch.flip(a, [-1]).cumsum(-1), True),
                                         (lambda a: F.pad(a, (0, 14)).view(3, 4, 16).cumsum(-1), True),
                                         (lambda a: torch.cat([a, 2 * a]).cumsum(0), None),
                                         (lambda a: a[:, ::2].cumsum(-1), False)],
                         ids=["padded", "reversed", "chunked", "concatenated", "strided"])
def test_irregular_scan_inputs_are_gathered_on_the_device(fn, gathered: bool | None, report) -> None:
    """Linear attention scans a padded, chunked input: the loads Inductor inlines
    into the scan are masked, not affine in the tile or reversed; the core computes
    their addresses (masked-off points never fetched) and gathers them. A plain strided
    load is one DMA. (Whether Inductor inlines a cat into the scan depends on the
    release: 2.11 does, 2.13 realizes the cat first; ``None``.)"""
    x = torch.randn(3, 50, generator=torch.Generator().manual_seed(4))
    got, scans = _run(fn, x, report)
    torch.testing.assert_close(got, fn(x))
    def irregular_load(lk, ins) -> bool:  # masked, not affine, or running backwards
        aff = sidx.affine(ins.args[1], sum(lk.index_vars(), ()))
        return ins.mask is not None or aff is None or min(aff[1], default=0) < 0

    irregular = any(ins.op == "load" and irregular_load(lk, ins) for lk in scans[0].kernels for ins in lk.body)
    p = plan(scans[0], current().machine, {})
    assert any(type(i).__name__ == "DmaGather" for c in p.cores for i in c.instrs) == irregular  # else one DMA
    assert gathered is None or irregular == gathered
