"""The hand-written kernel channel: Spyre's flash-style attention against the
generic path (the checked reference), and the routing rules."""

from __future__ import annotations

import contextlib
import math

import pytest
import torch
import torch.nn.functional as F

from spyre_shims.errors import UnsupportedKernelError
from spyre_shims.kernels import registered_kernels
from spyre_shims.runtime import capture_graphs, reset_compiled

from spyre_adapter.backend import attention as device_attention
from spyre_adapter.backend.session import current
from spyre_adapter.backend.spyre import plan
from spyre_adapter.emulator import Card, execute, metrics
from spyre_adapter.model import timing
from spyre_adapter.model.isa import with_buffers
from spyre_adapter.model.machine import DEFAULT
from spyre_adapter.model.program import DmaLoad
from spyre_adapter.model.rules import static_check
from spyre_adapter.model.traffic import compulsory_bytes, region_sticks
from spyre_adapter.scheduler import attention
from spyre_adapter.scheduler.kinds import work_of


def _qkv(b: int, h: int, lq: int, lk: int, d: int, dtype: torch.dtype) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(lq * 7 + lk)
    return [torch.randn(b, h, n, d, generator=g).to(dtype) for n in (lq, lk, lk)]


def _compiled(fn, args, generic: bool = False):
    reset_compiled()
    ctx = current().generic_path() if generic else contextlib.nullcontext()
    with ctx, capture_graphs() as graphs:
        out = torch.compile(lambda *a: fn(*a), dynamic=False)(*[a.to("spyre") for a in args]).cpu()
    return out, [k for g in graphs for k in g.kernels], [f for g in graphs for f in g.fallbacks]


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-4), (torch.float16, 2e-3), (torch.bfloat16, 2e-2)])
@pytest.mark.parametrize("shape", [(1, 4, 200, 200, 64), (2, 3, 64, 257, 32), (1, 2, 300, 130, 16)])
def test_flash_kernel_matches_the_generic_path(shape, dtype, tol, causal, report) -> None:
    args = _qkv(*shape, dtype)
    fn = lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=causal)  # noqa: E731
    hand, kernels, fallbacks = _compiled(fn, args)
    generic, generic_kernels, _ = _compiled(fn, args, generic=True)
    expected = F.scaled_dot_product_attention(*[a.double() for a in args], is_causal=causal)
    assert [k.op for k in kernels if hasattr(k, "op")] == ["attention"] and not fallbacks
    assert "attention" not in [getattr(k, "op", None) for k in generic_kernels]
    torch.testing.assert_close(hand.double(), expected, atol=tol, rtol=tol)
    torch.testing.assert_close(hand.double(), generic.double(), atol=2 * tol, rtol=2 * tol)
    assert any(launch.name.startswith("attention[") for launch in report.launches)


@pytest.mark.parametrize("cores", [1, 3, 32])
def test_the_executed_program_is_the_attention(cores: int) -> None:
    """The kernel's numbers come from running its program: query and key blocks,
    the running softmax and the PE steps, on any number of cores."""
    q, k, v = _qkv(2, 2, 130, 260, 16, torch.float32)
    m = DEFAULT.replace(cores=cores)
    s = attention.shape_of(q.shape, k.shape, v.shape, True, "float32")
    p = attention.plan(s, m, 0.3)
    out = torch.empty(2, 2, 130, 16)
    execute(p, {"q": q.reshape(-1), "k": k.reshape(-1), "v": v.reshape(-1), "out": out.view(-1)}, Card(m))
    torch.testing.assert_close(out, device_attention.reference(q, k, v, True, 0.3), atol=1e-5, rtol=1e-5)


def test_calls_the_kernel_does_not_handle_take_the_generic_path(report) -> None:
    q, k, v = _qkv(1, 2, 64, 64, 32, torch.float32)
    mask = torch.randn(64, 64)
    with_mask = lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m)  # noqa: E731
    out, kernels, fallbacks = _compiled(with_mask, [q, k, v, mask])
    assert "attention" not in [getattr(k2, "op", None) for k2 in kernels] and not fallbacks
    torch.testing.assert_close(out, with_mask(q, k, v, mask), atol=1e-4, rtol=1e-4)


def test_kernel_is_cheaper_than_the_generic_path_on_the_model(report) -> None:
    q, k, v = _qkv(1, 8, 256, 256, 64, torch.float16)
    fn = lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True)  # noqa: E731
    times = {}
    for generic in (False, True):
        report.reset()
        _compiled(fn, [q, k, v], generic)
        times[generic] = report.clock_ns
    assert times[True] > 3 * times[False]


def test_registration_is_through_the_stable_api() -> None:
    spec = registered_kernels()["attention"]
    assert spec.device == "spyre" and spec.replaces is F.scaled_dot_product_attention
    assert spec.qualname == "shim_kernels::attention"
    # on the CPU the custom op computes the reference
    q, k, v = _qkv(1, 1, 8, 8, 4, torch.float32)
    torch.testing.assert_close(spec.op(q, k, v, True, 1 / math.sqrt(4)), device_attention.reference(q, k, v, True, 0.5))


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("cores", [1, 2, 32])
def test_kernel_reads_every_kv_block_it_uses(causal: bool, cores: int) -> None:
    """K/V kept in LX between query blocks of a head: a causal block needs one more
    K/V block than the previous one, which must still be read (rho >= 1)."""
    m = DEFAULT.replace(cores=cores)
    s = attention.Shape(batch=1, heads=2, lq=1024, lk=1024, d=128, isz=2, causal=causal)
    p = attention.plan(s, m)
    k_read = sum(region_sticks(i.src, 2) * 128 for st in p.cores for i in st.instrs
                 if isinstance(i, DmaLoad) and i.src.buffer == "k")
    head = s.lk * s.d * s.isz
    if cores <= 2:  # every head's query blocks on one core: its K is read exactly once
        assert p.plan.kv_resident and k_read == s.heads * head
    assert k_read >= s.heads * head
    tl = timing.simulate(p, m)
    assert metrics.compute(p, tl, m, compulsory_bytes(p.kernel, None, {}), 0, work_of(p.kernel)).rho >= 1.0


