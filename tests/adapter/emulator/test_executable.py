"""Identical kernels (every layer of a model) launch one program: the first
layer's launch is checked, later layers run unchecked on their own buffers and
share its recorded steps and timing - and every result still comes from
executing the program on that kernel's data (compared with the reference
semantics here)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import sympy
import torch

from spyre_shims import index as sidx
from spyre_shims.kernel_ir import Instr, KernelGroup, LoopKernel, Ref
from spyre_shims.reference import run_kernel
from tests.support import kernels as K

from spyre_adapter.backend.session import Session, current
from spyre_adapter.backend.spyre import plan_launch
from spyre_adapter.emulator import Executable, executor
from spyre_adapter.model import isa
from spyre_adapter.model.kinds import kind_of
from spyre_adapter.model.machine import DEFAULT
from spyre_adapter.model.rules import EmulatorError
from spyre_adapter.model.traffic import compulsory_bytes


@pytest.fixture(autouse=True)
def fresh_program_cache() -> Iterator[None]:
    current().programs.clear()
    yield
    current().programs.clear()


@pytest.fixture
def checked_launches(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Names of the programs whose launch ran the static checks (a spy: the real
    checks still run)."""
    seen: list[str] = []
    real = executor.static_check

    def spy(p, *args, **kwargs):  # type: ignore[no-untyped-def]
        seen.append(p.name)
        return real(p, *args, **kwargs)
    monkeypatch.setattr(executor, "static_check", spy)
    return seen


def _launch(exe: Executable, bufs: dict[str, torch.Tensor], sizes: dict[sympy.Symbol, int]) -> None:
    want = {k: v.clone() for k, v in bufs.items()}
    run_kernel(exe.kernel, want, sizes)
    exe(bufs, sizes)
    for b in exe.kernel.buffers:
        if b.role == "output":
            torch.testing.assert_close(bufs[b.name], want[b.name], rtol=0, atol=0)


def _two_layers(one: KernelGroup, names: dict[str, str]) -> tuple[Executable, Executable, Any]:
    """``one`` and a copy with its buffers renamed (``names``), as two layers on one card."""
    two = K.renamed(one, names, one.name + "2")
    session = Session(DEFAULT)
    e1, e2 = (Executable(k, kind_of(k), plan_launch, lambda: session) for k in (one, two))
    return e1, e2, session.report


_ROWS = {"a": "x2", "w": "w2", "out": "y2"}
_EMBEDDING = {"idx": "ids2", "table": "tab2", "out": "o2"}


def test_layers_share_the_first_layer_s_checked_program_and_its_recording(checked_launches: list[str]) -> None:
    e1, e2, report = _two_layers(K.rows_times_row(256), _ROWS)
    one, two = e1.kernel, e2.kernel
    sizes = {K.S0: 37}
    _launch(e1, K.sized_buffers(one, sizes, seed=1), sizes)
    _launch(e2, K.sized_buffers(two, sizes, seed=2), sizes)
    assert checked_launches == ["rows_times_row"]  # layer 2's first launch is one more launch of the program
    p1, p2 = e1.plan(DEFAULT, sizes), e2.plan(DEFAULT, sizes)
    assert p1.runs is p2.runs and p1.state is p2.state and p1.state is not None
    assert {i.src.buffer for c in p2.program.cores for i in c.instrs if hasattr(i, "src") and
            hasattr(i.src, "buffer")} <= {"x2", "w2"}  # what reports show names layer 2's buffers
    (shared,) = p1.state.values()
    # Layer 2's launch ran unrecorded: a program launched twice (a decode's KV
    # length, once per layer) never pays for a recording.
    assert shared.replay.thunks is None and shared.unchecked == 1
    _launch(e1, K.sized_buffers(one, sizes, seed=3), sizes)
    recorded = shared.replay.thunks
    assert recorded  # by the third launch, replayed from now on by both
    _launch(e2, K.sized_buffers(two, sizes, seed=13), sizes)
    for seed in (4, 5):
        _launch(e1, K.sized_buffers(one, sizes, seed=seed), sizes)
        _launch(e2, K.sized_buffers(two, sizes, seed=seed + 10), sizes)
    assert shared.replay.thunks is recorded and shared.unchecked == 7
    assert checked_launches == ["rows_times_row"]
    names = [r["name"] for r in report.per_kernel()]
    assert names == ["rows_times_row", "rows_times_row2"]
    # A new run-time size is another program, planned and checked for the layer
    # launched first, and shared by the other.
    sizes = {K.S0: 70}
    _launch(e2, K.sized_buffers(two, sizes, seed=5), sizes)
    _launch(e1, K.sized_buffers(one, sizes, seed=6), sizes)
    assert checked_launches == ["rows_times_row", "rows_times_row2"]


