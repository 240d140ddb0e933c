"""Kernel kinds are one registry: the built-in kinds take the kernels they
should, and a new kind is one record - a toy kind added here, in this file
alone, is planned, compiled, launched and reported like the built-in ones."""

from __future__ import annotations

from collections.abc import Mapping

import pytest
import sympy
import torch

from spyre_shims.errors import UnsupportedKernelError
from spyre_shims.kernel_ir import ExternKernel
from tests.support import kernels as K

from spyre_adapter.backend.session import Session, activate, current
from spyre_adapter.backend.spyre import SpyreBackend, plan, plan_launch, supported_kind
from spyre_adapter.emulator import Executable
from spyre_adapter.model.errors import EmulatorError
from spyre_adapter.model.isa import listing
from spyre_adapter.model.kinds import MATMUL_OPS, KernelKind, kind_of, kinds, register_kind, unregister_kind
from spyre_adapter.model.machine import DEFAULT, Machine
from spyre_adapter.model.program import CoreProgram, DmaLoad, DmaStore, LoopPlan, Lx, Program, Region
from spyre_adapter.scheduler.kinds import ATTENTION, LOOPS, MATMUL


def test_the_built_in_kinds_take_their_kernels() -> None:
    assert [k.name for k in kinds()][:4] == ["scan", "loops", "matmul", "attention"]
    assert kind_of(K.add(8, 64)) is LOOPS
    assert kind_of(K.mm(64, 64, 64)) is MATMUL and K.mm(64, 64, 64).op in MATMUL_OPS
    from spyre_adapter.scheduler import attention
    s = attention.Shape(1, 2, 64, 64, 32, 2, True)
    assert kind_of(attention.kernel_ir(s, "a")) is ATTENTION
    assert kind_of(ExternKernel("x", "cholesky", (), K.buf("o", (4,)), ("o",))) is None
    with pytest.raises(UnsupportedKernelError, match="no Spyre planner"):
        supported_kind(ExternKernel("x", "cholesky", (), K.buf("o", (4,)), ("o",)))


def test_a_kind_s_dtypes_are_checked_before_planning() -> None:
    with pytest.raises(UnsupportedKernelError, match="PE arrays do not multiply int32"):
        supported_kind(K.mm(64, 64, 64, dtype="int32"))


# ------------------------------------------------------------------ a toy kind: a copy split over the cores

def _plan_copy(kernel: ExternKernel, m: Machine, sizes: Mapping[sympy.Symbol, int]) -> Program:
    """out = x, each core copying its share of whole sticks through its LX."""
    n = int(kernel.output.size[0])
    per = -(-n // m.cores)
    per = -(-per // 32) * 32  # whole 128-byte fp32 sticks per core
    cores = []
    for c in range(m.cores):
        lo, hi = min(c * per, n), min((c + 1) * per, n)
        steps = () if lo == hi else (DmaLoad(Region("x", lo, (hi - lo,), (1,)), Lx.dense(0, "float32", (hi - lo,))),
                                     DmaStore(Lx.dense(0, "float32", (hi - lo,)), Region("y", lo, (hi - lo,), (1,))))
        cores.append(CoreProgram(c, steps))
    return Program(kernel.name, "toy", kernel, (), tuple(cores), LoopPlan(m.cores, 1, n, 32, 1))


TOY = KernelKind(name="toy_copy", program_kind="toy",
                 matches=lambda k: isinstance(k, ExternKernel) and k.op == "toy_copy", plan=_plan_copy,
                 dtypes=frozenset({"float32"}), work=lambda kernel, sizes: ("vec", 0.0),
                 host_fallback=False, reference=False)


@pytest.fixture
def toy() -> KernelKind:
    register_kind(TOY)
    yield TOY
    unregister_kind(TOY.name)


def _copy_kernel(n: int) -> ExternKernel:
    return ExternKernel("copy0", "toy_copy", (K.buf("x", (n,), "float32"),), K.buf("y", (n,), "float32", "output"),
                        ("x", "y"))


def test_a_new_kind_is_one_record(toy: KernelKind) -> None:
    kernel = _copy_kernel(5000)
    assert supported_kind(kernel) is toy
    p = plan(kernel, DEFAULT, {})
    assert p.kind == "toy" and p.cores_used == DEFAULT.cores and "dma.ld" in listing(p)
    session = Session(DEFAULT)
    with activate(session):
        backend = SpyreBackend()
        launch = backend.load(backend.compile(kernel))  # the compile path takes the kind as it is
        x = torch.randn(5000)
        y = torch.empty(5000)
        launch({"x": x, "y": y}, {})
    assert torch.equal(y, x)  # the numbers come from executing the toy's program
    (row,) = session.report.per_kernel()
    sticks = -(-5000 * 4 // 128)  # each core's share starts on a stick: every stick of x once, of y once
    assert row["kind"] == "toy" and row["cores"] == DEFAULT.cores and row["dram_bytes"] == 2 * sticks * 128


def test_the_emulator_holds_a_new_kind_to_the_hardware_rules(toy: KernelKind) -> None:
    """The toy's planner does not look at LX: its program is refused on launch, not run."""
    tiny = DEFAULT.replace(lx_usable_bytes=1024)
    session = Session(tiny)
    kernel = _copy_kernel(64 * 1024)  # 64 KiB per core does not fit 1 KiB of LX
    exe = Executable(kernel, toy, plan_launch, lambda: session)
    with activate(session), pytest.raises(EmulatorError, match="allocation over capacity"):
        exe({"x": torch.randn(64 * 1024), "y": torch.empty(64 * 1024)}, {})
    assert current() is not session
