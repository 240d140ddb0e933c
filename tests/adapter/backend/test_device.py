"""The "spyre" device in eager mode: creation, copies, views, in-place and out=
ops, printing, autograd and the torch.spyre module."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch


def test_device_basics() -> None:
    x = torch.randn(3, 5)
    y = x.to("spyre")
    assert y.device == torch.device("spyre", 0)
    assert y.is_contiguous() and y.stride() == (5, 1)
    assert torch.equal(y.cpu(), x)
    assert torch.spyre.is_available() and torch.spyre.device_count() == torch.spyre.machine().cards
    torch.spyre.synchronize()
    assert "spyre:0" in repr(y)


def test_factories_and_dtypes() -> None:
    z = torch.zeros(4, 3, device="spyre", dtype=torch.float16)
    assert z.dtype == torch.float16 and z.device.type == "spyre"
    assert torch.equal(torch.arange(7, device="spyre").cpu(), torch.arange(7))
    assert torch.equal(torch.full((2, 2), 3.0, device="spyre").cpu(), torch.full((2, 2), 3.0))


def test_views_alias_device_memory() -> None:
    x = torch.arange(24.0).view(4, 6)
    y = x.to("spyre")
    v = y[1:, ::2]
    assert v.storage_offset() == 6 and v.stride() == (6, 2)
    assert torch.equal(v.cpu(), x[1:, ::2])
    v.fill_(-1)  # writes through the view
    x[1:, ::2] = -1
    assert torch.equal(y.cpu(), x)
    t = y.t()
    assert t.stride() == (1, 6) and torch.equal(t.contiguous().cpu(), x.t())


def test_inplace_and_out_ops() -> None:
    x = torch.randn(3, 4)
    y = x.to("spyre")
    y.mul_(2).add_(1)
    assert torch.allclose(y.cpu(), x * 2 + 1)
    out = torch.empty(0, device="spyre")
    torch.add(y, y, out=out)  # out= resizes its argument
    assert out.shape == (3, 4) and torch.allclose(out.cpu(), 2 * (x * 2 + 1))


def test_cross_device_copies() -> None:
    a = torch.randn(2, 3, dtype=torch.bfloat16)
    b = torch.empty(2, 3, device="spyre", dtype=torch.bfloat16)
    b.copy_(a)
    c = torch.empty(2, 3, device="spyre", dtype=torch.bfloat16)
    c.copy_(b)
    assert torch.equal(c.cpu(), a)
    assert torch.equal(c.to(torch.float32).cpu(), a.float())


def test_reductions_with_indices_and_printing() -> None:
    x = torch.randn(5, 7)
    v, i = x.to("spyre").max(dim=1)
    ev, ei = x.max(dim=1)
    assert torch.equal(v.cpu(), ev) and torch.equal(i.cpu(), ei)
    assert "spyre:0" in str(v)


def test_autograd_on_device() -> None:
    x = torch.randn(4, 3)
    y = x.to("spyre").requires_grad_()
    (y.sin() * y).sum().backward()
    assert torch.allclose(y.grad.cpu(), torch.cos(x) * x + torch.sin(x), atol=1e-6)


def test_memory_outlives_the_first_tensor() -> None:
    y = torch.randn(1000).to("spyre")
    v = y[10:20]
    expected = y.cpu()[10:20].clone()
    del y
    torch.randn(1000).to("spyre")  # would reuse freed memory
    assert torch.equal(v.cpu(), expected)


def test_import_torch_alone_registers_the_device() -> None:
    """The torch.backends entry point makes ``import torch`` enough."""
    code = "import torch; x = torch.ones(2, device='spyre'); print(x.device, torch.spyre.device_count())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "spyre:0 8"


@pytest.mark.skipif(not hasattr(torch, "_grouped_mm"), reason="torch._grouped_mm arrived in torch 2.8")
@pytest.mark.parametrize("shapes, offs", [
    (((12, 8), (3, 8, 8)), (1, 6, 10)),     # 2-D x 3-D: row groups (MoE experts); rows past the end are zero
    (((3, 8, 8), (8, 16)), (4, 8, 16)),     # 3-D x 2-D: column groups
    (((8, 16), (16, 8)), (4, 8, 16)),       # 2-D x 2-D: groups along K
    (((3, 8, 8), (3, 8, 8)), None),         # 3-D x 3-D: a batch
])
def test_grouped_mm_eagerly_on_the_device(shapes, offs) -> None:
    """transformers' MoE experts call torch._grouped_mm on any accelerator; the
    CPU of torch 2.8 has no kernel for it, so the host runs the shim's own."""
    from shims._torch.eager import _grouped_mm

    gen = torch.Generator().manual_seed(0)
    a, b = (torch.randn(*s, generator=gen).bfloat16() for s in shapes)
    o = torch.tensor(offs, dtype=torch.int32) if offs is not None else None
    got = torch._grouped_mm(a.to("spyre"), b.to("spyre"), offs=None if o is None else o.to("spyre")).cpu()
    want = _grouped_mm(a, b, o)  # the reference: per group, fp32 products rounded once
    assert got.dtype == torch.bfloat16 and got.shape == want.shape
    rows = slice(0, offs[-1]) if offs is not None and len(shapes[0]) == 2 and len(shapes[1]) == 3 else slice(None)
    assert torch.equal(got[rows], want[rows])
    per_group = [a[lo:hi].float() @ b[g].float() for g, (lo, hi) in enumerate(zip((0, 1, 6), (1, 6, 10)))] \
        if offs == (1, 6, 10) else None
    if per_group is not None:
        assert torch.equal(want[:10], torch.cat(per_group).bfloat16()) and not want[10:].any()
