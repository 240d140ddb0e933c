"""Dynamic shapes: Python floats Dynamo passes as float64 launch parameters run
on the device (converted as Inductor's CPU backend converts them), float64 on
tensor data still falls back; integer histc runs on the device's host path."""

from __future__ import annotations

import pytest
import torch

from spyre_shims.backend import FallbackWarning

from spyre_adapter.harness.on_device import announced_fallbacks


def _rms(x: torch.Tensor, eps: float, scale: float) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * scale


def test_float_arguments_of_a_dynamic_graph_run_on_the_device(report) -> None:
    """With ``dynamic=True`` the floats become 0-d float64 graph inputs loaded
    inside the kernels: no fallback, results equal CPU eager for two lengths."""
    f = torch.compile(_rms, dynamic=True)
    with announced_fallbacks() as fallbacks:
        for n, eps in ((7, 1e-6), (13, 1e-5)):
            x = torch.randn(n, 64)
            got = f(x.to("spyre"), eps, 0.5).cpu()
            torch.testing.assert_close(got, _rms(x, eps, 0.5), atol=1e-5, rtol=1e-5)
    assert not fallbacks
    assert report.launch_count > 0
    dtypes = {b.dtype for g in report.graphs for k in g.kernels for b in k.buffers}
    assert "float64" in dtypes  # the scalars really were float64 kernel inputs


def test_float64_arithmetic_on_tensor_data_still_falls_back(report) -> None:
    f = torch.compile(lambda x, s: (x.double() * s).float(), dynamic=True)
    x = torch.randn(9, 33)
    with pytest.warns(FallbackWarning, match="float64"):
        got = f(x.to("spyre"), 1.5).cpu()
    torch.testing.assert_close(got, (x.double() * 1.5).float())


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.uint8])
def test_integer_histc_runs_on_the_device(dtype: torch.dtype) -> None:
    """MoE routing counts integer expert ids with histc on accelerators; the
    CPU kernel has no integer variant."""
    ids = torch.randint(0, 8, (257,), dtype=dtype)
    got = torch.histc(ids.to("spyre"), bins=8, min=0, max=7)
    assert got.device.type == "spyre" and got.dtype == dtype
    assert torch.equal(got.cpu(), torch.histc(ids.double(), bins=8, min=0, max=7).to(dtype))
    floats = torch.rand(100)
    assert torch.equal(torch.histc(floats.to("spyre"), bins=5).cpu(), torch.histc(floats, bins=5))
