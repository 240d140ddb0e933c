"""Size templates: one program per kernel structure and range of its run-time
size, bound at a launch instead of planned. A bound program is the planner's
program at that size but for where LX allocations sit; its numbers come from
running it; a binding that computes other numbers than the reference falls
back, announced, and withdraws its template."""

from __future__ import annotations

import dataclasses
import re
import warnings

import pytest
import sympy
import torch

from spyre_shims.backend import FallbackWarning
from spyre_shims.kernel_ir import BufferSpec, ExternKernel, Instr, KernelGroup, LoopKernel, Ref
from spyre_shims.reference import run_kernel
from tests.support import kernels as K

from spyre_adapter.backend.session import Session, activate, current
from spyre_adapter.backend.spyre import plan_launch
from spyre_adapter.emulator import Card, Executable, execute
from spyre_adapter.model import isa
from spyre_adapter.model.kinds import kind_of
from spyre_adapter.model.machine import DEFAULT
from spyre_adapter.scheduler import loops
from spyre_adapter.scheduler.loop_estimates import Division, model_group
from spyre_adapter.scheduler.matmul import plan_matmul
from spyre_adapter.scheduler.size_templates import SizeTemplate, TemplateMismatch, fit

S0 = K.S0


def scaled_rows(heads: int, dtype: str = "float32") -> KernelGroup:
    """out = a * 0.5 over ``heads`` rows of ``s0`` (a decode's scores, one row per head)."""
    idx = S0 * K.I0 + K.I1
    body = (Instr("load", ("a", idx), dtype), Instr("constant", (0.5, dtype), dtype),
            Instr("mul", (Ref(0), Ref(1)), dtype), Instr("store", ("out", idx, Ref(2), None)))

    def spec(name: str, role: str) -> BufferSpec:
        return BufferSpec(name, dtype, (sympy.Integer(heads), S0), (S0, sympy.Integer(1)), sympy.Integer(0),
                          heads * S0, role)
    return KernelGroup("scaled_rows", (LoopKernel("op0", (sympy.Integer(heads), S0), (), body),),
                       (spec("a", "input"), spec("out", "output")), ("a", "out"), ("s0",))


def mm_by_length(m: int, k: int, dtype: str = "float32") -> ExternKernel:
    """c = a @ b with ``s0`` columns of ``b`` (a decode's query times its keys)."""
    def spec(name: str, rows: int, role: str) -> BufferSpec:
        return BufferSpec(name, dtype, (sympy.Integer(rows), S0), (S0, sympy.Integer(1)), sympy.Integer(0),
                          rows * S0, role)
    return ExternKernel("mm_by_length", "mm", (K.buf("a", (m, k), dtype), spec("b", k, "input")),
                        spec("c", m, "output"), ("a", "b", "c"), symbols=("s0",))


def square(dtype: str = "float32") -> KernelGroup:
    """out = a * 0.5 over an s0 x s0 matrix: its extents are quadratic in the size."""
    idx = S0 * K.I0 + K.I1
    body = (Instr("load", ("a", idx), dtype), Instr("constant", (0.5, dtype), dtype),
            Instr("mul", (Ref(0), Ref(1)), dtype), Instr("store", ("out", idx, Ref(2), None)))

    def spec(name: str, role: str) -> BufferSpec:
        return BufferSpec(name, dtype, (S0, S0), (S0, sympy.Integer(1)), sympy.Integer(0), S0 * S0, role)
    return KernelGroup("square", (LoopKernel("op0", (S0, S0), (), body),),
                       (spec("a", "input"), spec("out", "output")), ("a", "out"), ("s0",))


CASES = [pytest.param(lambda: scaled_rows(8), loops.plan_group, id="loops"),
         pytest.param(lambda: mm_by_length(1, 32), plan_matmul, id="matmul")]


def _without_lx_addresses(p: object) -> list[str]:
    """A program's listing less its plan line and every LX address (all a
    bound program may differ in from the planner's)."""
    text = isa.listing(p).splitlines()[1:]  # type: ignore[arg-type]
    return [re.sub(r"0x[0-9a-f]+", "@", line) for line in text]