def test_a_layer_renames_the_shared_program_only_when_asked(checked_launches: list[str]) -> None:
    """Layer 2 runs layer 1's program as planned; its own copy under its buffer
    names (for reports that keep programs, verification, listings) is made on
    first use, not at every new run-time size (a decode renamed every layer's
    programs every token)."""
    e1, e2, report = _two_layers(K.rows_times_row(256), _ROWS)
    sizes = {K.S0: 41}
    _launch(e1, K.sized_buffers(e1.kernel, sizes, seed=1), sizes)
    _launch(e2, K.sized_buffers(e2.kernel, sizes, seed=2), sizes)
    p2 = e2.plan(DEFAULT, sizes)
    assert callable(p2.given) and p2.name == "rows_times_row2"  # launched, never renamed
    assert [r["name"] for r in report.per_kernel()] == ["rows_times_row", "rows_times_row2"]
    own = p2.program  # made now, once
    assert not callable(p2.given) and p2.program is own and own.name == "rows_times_row2"
    assert {b for c in own.cores for i in c.instrs for side in isa.dram_buffers(i) for b in side} <= {"x2", "w2", "y2"}


def test_an_error_says_when_the_program_is_another_layer_s() -> None:
    """A launch whose buffers are short of what the program reads fails its
    checks, naming the kernel; a layer running the first layer's program says so."""
    e1, e2, _ = _two_layers(K.rows_times_row(256), _ROWS)
    sizes = {K.S0: 37}
    for exe in (e1, e2):
        bufs = K.sized_buffers(exe.kernel, sizes, seed=1)
        bufs = {k: v[: v.numel() // 2] if k in ("a", "x2") else v for k, v in bufs.items()}
        with pytest.raises(EmulatorError) as err:
            exe(bufs, sizes)
        assert exe.name in str(err.value)
        notes = " ".join(getattr(err.value, "__notes__", []))
        assert ("identical kernel rows_times_row " in notes) == (exe is e2), notes


def test_buffers_of_other_extents_get_their_own_checked_launch(checked_launches: list[str]) -> None:
    e1, e2, _ = _two_layers(K.rows_times_row(256), _ROWS)
    one, two = e1.kernel, e2.kernel
    sizes = {K.S0: 40}
    _launch(e1, K.sized_buffers(one, sizes, seed=1), sizes)
    bufs = K.sized_buffers(two, sizes, seed=2)
    bufs["x2"] = torch.cat([bufs["x2"], torch.randn(1000)])  # a larger storage behind the same view
    _launch(e2, bufs, sizes)
    assert len(checked_launches) == 2


def _embedding(rows: int, cols: int, vocab: int) -> KernelGroup:
    """out[i0, :] = table[idx[i0], :]: which table rows are read depends on the data."""
    v0 = sidx.index_symbol("v0")
    lk = LoopKernel("op0", (sympy.Integer(rows), sympy.Integer(cols)), (), (
        Instr("load", ("idx", K.I0), "int64"),
        Instr("indirect", (Ref(0), sympy.Integer(vocab), True, False, "v0"), "int64"),
        Instr("load", ("table", cols * v0 + K.I1), "float32"),
        Instr("store", ("out", cols * K.I0 + K.I1, Ref(2), None))))
    return KernelGroup("embedding", (lk,), (K.buf("idx", (rows,), "int64"), K.buf("table", (vocab, cols), "float32"),
                                           K.buf("out", (rows, cols), "float32", "output")), ("idx", "table", "out"))


def test_compulsory_bytes_of_a_data_indexed_kernel_are_each_layer_s_own() -> None:
    e1, e2, report = _two_layers(_embedding(64, 256, 1000), _EMBEDDING)
    one, two = e1.kernel, e2.kernel
    b1 = {"idx": torch.zeros(64, dtype=torch.int64), "table": torch.randn(256_000), "out": torch.empty(64 * 256)}
    b2 = {"ids2": torch.arange(64) * 7, "tab2": torch.randn(256_000), "o2": torch.empty(64 * 256)}
    want1, want2 = compulsory_bytes(one, b1, {}), compulsory_bytes(two, b2, {})
    # By hand, in 128-byte sticks: idx 64 x 8 B = 4, out 64 x 256 x 4 B = 512, and
    # one table row (1 KiB = 8 sticks) read 64 times, against 64 distinct rows.
    assert (want1, want2) == ((4 + 512 + 8) * 128, (4 + 512 + 64 * 8) * 128)
    _launch(e1, b1, {})
    _launch(e2, b2, {})
    got = {r["name"]: r["compulsory_bytes"] for r in report.per_kernel()}
    assert got == {"embedding": want1, "embedding2": want2}


def test_a_fault_in_a_shared_program_names_the_kernel_launched() -> None:
    e1, e2, _ = _two_layers(_embedding(64, 256, 1000), _EMBEDDING)
    _launch(e1, {"idx": torch.arange(64), "table": torch.randn(256_000), "out": torch.empty(64 * 256)}, {})
    bad = torch.arange(64)
    bad[5] = 5000
    with pytest.raises(EmulatorError, match=r"in kernel embedding2,.*5000") as caught:
        e2({"ids2": bad, "tab2": torch.randn(256_000), "o2": torch.empty(64 * 256)}, {})
    assert any("identical kernel embedding " in n for n in caught.value.__notes__)