def test_the_recorded_call_plans_as_the_hand_written_program() -> None:
    """The graph records the kernel as an extern call named ``attention`` with its
    scalar arguments by name: planning it gives the kernel's own program."""
    q, k, v = _qkv(1, 4, 256, 256, 64, torch.float16)
    _, kernels, _ = _compiled(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True), [q, k, v])
    (call,) = [kk for kk in kernels if getattr(kk, "op", "") == "attention"]
    assert call.attr("causal") is True and call.attr("scale") == pytest.approx(1 / 8)
    p = plan(call, DEFAULT, {})
    # The program names the graph's buffers (the output's layout completed: the capture carries none).
    assert [b.name for b in p.kernel.buffers] == [b.name for b in call.buffers]
    assert tuple(p.kernel.output.size) == (1, 4, 256, 64)
    static_check(p, DEFAULT, {b.name: int(b.storage_numel) for b in p.kernel.buffers})
    expected = attention.plan(attention.Shape(1, 4, 256, 256, 64, 2, True), DEFAULT)
    names = dict(zip(("q", "k", "v", "out"), (b.name for b in p.kernel.buffers)))
    assert p.plan == expected.plan and p.cores == with_buffers(expected, names, p.kernel, p.bodies).cores


def test_dynamic_shapes_compile_and_run_the_kernel(report) -> None:
    """Issue 33: with dynamic=True the recorded call has symbolic sizes; the
    graph's limit check took int() of them (InductorError: Cannot convert
    symbols to int). It now runs on the device at every length, one compile."""
    fn = lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True)  # noqa: E731
    compiled = torch.compile(lambda *a: fn(*a), dynamic=True)
    with capture_graphs() as graphs:
        for n in (40, 71, 9):
            args = _qkv(1, 2, n, n, 32, torch.float32)
            got = compiled(*[a.to("spyre") for a in args]).cpu()
            torch.testing.assert_close(got, fn(*args), atol=1e-5, rtol=1e-5)
    (call,) = [k for g in graphs for k in g.kernels if getattr(k, "op", "") == "attention"]
    assert any(e.free_symbols for e in call.inputs[0].size)  # the sizes really were symbolic
    assert len(graphs) == 1 and not graphs[0].fallbacks
    assert sum(launch.name.startswith("attention[") for launch in report.launches) == 3


def test_a_symbolic_call_is_planned_with_its_sizes_bound() -> None:
    q, k, v = _qkv(1, 2, 40, 40, 32, torch.float32)
    fn = lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True)  # noqa: E731
    with capture_graphs() as graphs:
        torch.compile(lambda *a: fn(*a), dynamic=True)(q.to("spyre"), k.to("spyre"), v.to("spyre"))
    (call,) = [kk for g in graphs for kk in g.kernels if getattr(kk, "op", "") == "attention"]
    sizes = {e: n for b, t in zip(call.inputs, (q, k, v)) for e, n in zip(b.size, t.shape) if e.is_Symbol}
    assert sizes  # symbols stand for the sizes
    with pytest.raises(UnsupportedKernelError, match="symbolic size"):
        attention.program_for(call, DEFAULT)
    p = plan(call, DEFAULT, sizes)
    assert p.plan == attention.plan(attention.Shape(1, 2, 40, 40, 32, 4, True), DEFAULT).plan


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("shape", [(1, 4, 5, 5, 8), (2, 3, 7, 7, 4), (1, 2, 130, 130, 8)])
def test_head_dims_under_a_stick_keep_each_cores_output_whole_sticks(shape, dtype, report) -> None:
    """A head dim of a few elements puts several query blocks' outputs in one
    stick: the division gives each core whole sticks (two cores writing parts
    of one stick stopped the emulator: 'misaligned sticks')."""
    args = _qkv(*shape, dtype)
    fn = lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True)  # noqa: E731
    got, kernels, fallbacks = _compiled(fn, args)
    assert [k.op for k in kernels if hasattr(k, "op")] == ["attention"] and not fallbacks
    tol = 1e-5 if dtype == torch.float32 else 2e-3
    torch.testing.assert_close(got.float(), fn(*[a.float() for a in args]), atol=tol, rtol=tol)
    s = attention.Shape(*shape[:5], isz=args[0].element_size(), causal=True, dtype=str(dtype)[6:])
    p = attention.plan(s, DEFAULT)
    if shape[2] > 128:  # two query blocks per head: the first ends on a stick, a cut point
        assert p.cores_used > 1
    static_check(p, DEFAULT, {n: math.prod(shape[:3]) * shape[4] for n in ("q", "k", "v", "out")})