@pytest.mark.parametrize("make,planner", CASES)
def test_a_bound_program_is_the_planners_program_at_every_size_of_its_range(make, planner) -> None:
    kernel = make()
    t = fit(*(planner(kernel, DEFAULT, {S0: v}, "k") for v in (33, 34, 64)), 33, 64)
    for size in range(33, 65):
        bound, planned = t.bind(size), planner(kernel, DEFAULT, {S0: size}, "k")
        assert _without_lx_addresses(bound) == _without_lx_addresses(planned), size
        assert dict(bound.sizes) == {"s0": size}
        got = K.sized_buffers(kernel, {S0: size}, seed=size)
        want = {k: v.clone() for k, v in got.items()}
        run_kernel(kernel, want, {S0: size})
        execute(bound, got, Card(DEFAULT), {S0: size}, checking=True)  # every static rule, LX stamps
        out = K.outputs(kernel)[0]
        torch.testing.assert_close(got[out], want[out], rtol=1e-5, atol=1e-5)


def test_extents_quadratic_in_the_size_make_no_template() -> None:
    kernel = square()
    with pytest.raises(TemplateMismatch):
        fit(*(loops.plan_group(kernel, DEFAULT, {S0: v}, "k") for v in (33, 34, 64)), 33, 64)


def test_a_template_binds_only_its_range() -> None:
    kernel = scaled_rows(8)
    t = fit(*(loops.plan_group(kernel, DEFAULT, {S0: v}, "k") for v in (40, 41, 64)), 40, 64)
    assert t.covers(40) and t.covers(64) and not t.covers(39) and not t.covers(65)
    with pytest.raises(ValueError, match="outside"):
        t.bind(39)


def _launch(exe: Executable, kernel: KernelGroup, size: int) -> tuple[dict, dict]:
    got = K.sized_buffers(kernel, {S0: size}, seed=size)
    want = {k: v.clone() for k, v in got.items()}
    run_kernel(kernel, want, {S0: size})
    exe(got, {S0: size})
    return got, want


def _decoding(kernel: KernelGroup) -> tuple[Session, Executable]:
    """A session of its own and the kernel's executable launching in it."""
    session = Session(DEFAULT)
    return session, Executable(kernel, kind_of(kernel), plan_launch, lambda: session)


