"""Bad input: visible fallbacks with correct numbers, clear errors."""

from __future__ import annotations

import pytest
import torch
from packaging.version import Version

from spyre_shims._torch import version as shim_version
from spyre_shims.errors import UnsupportedTorchError
from tests.support.compare import assert_matches_eager


def test_kernel_the_backend_cannot_compile_falls_back_visibly(report) -> None:
    """bessel_j0 has no Spyre SFU implementation: the kernel runs on the host
    reference evaluator, with a warning naming the op, and the numbers match."""
    x = torch.rand(63, 129) * 5
    fallbacks = assert_matches_eager(lambda a: torch.special.bessel_j0(a) + 1, [x], atol=1e-5, rtol=1e-5,
                                     allow_fallback=True)
    assert any("fallback" in f and "bessel_j0" in f for f in fallbacks), fallbacks


def test_float64_kernel_falls_back_visibly(report) -> None:
    x = torch.randn(17, 33, dtype=torch.float64)
    fallbacks = assert_matches_eager(lambda a: a.exp() * 2, [x], atol=1e-12, rtol=1e-12, allow_fallback=True)
    assert any("fallback" in f and "float64" in f for f in fallbacks), fallbacks


def test_aten_op_without_lowering_falls_back_visibly(report) -> None:
    """histc has no device kernel (no lowering Inductor could give the backend):
    it stays an aten call that runs on the host, announced as a fallback."""
    x = torch.randn(5, 31)
    fallbacks = assert_matches_eager(lambda a: torch.histc(a * 2, 10) + 1, [x], atol=1e-6, rtol=1e-6,
                                     allow_fallback=True)
    assert any("fallback" in f and "histc" in f for f in fallbacks), fallbacks
    assert any("histc" in k for k in report.fallbacks)


def test_release_outside_window_names_feature_release_and_window() -> None:
    assert shim_version.in_window(Version("2.6.0")) and shim_version.in_window(Version("2.15.1"))
    assert not shim_version.in_window(Version("2.5.1")) and not shim_version.in_window(Version("2.16.0"))
    with pytest.raises(UnsupportedTorchError) as info:
        shim_version.require_window("Inductor backend registration", Version("2.5.1"))
    msg = str(info.value)
    assert "Inductor backend registration" in msg and "2.5.1" in msg and "2.6 - 2.15" in msg


def test_unknown_machine_parameter_is_rejected() -> None:
    from spyre_adapter.model.machine import Machine

    with pytest.raises(ValueError, match="'lx_mib' is not accepted: expected a machine parameter"):
        Machine.from_spec("cores=8,lx_mib=3")
