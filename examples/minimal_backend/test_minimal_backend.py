"""The example backend end to end: device tensors, compiled kernels through
``RefInterpreter``, results equal to CPU eager, declined kernels on the host."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

import minimal_backend
from spyre_shims import kernel_ir
from spyre_shims.backend import FallbackWarning
from spyre_shims.runtime import reset_compiled

HERE = Path(__file__).resolve().parent
BACKEND = minimal_backend.register()


@pytest.fixture(autouse=True)
def _fresh() -> Iterator[None]:
    reset_compiled()
    BACKEND.compiled.clear()
    BACKEND.graphs.clear()
    yield


def run(fn: Callable[..., torch.Tensor], *args: torch.Tensor, **compile_options: Any) -> tuple[torch.Tensor, list[str]]:
    """``fn`` compiled for refdev on device copies of ``args``: (host result, fallback warnings)."""
    compiled = torch.compile(fn, **compile_options)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", FallbackWarning)
        out = compiled(*(a.to(minimal_backend.DEVICE) for a in args))
    assert out.device.type == minimal_backend.DEVICE
    return out.cpu(), [str(w.message) for w in caught if issubclass(w.category, FallbackWarning)]


def test_device_tensors_behave_like_tensors() -> None:
    x = torch.arange(6.0).reshape(2, 3)
    d = x.to("refdev")
    assert d.device == torch.device("refdev", 0)
    assert torch.equal((d.t() * 2).cpu(), x.t() * 2)  # eager ops run on the host-backed memory


def test_fused_softmax_is_compiled_by_the_interpreter() -> None:
    x = torch.randn(8, 33)
    got, fallbacks = run(lambda a: torch.softmax(a, -1) * 2, x)
    torch.testing.assert_close(got, torch.softmax(x, -1) * 2)
    assert not fallbacks
    groups = [k for k in BACKEND.compiled if isinstance(k, kernel_ir.KernelGroup)]
    assert groups and any(lk.is_reduction for g in groups for lk in g.kernels)
    assert [g.device for g in BACKEND.graphs] == ["refdev"]
    assert len(BACKEND.graphs[0].kernels) == len(BACKEND.compiled)


def test_matmul_arrives_as_an_extern_kernel() -> None:
    a, b = torch.randn(16, 24), torch.randn(24, 8)
    got, fallbacks = run(lambda x, y: torch.relu(x @ y), a, b)
    torch.testing.assert_close(got, torch.relu(a @ b))
    assert not fallbacks
    assert [k.op for k in BACKEND.compiled if isinstance(k, kernel_ir.ExternKernel)] == ["mm"]


def test_dynamic_shapes_pass_sizes_at_run_time() -> None:
    fn = torch.compile(lambda a: (a * a).sum(-1), dynamic=True)
    for rows in (3, 10):
        x = torch.randn(rows, 5)
        torch.testing.assert_close(fn(x.to("refdev")).cpu(), (x * x).sum(-1))
    assert any(k.symbols for k in BACKEND.compiled)


def test_declined_kernel_runs_on_the_host_with_a_warning() -> None:
    x = torch.randn(4, 4, dtype=torch.float64)
    got, fallbacks = run(lambda a: a.exp() + 1, x)
    torch.testing.assert_close(got, x.exp() + 1)
    assert fallbacks and "fallback" in fallbacks[0]
    assert BACKEND.compiled == []


def test_payloads_round_trip_through_json() -> None:
    run(lambda a: torch.tanh(a).mean(0), torch.randn(6, 7))
    assert BACKEND.compiled
    for kernel in BACKEND.compiled:
        assert kernel_ir.from_json(kernel_ir.to_json(kernel)) == kernel


def test_a_cached_program_loads_in_a_fresh_process(tmp_path: Path) -> None:
    """Inductor's FX graph cache replays the generated program: the second process
    never calls compile(), only load(), and still gets the right numbers."""
    script = textwrap.dedent("""
        import json, torch, minimal_backend
        backend = minimal_backend.register()
        x = torch.arange(12.0).reshape(3, 4)
        y = torch.compile(lambda a: torch.tanh(a).mean(0))(x.to("refdev")).cpu()
        ok = torch.allclose(y, torch.tanh(x).mean(0))
        print(json.dumps([len(backend.compiled), len(backend.graphs), ok]))
    """)
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path), "PYTHONPATH": str(HERE)}
    runs = [subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=600)
            for _ in range(2)]
    for r in runs:
        assert r.returncode == 0, r.stderr
    first, second = (json.loads(r.stdout.strip().splitlines()[-1]) for r in runs)
    assert first[0] > 0 and first[1:] == [1, True]
    assert second == [0, 1, True]