def _exact(exe: Executable, kernel: KernelGroup, sizes: range) -> None:
    """Launches at ``sizes`` in turn, each output the reference's exactly (no fallback)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)
        for size in sizes:
            got, want = _launch(exe, kernel, size)
            torch.testing.assert_close(got["out"], want["out"], rtol=0, atol=0)


def test_a_decode_plans_two_sizes_of_a_bucket_and_binds_the_rest() -> None:
    """The first size met in a bucket is planned alone; the second makes a
    template with it (the adjacent pair) and the bucket's top; the sizes between
    are bound, each checked and compared with the reference on its first launch."""
    kernel = scaled_rows(8)
    session, exe = _decoding(kernel)
    cache = session.programs
    with activate(session):
        _exact(exe, kernel, range(33, 65))
    # 33 and 34 (the adjacent pair) and 64 planned; 35..63 bound
    assert cache.planned == 3 and cache.bound == 64 - 35
    assert session.report.host_s["plan_at_launch"] > 0


def test_a_binding_with_other_numbers_falls_back_announced_and_withdraws_its_template() -> None:
    """Fault injection: a template whose integers stop moving binds programs that
    leave rows unwritten. The first launch's comparison with the reference
    catches it: that launch's outputs are the reference's, a fallback warning
    names the kernel, and the next size is planned, not bound."""
    kernel = scaled_rows(8)
    session = Session(DEFAULT)
    exe = Executable(kernel, kind_of(kernel), plan_launch, lambda: session)
    cache = session.programs
    with activate(session):
        for size in (33, 34):
            _launch(exe, kernel, size)
        (key, made), = cache.templates._made.items()
        t: SizeTemplate = made[0]
        made[0] = dataclasses.replace(t, slope=tuple(0 for _ in t.slope))
        planned = cache.planned
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            got, want = _launch(exe, kernel, 40)
        fallbacks = [str(w.message) for w in caught if issubclass(w.category, FallbackWarning)]
        assert len(fallbacks) == 1 and "scaled_rows" in fallbacks[0] and "size template" in fallbacks[0]
        torch.testing.assert_close(got["out"], want["out"], rtol=0, atol=0)
        assert cache.templates.find(key, 41) is None
        got, want = _launch(exe, kernel, 41)
        torch.testing.assert_close(got["out"], want["out"], rtol=0, atol=0)
        assert cache.planned == planned + 1


def kv_rows(heads: int = 4, width: int = 64, dtype: str = "float16") -> KernelGroup:
    """out = a * 0.5 over ``heads`` x (s0 + 1) x ``width``: a KV cache of one more
    position than the size symbol, laid out head by head."""
    n = S0 + 1
    idx = n * width * K.I0 + width * K.I1 + K.I2
    body = (Instr("load", ("a", idx), dtype), Instr("constant", (0.5, dtype), dtype),
            Instr("mul", (Ref(0), Ref(1)), dtype), Instr("store", ("out", idx, Ref(2), None)))
    shape = (sympy.Integer(heads), n, sympy.Integer(width))

    def spec(name: str, role: str) -> BufferSpec:
        return BufferSpec(name, dtype, shape, (n * width, sympy.Integer(width), sympy.Integer(1)), sympy.Integer(0),
                          heads * n * width, role)
    return KernelGroup("kv_rows", (LoopKernel("op0", shape, (), body),), (spec("a", "input"), spec("out", "output")),
                       ("a", "out"), ("s0",))


def test_a_division_is_stable_over_a_bucket_when_cores_take_whole_slabs_outside_the_size() -> None:
    """Adjacent sizes of a bucket (63 and 64): 4 heads of s0 + 1 rows divide over
    1, 2 or 4 cores at the same places relative to the size; over 8 cores a cut
    falls inside a head, where it moves as the size grows. A group whose rows do
    not change with the size (a reduction along it) divides the same way always."""
    gm, below = (model_group(kv_rows(), DEFAULT, {S0: s}) for s in (64, 63))
    assert [c for c in (1, 2, 4, 8, 16, 32) if loops.stable_division(gm, below, Division(c))] == [1, 2, 4]
    gm, below = (model_group(length_sums(16), DEFAULT, {S0: s}) for s in (64, 63))
    assert all(loops.stable_division(gm, below, Division(c)) for c in (1, 4, 8, 16))
    assert not loops.stable_division(gm, below, Division(4, rsplit=2))  # a cut inside the moving reduction


def length_sums(rows: int) -> KernelGroup:
    """c[i] = sum of row i's s0 + 1 scores (a decode's softmax denominators)."""
    n = S0 + 1
    body = (Instr("load", ("a", n * K.I0 + K.R0), "float32"),
            Instr("reduction", ("float32", "float32", "sum", Ref(0)), "float32"),
            Instr("store_reduction", ("c", K.I0, Ref(1))))
    a = BufferSpec("a", "float32", (sympy.Integer(rows), n), (n, sympy.Integer(1)), sympy.Integer(0), rows * n, "input")
    return KernelGroup("length_sums", (LoopKernel("op0", (sympy.Integer(rows),), (n,), body),),
                       (a, K.buf("c", (rows,), "float32", "output")), ("a", "c"), ("s0",))


def _kv_step(past: torch.Tensor, new: torch.Tensor, p: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """A GQA decode step's work on its KV length: append the new position, repeat
    the 4 KV heads for 16 query heads in fp32, and the probabilities times V."""
    k = torch.cat([past, new], dim=2)
    rep = k[:, :, None].expand(1, 4, 4, k.shape[2], 64).reshape(1, 16, k.shape[2], 64).float()
    return k, rep, torch.matmul(p, rep)


def test_a_decode_s_kv_kernels_are_bound_for_most_sizes_of_a_bucket() -> None:
    """Compiled with dynamic shapes, every new KV length of a bucket (33..64) is
    a new size for the cache append, the head repeat and the matmul over the
    length. Planning chooses divisions that keep one structure over the bucket
    (cores take whole heads; the tiles the top needs) and a matmul whose top
    crosses a K tile (65 positions in tiles of 64) is bound below its top: after
    the bucket's first two sizes nothing is planned, every size is bound, the
    numbers eager's at every size. (Dividing the positions over 8 to 32 cores,
    as the fastest estimate alone picks, planned every size.)"""
    f = torch.compile(_kv_step, dynamic=True)
    g = torch.Generator().manual_seed(0)
    new = torch.randn(1, 4, 1, 64, generator=g).half()
    programs = current().programs
    for s in range(33, 64):
        if s == 35:  # after the bucket's first two sizes (and the template's samples)
            planned, bound = programs.planned, programs.bound
        past, p = torch.randn(1, 4, s, 64, generator=g).half(), torch.randn(1, 16, 1, s + 1, generator=g)
        got = f(past.to("spyre"), new.to("spyre"), p.to("spyre"))
        for a, b in zip(got, _kv_step(past, new, p)):
            torch.testing.assert_close(a.cpu(), b, rtol=1e-3, atol=1e-3)
    assert programs.planned == planned, (programs.planned - planned, programs.bound - bound)
    assert programs.bound - bound >= 3 * (63 - 35 + 1) - 1  # (the matmul's 63 was a template sample)


def test_the_next_bucket_carries_the_template_on_and_plans_only_its_top() -> None:
    """A decode crossing into the next bucket (64 -> 65): the template of 33..64,
    bound at 63 and 64, is the adjacent pair of the new bucket's, so only its top
    (128) is planned; 65 onwards are bound, checked and equal to the reference.
    (Planning the new bucket's first two sizes and its top would be three.)"""
    kernel = scaled_rows(8)
    session, exe = _decoding(kernel)
    cache = session.programs
    with activate(session):
        _exact(exe, kernel, range(33, 65))
        planned, bound = cache.planned, cache.bound
        _exact(exe, kernel, range(65, 101))
    assert cache.planned == planned + 1 and cache.bound == bound + 101 - 65


def _cat_step(past: torch.Tensor, new: torch.Tensor) -> torch.Tensor:
    """A cache append of 2 KV heads of width 32 (the view fixes both, as a
    model's config does: only the length is a size symbol)."""
    k = torch.cat([past, new], dim=2)
    return k.view(1, 2, k.shape[2], 32)


def test_a_small_cache_append_keeps_whole_heads_when_the_difference_is_below_a_barrier() -> None:
    """hf:llama's default model's cache append (2 KV heads of 32 fp32 values a
    position): the division keeping heads whole uses 2 cores and is estimated a
    third of a microsecond slower than cutting the positions over 32 - over 15 %
    of so small a kernel, but less than one barrier's release
    (:func:`~spyre_adapter.scheduler.loops.within_slack`). It keeps one structure
    over the bucket: nothing is planned after the bucket's first two sizes, and
    every size is the reference's. (Within 15 % only, every size was planned.)"""
    f = torch.compile(_cat_step, dynamic=True)
    g = torch.Generator().manual_seed(0)
    new = torch.randn(1, 2, 1, 32, generator=g)
    programs = current().programs
    for s in range(33, 64):
        if s == 35:
            planned, bound = programs.planned, programs.bound
        past = torch.randn(1, 2, s, 32, generator=g)
        torch.testing.assert_close(f(past.to("spyre"), new.to("spyre")).cpu(), _cat_step(past, new), rtol=0, atol=0)
    assert programs.planned == planned and programs.bound - bound == 63 - 35 + 1


def test_the_stable_slack_is_relative_or_one_barrier() -> None:
    m = DEFAULT.replace(sync_ns=400.0)
    assert loops.within_slack(11500.0, 10000.0, m) and not loops.within_slack(11501.0, 10000.0, m)
    assert loops.within_slack(1116.0, 787.0, m) and not loops.within_slack(1201.0, 787.0, m)
    assert loops.within_slack(100.0, 200.0, m)


def _pv_step(p: torch.Tensor, v_past: torch.Tensor, v_new: torch.Tensor) -> torch.Tensor:
    """A decode's V cache append and probabilities times V over the KV length
    (s + 1 positions for a size symbol s): 8 heads of width 32, fixed by the views
    as a model's config fixes them."""
    v = torch.cat([v_past, v_new], 1)
    return torch.matmul(p.view(8, 1, v.shape[1]), v.view(8, v.shape[1], 32))


def test_a_matmul_over_the_kv_length_keeps_the_bucket_tops_tiling() -> None:
    """The P @ V of hf:llama's default model in the 65..128 bucket: at the top
    (129 positions) the K walk is tiled by 64, while at 66 positions one K tile of
    66 was the best-ranked tiling of the same grid, so the structure changed
    inside the bucket and every size was planned. Runs at a bucket's sizes now
    take the top's tiling where it fits them: after the bucket's first two sizes
    both kernels are bound at every size, equal to eager."""
    f = torch.compile(_pv_step, dynamic=True)
    g = torch.Generator().manual_seed(0)
    programs = current().programs
    for s in range(65, 100):
        if s == 67:
            planned, bound = programs.planned, programs.bound
        p, v, new = (torch.randn(8, 1, s + 1, generator=g), torch.randn(8, s, 32, generator=g),
                     torch.randn(8, 1, 32, generator=g))
        got = f(p.to("spyre"), v.to("spyre"), new.to("spyre")).cpu()
        torch.testing.assert_close(got, _pv_step(p, v, new), rtol=1e-4, atol=1e-4)
    assert programs.planned == planned and programs.bound - bound == 2 * (99 - 67 + 1)
