"""Convolutions on the device (fix by kind from the family sweep: Mamba and
linear-attention layers' short causal conv1d fell back to the host): taps of
the padded input, summed (depthwise) or multiplied with the weight per group
(PE arrays), against CPU eager."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from spyre_adapter.harness.on_device import run_compiled

_G = torch.Generator().manual_seed(11)


def _t(*shape: int, scale: float = 1.0) -> torch.Tensor:
    return torch.randn(*shape, generator=_G) * scale


CASES = {
    # Mamba / linear attention: depthwise, kernel 4, left padding 3, cut to the input length
    "causal_depthwise_conv1d": (lambda x, w, b: F.conv1d(x, w, b, padding=3, groups=8)[..., :x.shape[-1]],
                                lambda: [_t(2, 8, 13), _t(8, 1, 4), _t(8)]),
    "conv1d_stride_dilation": (lambda x, w, b: F.conv1d(x, w, b, stride=2, padding=1, dilation=2),
                               lambda: [_t(2, 6, 21), _t(5, 6, 3), _t(5)]),
    "conv1d_groups_no_bias": (lambda x, w: F.conv1d(x, w, groups=3), lambda: [_t(2, 6, 17), _t(9, 2, 3)]),
    "conv2d_padding": (lambda x, w, b: F.conv2d(x, w, b, padding=1), lambda: [_t(2, 3, 9, 10), _t(4, 3, 3, 3), _t(4)]),
    "conv2d_depthwise_unbatched": (lambda x, w, b: F.conv2d(x, w, b, padding=1, groups=4),
                                   lambda: [_t(4, 6, 6, scale=3), _t(4, 1, 3, 3, scale=3), _t(4)]),
    "conv3d": (lambda x, w: F.conv3d(x, w, padding=(1, 0, 1)), lambda: [_t(1, 2, 5, 6, 4), _t(3, 2, 2, 3, 3)]),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("name", sorted(CASES))
def test_convolutions_run_on_the_device(name: str, dtype: torch.dtype, report) -> None:
    fn, make = CASES[name]
    args = [a.to(dtype) for a in make()]
    got, fallbacks = run_compiled(fn, args)
    assert not fallbacks and report.launch_count > 0
    want = fn(*args)
    if dtype == torch.float32:
        torch.testing.assert_close(got, want, atol=2e-5, rtol=2e-5)
    else:  # one rounding from float32 sums, as eager: within one bf16 unit of the float32 result
        exact = fn(*[a.float() for a in args])
        ulp = exact.abs().clamp(min=1e-3) * 2.0 ** -7
        assert bool(((got.float() - exact).abs() <= ulp).all())


def test_a_depthwise_bf16_convolution_rounds_once_like_eager() -> None:
    """Rounding each partial sum to bf16 put results two units off eager's."""
    x, w, b = (_t(4, 6, 6, scale=3).bfloat16(), _t(4, 1, 3, 3, scale=3).bfloat16(), _t(4).bfloat16())
    fn = lambda x, w, b: F.conv2d(x, w, b, padding=1, groups=4)  # noqa: E731
    got, _ = run_compiled(fn, [x, w, b])
    assert torch.equal(got, fn(x, w, b))


def test_transposed_convolutions_fall_back_visibly() -> None:
    x, w = _t(1, 4, 9), _t(4, 2, 3)
    got, fallbacks = run_compiled(lambda x, w: F.conv_transpose1d(x, w), [x, w])
    assert any("convolution" in f for f in fallbacks)
    torch.testing.assert_close(got, F.conv_transpose1d(x, w))
