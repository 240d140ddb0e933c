"""Scans in the Kernel IR: cumulative ops captured as a ``scan`` instruction
with its combine function traced into its own body, JSON round trips, and the
reference semantics against torch's eager ops."""

from __future__ import annotations

import dataclasses

import pytest
import sympy
import torch

from spyre_shims import kernel_ir as kir
from spyre_shims.jsonform import FormatError
from spyre_shims.reference import inclusive_scan, run_kernel
from spyre_shims.runtime import capture_graphs

_OPS = {
    "cumsum": lambda a: torch.cumsum(a, -1),
    "cumsum_dim0": lambda a: torch.cumsum(a, 0),
    "cumprod": lambda a: torch.cumprod(a, 1),
    "logcumsumexp": lambda a: torch.logcumsumexp(a, 1),
    "cummax": lambda a: torch.cummax(a, 1),
    "cummin_dim0": lambda a: torch.cummin(a, 0),
}


def _scan_kernels(fn, x: torch.Tensor) -> list[kir.KernelGroup]:
    with capture_graphs() as graphs:
        torch.compile(lambda a: fn(a), dynamic=False)(x.to("spyre"))
    out = [k for g in graphs for k in g.kernels if isinstance(k, kir.KernelGroup)
           and any(i.op == "scan" for lk in k.kernels for i in lk.body)]
    for g in graphs:
        assert kir.from_json(kir.to_json(g)) == g
    return out


def _reference(kernel: kir.KernelGroup, x: torch.Tensor) -> dict[str, torch.Tensor]:
    """Run one captured kernel on the host reference evaluator: its one input is ``x``."""
    bufs: dict[str, torch.Tensor] = {}
    for b in kernel.buffers:
        if b.role == "input":
            bufs[b.name] = x.reshape(-1).clone()
        elif b.role != "internal":
            bufs[b.name] = torch.zeros(int(b.storage_numel), dtype=getattr(torch, b.dtype))
    run_kernel(kernel, bufs)
    return bufs


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("name", sorted(_OPS))
def test_captured_scans_compute_what_eager_computes(name: str, dtype: torch.dtype) -> None:
    fn = _OPS[name]
    g = torch.Generator().manual_seed(7)
    x = (torch.randn(5, 37, generator=g) * (0.1 if name == "cumprod" else 1) + (1 if name == "cumprod" else 0)).to(dtype)
    kernels = _scan_kernels(fn, x)
    assert kernels, "no scan reached the backend"
    want = fn(x)
    want = list(want) if isinstance(want, tuple) else [want]
    got = []
    for k in kernels:
        (out,) = [b for b in k.buffers if b.role == "output"]
        got.append(_reference(k, x)[out.name])
    assert len(got) == len(want)
    tol = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 2e-2}[dtype]
    for a, w in zip(got, want):
        if w.dtype == torch.int64:
            assert torch.equal(a.view(w.shape), w)
        else:
            torch.testing.assert_close(a.view(w.shape).float(), w.float(), atol=tol, rtol=tol)


@pytest.mark.parametrize("make", [lambda x: x.long().cumsum(-1), lambda x: (x > 0).cumsum(-1),
                                  lambda x: x.int().cumsum(0, dtype=torch.int32)])
def test_integer_scans_are_exact(make) -> None:
    x = torch.randint(-3, 4, (4, 200), generator=torch.Generator().manual_seed(3)).float()
    kernels = _scan_kernels(make, x)
    assert len(kernels) == 1
    (out,) = [b for b in kernels[0].buffers if b.role == "output"]
    want = make(x)
    assert torch.equal(_reference(kernels[0], x)[out.name].view(want.shape), want)


def test_cummax_ties_and_nan_pick_as_eager() -> None:
    """cummax takes the last index among equal values, and NaN wins from where it appears."""
    x = torch.tensor([[1.0, 3.0, 3.0, 2.0, 3.0, float("nan"), 4.0], [0.0, 0.0, 0.0, -1.0, 0.0, 5.0, 5.0]])
    (k0, k1) = _scan_kernels(lambda a: torch.cummax(a, 1), x)
    scan = next(i for lk in k0.kernels for i in lk.body if i.op == "scan")
    values, indices = inclusive_scan(scan.args[2], (x, torch.arange(7).expand(2, 7)))
    want = torch.cummax(x, 1)
    torch.testing.assert_close(values, want.values, equal_nan=True)
    assert torch.equal(indices, want.indices)


def _scan_instr() -> kir.Instr:
    x = torch.randn(2, 9)
    (k,) = _scan_kernels(lambda a: torch.cumsum(a, 1), x)
    return next(i for lk in k.kernels for i in lk.body if i.op == "scan")


@pytest.mark.parametrize("breakage,needle", [
    (lambda c: c[:-1], "ends with scan_result"),
    (lambda c: (c[0], c[0], *c[2:]), "scan_arg 0..1"),
    (lambda c: (*c[:2], dataclasses.replace(c[2], args=(kir.Ref(3), kir.Ref(1))), *c[3:]), "not an earlier"),
    (lambda c: (*c[:2], kir.Instr("load", ("x", sympy.Integer(0)), "float32"), *c[2:]), "not a pointwise op"),
])
def test_malformed_combine_bodies_are_rejected(breakage, needle: str) -> None:
    scan = _scan_instr()
    bad = dataclasses.replace(scan, args=(scan.args[0], scan.args[1], breakage(scan.args[2])))
    lk = kir.LoopKernel("k", (sympy.Integer(2),), (sympy.Integer(9),), (kir.Instr("load", ("x", sympy.Integer(0)), "float32"),
                                                                         dataclasses.replace(bad, args=(bad.args[0], (kir.Ref(0),), bad.args[2]))))
    with pytest.raises(FormatError, match=needle):
        kir.from_json(kir.to_json(lk))


def test_a_scan_is_a_kernel_of_its_own() -> None:
    """The consumer of a scan's output is a kernel apart: Inductor would
    otherwise fuse it into the scan's loop nest (a pointwise producer is
    inlined into the scan's loads, as for any reduction)."""
    x = torch.randn(3, 40)
    with capture_graphs() as graphs:
        torch.compile(lambda a: torch.cumsum(a.exp(), 1) * 2, dynamic=False)(x.to("spyre"))
    groups = [k for g in graphs for k in g.kernels if isinstance(k, kir.KernelGroup)]
    scans = [k for k in groups if any(i.op == "scan" for lk in k.kernels for i in lk.body)]
    assert len(scans) == 1 and len(scans[0].kernels) == 1 and len(groups) == 2
    assert "aten.exp.default" in scans[0].kernels[0].origins
