"""torch.autocast on the spyre device: the dtypes a CUDA user expects, eagerly
and compiled, and results equal to the same computation written with explicit
casts on the CPU."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from spyre_shims.amp import autocast_policy

from spyre_adapter.harness.on_device import run_compiled


def test_module_offers_amp_dtypes() -> None:
    assert torch.spyre.get_amp_supported_dtype() == [torch.float16, torch.bfloat16]
    with torch.autocast("spyre", dtype=torch.float16, enabled=False):
        assert not torch.is_autocast_enabled("spyre")
    assert autocast_policy()["mm"] == "lower_precision" and autocast_policy()["softmax"] == "fp32_dtype_arg"


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_eager_autocast_dtypes(dtype: torch.dtype) -> None:
    a, b = torch.randn(8, 16).to("spyre"), torch.randn(16, 4).to("spyre")
    with torch.autocast("spyre", dtype=dtype):
        x = a @ b
        assert x.dtype == dtype
        assert F.linear(a, b.t()).dtype == dtype
        assert torch.softmax(x, -1).dtype == torch.float32
        assert x.sum().dtype == torch.float32
        assert F.layer_norm(x, (4,)).dtype == torch.float32
        assert torch.exp(x).dtype == torch.float32
        assert (x + x).dtype == dtype  # no rule: unchanged
        assert torch.addcmul(a, a.half(), a).dtype == torch.float32  # promote
        assert torch.softmax(x, -1, dtype=torch.float16).dtype == torch.float16  # the caller's choice
    assert (a @ b).dtype == torch.float32  # outside the region


def _block(x: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    h = x @ w1
    return torch.softmax(h, -1) @ w2, F.layer_norm(h, (h.shape[-1],))


def _explicit(x: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, ...]:
    h = x.to(dtype) @ w1.to(dtype)
    s = torch.softmax(h, -1, dtype=torch.float32)
    return s.to(dtype) @ w2.to(dtype), F.layer_norm(h.float(), (h.shape[-1],))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_compiled_autocast_matches_explicit_casts(report, dtype: torch.dtype) -> None:
    x, w1, w2 = torch.randn(32, 64), torch.randn(64, 48) / 8, torch.randn(48, 16)

    def f(*args: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        with torch.autocast("spyre", dtype=dtype):
            return _block(*args)

    got, fallbacks = run_compiled(f, (x, w1, w2))
    assert not fallbacks
    assert report.launch_count > 0
    want = _explicit(x, w1, w2, dtype)
    assert [t.dtype for t in got] == [dtype, torch.float32]
    tol = {"atol": 2e-2, "rtol": 2e-2} if dtype == torch.float16 else {"atol": 1e-1, "rtol": 5e-2}
    for g, w in zip(got, want):
        torch.testing.assert_close(g.cpu(), w, **tol)
