"""Complex arithmetic as real pairs (stable-API feature ``complex_as_real``):
rotary embeddings written with ``view_as_complex`` and ``polar`` (DeepSeek-V2,
Llama 4) compile to real kernels on the device instead of complex-dtype host
fallbacks; a complex op the pass does not know leaves the graph as it was."""

from __future__ import annotations

import torch

from spyre_adapter.harness.on_device import run_compiled
from spyre_shims.runtime import capture_graphs


def _rope(xq: torch.Tensor, freqs: torch.Tensor) -> torch.Tensor:
    """DeepSeek-V2's rotary embedding."""
    freqs_cis = torch.polar(torch.ones_like(freqs), freqs)
    xq_ = torch.view_as_complex(xq.float().reshape(*xq.shape[:-1], -1, 2))
    return torch.view_as_real(xq_ * freqs_cis.unsqueeze(1)).flatten(3).type_as(xq)


def test_complex_rotary_runs_on_the_device_as_real_pairs() -> None:
    g = torch.Generator().manual_seed(0)
    xq, freqs = torch.randn(2, 4, 5, 16, generator=g), torch.randn(2, 5, 8, generator=g)
    with capture_graphs() as graphs:
        got, fallbacks = run_compiled(_rope, [xq, freqs])
    assert not fallbacks
    torch.testing.assert_close(got, _rope(xq, freqs), atol=1e-6, rtol=1e-6)
    dtypes = {b.dtype for gr in graphs for k in gr.kernels for b in k.buffers}
    ops = {i.op for gr in graphs for k in gr.kernels if hasattr(k, "kernels") for lk in k.kernels for i in lk.body}
    assert not any("complex" in d for d in dtypes) and {"cos", "sin"} <= ops


def test_complex_sums_and_real_scalings() -> None:
    def f(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        z = torch.view_as_complex(a) * torch.view_as_complex(b) - torch.view_as_complex(a) * 0.5 + 2.0
        return torch.view_as_real(z / 3.0)

    a, b = torch.randn(3, 4, 2), torch.randn(3, 4, 2)
    got, fallbacks = run_compiled(f, [a, b])
    assert not fallbacks
    torch.testing.assert_close(got, f(a, b))


def test_a_real_tensor_made_complex_is_its_real_part_and_exact_zeros() -> None:
    """DeepSeek-V2's decode graph under dynamic=True casts a real input to
    complex64 (the family sweep fell back on the whole rotary chain): the cast
    is (x, 0), with an imaginary part of 0 even where x is inf or NaN."""
    def f(a: torch.Tensor, r: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.view_as_real(torch.view_as_complex(a) * r.to(torch.complex64)), torch.view_as_real(
            (r * 2).to(torch.complex64))

    a = torch.randn(3, 5, 2)
    r = torch.randn(3, 5)
    for dynamic in (False, True):
        got, fallbacks = run_compiled(f, [a, r], dynamic=dynamic)
        assert not fallbacks, (dynamic, fallbacks)
        torch.testing.assert_close(got, f(a, r))
    r[0, 0], r[1, 1] = float("inf"), float("nan")
    (_, cast), fallbacks = run_compiled(f, [a, r])
    assert not fallbacks and torch.equal(cast[..., 1], torch.zeros(3, 5))
    torch.testing.assert_close(cast[..., 0], r * 2, equal_nan=True)


def test_a_complex_op_the_pass_does_not_know_keeps_the_fallback() -> None:
    def f(a: torch.Tensor) -> torch.Tensor:
        return torch.view_as_real(torch.exp(torch.view_as_complex(a)))

    a = torch.randn(3, 4, 2)
    got, fallbacks = run_compiled(f, [a])
    assert fallbacks and all("complex" in m or "aten op" in m for m in fallbacks)
    torch.testing.assert_close(got, f(a))
