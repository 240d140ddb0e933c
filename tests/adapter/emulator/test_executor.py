"""The emulator runs programs: every value comes from executing the instructions,
and every hardware rule the program breaks is an error naming kernel, core,
step and buffer."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from spyre_shims.reference import run_kernel
from tests.support import kernels as K

from spyre_adapter.backend.spyre import plan
from spyre_adapter.emulator import Card, Replay, execute, executor, lx_memory
from spyre_adapter.model.isa import listing
from spyre_adapter.model.machine import DEFAULT
from spyre_adapter.model.program import (Barrier, CoreProgram, DmaLoad, DmaStore, Lx, ProgramFormatError, Region,
                                         RingRecv, from_json, to_json)
from spyre_adapter.model.rules import EmulatorError, static_check
from spyre_adapter.scheduler.loops import Division, plan_group


def _replace_instr(p, core, index, new):
    """``p`` with step ``index`` of core ``core`` replaced by ``new`` (None: removed),
    its allocation table kept in step with the stream."""
    cores = list(p.cores)
    cores[core] = cores[core].spliced(index, 1, () if new is None else (new,))
    return dataclasses.replace(p, cores=tuple(cores))


def _first(p, kind, core=0, buffer=None):
    for i, ins in enumerate(p.cores[core].instrs):
        if isinstance(ins, kind) and (buffer is None or getattr(getattr(ins, "src", None), "buffer", None) == buffer
                                      or getattr(getattr(ins, "dst", None), "buffer", None) == buffer):
            return i, ins
    raise AssertionError(f"no {kind.__name__} on core {core}")


def test_program_json_round_trip_and_listing() -> None:
    g = K.add(100, 200)
    p = plan(g, DEFAULT, {})
    assert from_json(to_json(p)) == p
    text = listing(p)
    assert "dma.ld" in text and "vec.all" in text and "dma.st" in text and "core 0:" in text
    assert "LX[0x" in text  # addressed, not byte counts


@pytest.mark.parametrize("payload", [
    "not json", "[1, 2]", '{"version": 1}',
    '{"version": 2, "name": "x"}',
])
def test_malformed_program_json_is_one_clear_error(payload: str) -> None:
    with pytest.raises(ProgramFormatError):
        from_json(payload)


def test_unknown_object_types_are_rejected_not_constructed() -> None:
    p = plan(K.add(8, 64), DEFAULT, {})
    text = to_json(p).replace('"$t":"DmaLoad"', '"$t":"os.system"', 1)
    with pytest.raises(ProgramFormatError, match="unknown object type .os.system"):
        from_json(text)


def test_results_come_from_the_program() -> None:
    """Zero one core's load of an input and double another's: the numbers change
    (before, numerics came from the Kernel IR and such a program still passed)."""
    g = K.add(256, 512)
    p = plan_group(g, DEFAULT, {}, "add", force=Division(2))
    got, want = K.run_program(p, g)
    K.assert_same(got, want, ["c"], atol=0, rtol=0)
    i, ld = _first(p, DmaLoad, core=1)
    # core 1 loads a region of "b" instead of its own part of "a" (same shape): wrong numbers
    wrong = dataclasses.replace(ld, src=dataclasses.replace(ld.src, buffer="b" if ld.src.buffer == "a" else "a"))
    got, want = K.run_program(_replace_instr(p, 1, i, wrong), g)
    assert not torch.equal(got["c"], want["c"])


def test_dropping_a_load_reads_unwritten_lx() -> None:
    g = K.add(64, 512)
    p = plan_group(g, DEFAULT, {}, "add", force=Division(1))
    i, _ = _first(p, DmaLoad)
    with pytest.raises(EmulatorError, match=r"read of unwritten LX in kernel add, core 0, step \d+, buffer a"):
        K.run_program(_replace_instr(p, 0, i, None), g)


@pytest.mark.parametrize("launches", [0, 600])
def test_a_checked_launch_accepts_only_its_own_writes_after_many_launches(launches: int) -> None:
    """Unchecked launches take no stamp (a decode loop would otherwise rewrite
    every core's stamps every 253 launches) and checked ones wrap around past
    253: either way, a program whose load was dropped still reads unwritten LX,
    though the same bytes were written by the launches before it."""
    g = K.add(64, 512)
    p = plan_group(g, DEFAULT, {}, "add", force=Division(1))
    card, replay = Card(DEFAULT), Replay()
    bufs = K.buffers(g, 0)
    execute(p, bufs, card, checking=True)
    for k in range(launches):
        execute(p, bufs, card, checking=k % 2 == 0, replay=None if k % 2 == 0 else replay)
    assert card.epoch == 1 + launches // 2 - (253 if launches // 2 >= 253 else 0)
    i, _ = _first(p, DmaLoad)
    with pytest.raises(EmulatorError, match="read of unwritten LX"):
        execute(_replace_instr(p, 0, i, None), K.buffers(g, 1), card, checking=True)


def test_the_stamp_wrap_around_keeps_only_held_bytes() -> None:
    """At the wrap every stamp restarts at 0 except bytes an earlier kernel left
    for a later one (HELD), which stay readable."""
    card = Card(DEFAULT)
    values = torch.arange(256, dtype=torch.uint8).repeat(8)
    card.stamp[3, : values.numel()] = values
    card.stamp[7, -5:] = executor.HELD
    card.epoch = executor.HELD - 1
    assert card.new_launch() == 1
    want = torch.where(values == executor.HELD, values, torch.zeros_like(values))
    assert torch.equal(card.stamp[3, : values.numel()], want)
    assert bool((card.stamp[7, -5:] == executor.HELD).all()) and int(card.stamp[7, :-5].max()) == 0


def test_dma_outside_a_tensor_is_an_error() -> None:
    g = K.add(64, 512)
    p = plan_group(g, DEFAULT, {}, "add", force=Division(1))
    i, ld = _first(p, DmaLoad)
    shifted = dataclasses.replace(ld, src=dataclasses.replace(ld.src, offset=64 * 512))
    with pytest.raises(EmulatorError, match="DMA outside a tensor's bytes"):
        K.run_program(_replace_instr(p, 0, i, shifted), g)


def test_two_cores_writing_the_same_bytes_conflict() -> None:
    g = K.add(64, 128)
    p = plan_group(g, DEFAULT, {}, "add", force=Division(2))
    _, st0 = _first(p, DmaStore, core=0)
    i, st1 = _first(p, DmaStore, core=1)
    with pytest.raises(EmulatorError, match="cross-core write conflict"):
        K.run_program(_replace_instr(p, 1, i, dataclasses.replace(st1, dst=st0.dst)), g)


def test_cores_sharing_a_stick_is_misalignment() -> None:
    """Core 0 leaves the last element of its share to core 1: no byte is written
    twice, but both cores write parts of one stick."""
    g = K.add(64, 128)
    p = plan_group(g, DEFAULT, {}, "add", force=Division(2))
    i0, st0 = [(i, x) for i, x in enumerate(p.cores[0].instrs) if isinstance(x, DmaStore)][-1]
    (n,) = st0.dst.sizes
    shorter = DmaStore(dataclasses.replace(st0.src, sizes=(n - 1,)), dataclasses.replace(st0.dst, sizes=(n - 1,)))
    i1, st1 = [(i, x) for i, x in enumerate(p.cores[1].instrs) if isinstance(x, DmaStore)][-1]
    last = DmaStore(Lx(st1.src.addr, "float16", (1,), (0,)), Region("c", st0.dst.offset + n - 1, (1,), (0,)))
    p = _replace_instr(p, 0, i0, shorter)
    cores = list(p.cores)
    cores[1] = cores[1].spliced(i1, 0, (last,))  # right before its own store, from a word it stores
    with pytest.raises(EmulatorError, match="misaligned sticks.*write parts of stick"):
        static_check(dataclasses.replace(p, cores=tuple(cores)), DEFAULT, {"a": 64 * 128, "b": 64 * 128, "c": 64 * 128})


def test_dma_lx_address_off_a_stick_is_misaligned() -> None:
    g = K.add(64, 512)
    p = plan_group(g, DEFAULT, {}, "add", force=Division(1))
    i, ld = _first(p, DmaLoad)
    with pytest.raises(EmulatorError, match="misaligned sticks"):
        K.run_program(_replace_instr(p, 0, i, dataclasses.replace(ld, dst=dataclasses.replace(ld.dst, addr=ld.dst.addr + 2))), g)


def test_allocation_over_capacity_names_the_step() -> None:
    g = K.add(64, 512)
    p = plan_group(g, DEFAULT, {}, "add", force=Division(1))
    i, ld = _first(p, DmaLoad)
    big = dataclasses.replace(ld, dst=dataclasses.replace(ld.dst, addr=DEFAULT.lx_usable_bytes - 128))
    with pytest.raises(EmulatorError, match=rf"allocation over capacity in kernel add, core 0, step {i}, buffer a"):
        K.run_program(_replace_instr(p, 0, i, big), g)


def test_span_is_measured_from_the_descriptors() -> None:
    small_span = DEFAULT.replace(span_bytes_per_core=4096)
    g = K.add(64, 512)
    p = plan_group(g, DEFAULT, {}, "add", force=Division(1))
    with pytest.raises(EmulatorError, match="per-core span exceeded"):
        execute(p, K.buffers(g), Card(small_span))


def test_a_missing_barrier_is_an_unordered_dram_access() -> None:
    """A group that runs in phases (a transposed read of a value the group wrote)
    orders its cores with barriers; dropping one is caught."""
    import sympy

    from spyre_shims.kernel_ir import Instr, KernelGroup, LoopKernel, Ref

    n = 128
    k0 = LoopKernel("op0", (sympy.Integer(n), sympy.Integer(n)), (), (
        Instr("load", ("a", K.I0 * n + K.I1), "float32"), Instr("store", ("t", K.I0 * n + K.I1, Ref(0), None))))
    k1 = LoopKernel("op1", (sympy.Integer(n), sympy.Integer(n)), (), (
        Instr("load", ("t", K.I1 * n + K.I0), "float32"), Instr("store", ("c", K.I0 * n + K.I1, Ref(0), None))))
    g = KernelGroup("tr", (k0, k1), (K.buf("a", (n, n), "float32"), K.buf("t", (n, n), "float32", "internal"),
                                     K.buf("c", (n, n), "float32", "output")), ("a", "c"))
    p = plan_group(g, DEFAULT, {}, "tr", force=Division(4))
    assert p.plan.workspace == ("t",)
    got, want = K.run_program(p, g)
    K.assert_same(got, want, ["c"], atol=0, rtol=0)
    cores = []
    for c in p.cores:
        for i in reversed([i for i, ins in enumerate(c.instrs) if isinstance(ins, Barrier)]):
            c = c.spliced(i, 1)
        cores.append(c)
    with pytest.raises(EmulatorError, match="unordered DRAM access"):
        K.run_program(dataclasses.replace(p, cores=tuple(cores)), g)


def test_a_receive_without_a_send_deadlocks_clearly() -> None:
    g = K.add(64, 512)
    p = plan_group(g, DEFAULT, {}, "add", force=Division(1))
    i, ld = _first(p, DmaLoad)
    with pytest.raises(EmulatorError, match="deadlock"):
        K.run_program(_replace_instr(p, 0, i, RingRecv(5, ld.dst, 999)), g)


def test_data_left_for_a_later_kernel_must_be_there() -> None:
    g = K.add(64, 512)
    p = plan_group(g, DEFAULT, {}, "add", force=Division(1))
    from spyre_adapter.model.program import Resident

    expects = dataclasses.replace(p, lx_in=(Resident(0, "a", 0, 64, 1_000_000, "float16"),))
    with pytest.raises(EmulatorError, match="no earlier kernel left it"):
        K.run_program(expects, g)


def test_empty_programs_and_empty_sums() -> None:
    """A K = 0 matmul writes zeros; a zero-size output needs no instruction."""
    for m_, n_, k_ in ((4, 64, 0), (0, 64, 8)):
        kern = K.mm(m_, n_, k_)
        p = plan(kern, DEFAULT, {})
        got, want = K.run_program(p, kern)
        K.assert_same(got, want, ["c"], atol=0, rtol=0)


def test_core_programs_are_typed_no_free_text() -> None:
    p = plan(K.mm(128, 256, 512), DEFAULT, {})
    for c in p.cores:
        assert isinstance(c, CoreProgram)
        for ins in c.instrs:
            assert dataclasses.is_dataclass(ins) and not any(f.name in ("note", "division") for f in dataclasses.fields(ins))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_unchecked_runs_match_the_checked_run_on_ring_sharing_matmuls(dtype: torch.dtype) -> None:
    """Steady-state launches skip the LX checks and merge steps (deferred PE
    chains, batched receives): same program, same numbers as the checked launch."""
    from spyre_shims import kernel_ir as kir

    from spyre_adapter.model.buffer_specs import contiguous_buffer
    from spyre_adapter.model.program import RingRecv

    name = str(dtype).removeprefix("torch.")
    m_, n_, k_ = 128, 1408, 512
    kernel = kir.ExternKernel("mm", "mm", (contiguous_buffer("a", (m_, k_), name), contiguous_buffer("b", (k_, n_), name)),
                              contiguous_buffer("c", (m_, n_), name, role="output"), ("a", "b", "c"))
    p = plan(kernel, DEFAULT, {})
    assert sum(isinstance(i, RingRecv) for c in p.cores for i in c.instrs) > 32  # operands shared over the ring
    gen = torch.Generator().manual_seed(0)
    a, b = torch.randn(m_, k_, generator=gen).to(dtype), torch.randn(k_, n_, generator=gen).to(dtype)
    card = Card(DEFAULT)
    replay = Replay()
    outs = []
    # checked; unchecked; unchecked recording its steps; replaying them twice
    for checking, rec in ((True, None), (False, None), (False, replay), (False, replay), (False, replay)):
        c = torch.full((m_ * n_,), float("nan"), dtype=dtype)
        execute(p, {"a": a.reshape(-1), "b": b.reshape(-1), "c": c}, card, checking=checking, replay=rec)
        outs.append(c.view(m_, n_))
        if rec is not None:
            assert rec.ready(card) and len(rec.thunks) > 100
    assert all(torch.equal(outs[0], o) for o in outs[1:])
    torch.testing.assert_close(outs[0].float(), (a.double() @ b.double()).float(),
                               atol=1e-3 if dtype == torch.float32 else 0.5, rtol=1e-2)


def _routed(rows: int, cols: int, seed: int) -> dict[str, torch.Tensor]:
    """Inputs of :func:`K.gather_scale_row_sum` with routing indices in range."""
    g = torch.Generator().manual_seed(seed)
    return {"x": torch.randn(rows * cols, generator=g), "idx": torch.randint(0, 4, (rows,), generator=g),
            "w": torch.randn(rows * 4, generator=g), "s": torch.zeros(rows)}


@pytest.mark.parametrize("case", ["add_2_cores", "add_32_cores", "row_sum_split", "exp_chain", "rotate_half",
                                  "gather_row_sum"])
def test_replayed_launches_compute_what_the_program_computes(case: str) -> None:
    """Record the steps of an unchecked launch, replay them on new inputs: the
    outputs equal the reference semantics each time (loads, stores, ring
    partials and vector steps all replayed; a vector step compiled on its
    first replay and re-run after, data-dependent indices read anew)."""
    kernel = {"add_2_cores": lambda: K.add(256, 512), "add_32_cores": lambda: K.add(4096, 512),
              "row_sum_split": lambda: K.row_sum(8, 65536), "exp_chain": lambda: K.exp_chain(512, 256, 4),
              "rotate_half": lambda: K.rotate_half(128, 4, 128),
              "gather_row_sum": lambda: K.gather_scale_row_sum(64, 256)}[case]()
    p = plan_group(kernel, DEFAULT, {}, case, force=Division(2)) if case == "add_2_cores" else plan(kernel, DEFAULT, {})
    card, replay = Card(DEFAULT), Replay()
    for seed, checking in ((0, True), (1, False), (2, False), (3, False), (4, False)):
        got = _routed(64, 256, seed) if case == "gather_row_sum" else K.buffers(kernel, seed)
        want = {k: v.clone() for k, v in got.items()}
        run_kernel(kernel, want)
        execute(p, got, card, checking=checking, replay=None if checking else replay)
        K.assert_same(got, want, K.outputs(kernel), atol=1e-4, rtol=1e-4)
    assert replay.ready(card)


@pytest.mark.parametrize("case", ["row_sum_split", "exp_chain", "rotate_half"])
def test_compiled_replay_equals_interpreted_replay(case: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Replayed vector steps run compiled (loads and stores resolved once, the body
    a flat list of steps): bit for bit what interpreting them every launch gives,
    launch after launch on new data."""
    kernel = {"row_sum_split": lambda: K.row_sum(8, 65536), "exp_chain": lambda: K.exp_chain(512, 256, 4),
              "rotate_half": lambda: K.rotate_half(128, 4, 128)}[case]()
    p = plan(kernel, DEFAULT, {})
    card, replay = Card(DEFAULT), Replay()
    execute(p, K.buffers(kernel, 0), card, checking=False, replay=replay)
    for seed in (1, 2, 3):
        outs = []
        for compiled in (True, False):
            monkeypatch.setattr(lx_memory, "REPLAY_COMPILED", compiled)
            got = K.buffers(kernel, seed)
            execute(p, got, card, checking=False, replay=replay)
            outs.append(got)
        for name in K.outputs(kernel):
            assert torch.equal(outs[0][name], outs[1][name]), name


def test_verification_allows_one_unit_in_the_last_place_of_16_bit_outputs() -> None:
    from spyre_adapter.emulator.executable import _compare
    want = torch.tensor([-0.4375, 3.0, 1e-6], dtype=torch.bfloat16)
    one_ulp = torch.tensor([-0.439453125, 3.0, 1e-6], dtype=torch.bfloat16)  # the next bf16 below -0.4375
    _compare("k", {"y": one_ulp}, {"y": want})
    three_ulps = torch.tensor([-0.443359375, 3.0, 1e-6], dtype=torch.bfloat16)
    with pytest.raises(EmulatorError, match="verification failed in kernel k.*buffer y: 1 of 3 values"):
        _compare("k", {"y": three_ulps}, {"y": want})
    with pytest.raises(EmulatorError, match="verification failed"):  # within a bf16 ulp, not within fp32 1e-3
        _compare("k", {"y": torch.tensor([-0.4375 * 1.008])}, {"y": torch.tensor([-0.4375])})


def test_the_executed_lx_peak_is_read_off_the_card() -> None:
    """The executed peak is the card's high-water mark of bytes the launch wrote:
    per core, the end of the highest view any step writes (counted here from the
    program's write views, not from the static checker's figure)."""
    from spyre_adapter.model.isa import lx_accesses

    g = K.add(256, 512, "float32")
    p = plan_group(g, DEFAULT, {}, "add", force=Division(4))
    stats = execute(p, K.buffers(g, 0), Card(DEFAULT), measure_peak=True)
    want = {c.core: max(v.byte_range()[1] for ins in c.instrs for v in lx_accesses(ins, p.bodies)[1])
            for c in p.cores if c.instrs}
    assert stats.lx_peak_executed == want
    assert all(stats.lx_peak_executed[c] <= stats.lx_peak[c] for c in want)
