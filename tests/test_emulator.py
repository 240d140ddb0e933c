"""The emulator enforces the machine's limits and models time plausibly."""

from __future__ import annotations

import dataclasses

import pytest
import sympy
import torch

from spyre_adapter.backend import plan
from spyre_adapter.emulator import checks, metrics, numerics, timing
from spyre_adapter.machine import DEFAULT, Machine
from spyre_adapter.program import Instr, program_from_json, program_to_json
from spyre_adapter.scheduler.loops import Division, plan_group
from spyre_shims import index as sidx
from spyre_shims.kernel_ir import BufferSpec, ExternKernel, Instr as IRInstr, KernelGroup, LoopKernel, Ref
from spyre_shims.reference import run_kernel

I0, I1, R0 = sidx.index_symbol("i0"), sidx.index_symbol("i1"), sidx.index_symbol("r0")


def _buf(name: str, shape: tuple[int, ...], dtype: str = "float16", role: str = "input") -> BufferSpec:
    stride, acc = [], 1
    for s in reversed(shape):
        stride.insert(0, acc)
        acc *= s
    return BufferSpec(name, dtype, tuple(map(sympy.Integer, shape)), tuple(map(sympy.Integer, stride)),
                      sympy.Integer(0), sympy.Integer(acc), role)


def _add_kernel(rows: int, cols: int) -> KernelGroup:
    idx = cols * I0 + I1
    body = (IRInstr("load", ("a", idx), "float16"), IRInstr("load", ("b", idx), "float16"),
            IRInstr("add", (Ref(0), Ref(1)), "float16"), IRInstr("store", ("c", idx, Ref(2), None)))
    lk = LoopKernel("op0", (sympy.Integer(rows), sympy.Integer(cols)), (), body)
    return KernelGroup("k", (lk,), (_buf("a", (rows, cols)), _buf("b", (rows, cols)),
                                     _buf("c", (rows, cols), role="output")), ("a", "b", "c"))


def _row_sum(rows: int, cols: int) -> KernelGroup:
    body = (IRInstr("load", ("a", cols * I0 + R0), "float32"),
            IRInstr("reduction", ("float32", "float32", "sum", Ref(0)), "float32"),
            IRInstr("store_reduction", ("c", I0, Ref(1))))
    lk = LoopKernel("op0", (sympy.Integer(rows),), (sympy.Integer(cols),), body)
    return KernelGroup("rs", (lk,), (_buf("a", (rows, cols), "float32"), _buf("c", (rows,), "float32", "output")),
                       ("a", "c"))


def _mm(m: int, n: int, k: int) -> ExternKernel:
    return ExternKernel("mm", "mm", (_buf("a", (m, k)), _buf("b", (k, n))), _buf("c", (m, n), role="output"),
                        ("a", "b", "c"))


def test_program_json_round_trip() -> None:
    p = plan(_add_kernel(100, 200), DEFAULT, {})
    q = program_from_json(program_to_json(p))
    assert q.kernel == p.kernel and q.division == p.division
    assert [c.instrs for c in q.cores] == [c.instrs for c in p.cores]


def test_lx_capacity_violation_names_kernel_core_buffer() -> None:
    p = plan(_add_kernel(64, 4096), DEFAULT, {})
    p.cores[0].lx_peak = DEFAULT.lx_usable_bytes + 1
    with pytest.raises(checks.EmulatorError, match=r"LX capacity exceeded in kernel k, core 0, buffer "):
        checks.check_program(p, DEFAULT, {})


def test_misaligned_division_is_rejected() -> None:
    """Shares that do not start on a stick boundary are an error."""
    p = plan_group(_add_kernel(63, 129), DEFAULT, {}, "k", force=Division(cores=2))
    # Move core 1's share to start one row earlier than the plan: row 31 of a
    # 129-wide fp16 tensor starts at byte 7998, not a multiple of 128.
    (a, b), = p.cores[1].ranges
    p.cores[1].ranges = [(a - 129, b)]
    p.cores[0].ranges = [(0, a - 129)]
    with pytest.raises(checks.EmulatorError, match="stick misalignment"):
        checks.check_program(p, DEFAULT, {})


def test_write_conflict_is_detected() -> None:
    p = plan_group(_add_kernel(64, 128), DEFAULT, {}, "k", force=Division(cores=2))
    p.cores[1].ranges = list(p.cores[0].ranges)  # both cores write the same rows
    with pytest.raises(checks.EmulatorError, match="cross-core write conflict"):
        checks.check_program(p, DEFAULT, {})


def _exp_chain(rows: int, cols: int, depth: int) -> KernelGroup:
    idx = cols * I0 + I1
    body = [IRInstr("load", ("a", idx), "float16")]
    for k in range(depth):
        body.append(IRInstr("exp", (Ref(k),), "float16"))
    body.append(IRInstr("store", ("c", idx, Ref(depth), None)))
    lk = LoopKernel("op0", (sympy.Integer(rows), sympy.Integer(cols)), (), tuple(body))
    return KernelGroup("k", (lk,), (_buf("a", (rows, cols)), _buf("c", (rows, cols), role="output")), ("a", "c"))


def test_division_is_chosen_by_cost() -> None:
    small = plan(_add_kernel(2, 64), DEFAULT, {})
    big = plan(_exp_chain(4096, 1024, 128), DEFAULT, {})  # SFU-bound: wants every core
    mem = plan(_add_kernel(4096, 1024), DEFAULT, {})  # DRAM-bound: a few cores saturate DRAM
    assert small.cores_used == 1
    assert big.cores_used == DEFAULT.cores
    assert 1 < mem.cores_used <= DEFAULT.cores
    # Every candidate was costed and the chosen one is the cheapest.
    cands = big.division["candidates"]
    assert len(cands) > 3 and min(cands.values()) == cands[f"{big.division['row_cores']}x{big.division['rsplit']}"]


def test_whole_sticks_per_core() -> None:
    p = plan(_add_kernel(63, 129), DEFAULT, {})
    for s in p.cores:
        if s.instrs and s.ranges[0][0]:
            assert (s.ranges[0][0] * 2) % DEFAULT.stick_bytes == 0


def test_memory_bound_time_respects_bandwidth() -> None:
    """A large elementwise add cannot beat DRAM bandwidth, and comes close."""
    p = plan(_add_kernel(4096, 4096), DEFAULT, {})
    tl = timing.simulate(p, DEFAULT)
    moved = 3 * 4096 * 4096 * 2
    floor_ns = moved / DEFAULT.dram_gbps(2 * moved / 3, moved / 3)
    assert floor_ns <= tl.total_ns <= 1.25 * floor_ns
    assert tl.dram_bytes == moved


def test_more_cores_help_compute_bound_matmul() -> None:
    m8 = DEFAULT.replace(cores=8)
    t32 = timing.simulate(plan(_mm(2048, 2048, 2048), DEFAULT, {}), DEFAULT).total_ns
    t8 = timing.simulate(plan(_mm(2048, 2048, 2048), m8, {}), m8).total_ns
    assert 3.0 < t8 / t32 <= 4.2


def test_split_reduction_numerics_match_reference() -> None:
    g = _row_sum(3, 100_000)
    p = plan(g, DEFAULT, {})
    assert p.rsplit > 1  # few rows, long reductions: split over cores
    a = torch.randn(3 * 100_000)
    out_dev, out_ref = torch.zeros(3), torch.zeros(3)
    numerics.run(p, {"a": a, "c": out_dev}, {})
    run_kernel(g, {"a": a, "c": out_ref})
    torch.testing.assert_close(out_dev, out_ref, rtol=1e-5, atol=1e-3)
    torch.testing.assert_close(out_dev, a.view(3, -1).double().sum(-1).float(), rtol=1e-5, atol=1e-3)


def test_timeline_respects_double_buffering() -> None:
    p = plan(_add_kernel(4096, 4096), DEFAULT, {})
    tl = timing.simulate(p, DEFAULT)
    core0 = [e for e in tl.events if e.core == 0]
    for e in core0:
        if e.op == "dma_in" and e.tile >= 2:
            prior = [c for c in core0 if c.op == "vec" and c.tile == e.tile - 2]
            assert prior and prior[0].end <= e.start + 1e-6


def test_machine_override_changes_plan() -> None:
    m = Machine.from_spec("cores=8,lx_kib=512")
    assert m.cores == 8 and m.lx_bytes == 512 * 1024 and m.lx_usable_bytes < DEFAULT.lx_usable_bytes
    p = plan(_exp_chain(4096, 4096, 64), m, {})
    assert p.cores_used == 8 and all(s.lx_peak <= m.lx_usable_bytes for s in p.cores)
    assert dataclasses.replace(DEFAULT) == DEFAULT


def _scale_kernel(rows: int, cols: int, src: str, dst: str) -> KernelGroup:
    idx = cols * I0 + I1
    body = (IRInstr("load", (src, idx), "float16"), IRInstr("constant", (2.0, "float16"), "float16"),
            IRInstr("mul", (Ref(0), Ref(1)), "float16"), IRInstr("store", (dst, idx, Ref(2), None)))
    lk = LoopKernel("op1", (sympy.Integer(rows), sympy.Integer(cols)), (), body)
    return KernelGroup("k2", (lk,), (_buf(src, (rows, cols)), _buf(dst, (rows, cols), role="output")), (src, dst))


def test_lx_residency_keeps_an_aligned_intermediate() -> None:
    """c = a + b, then d = 2c on the same partition: c stays in each core's LX;
    as c is neither read later nor returned, it never reaches DRAM."""
    from spyre_adapter.scheduler.residency import plan_residency

    progs = [plan(_add_kernel(256, 512), DEFAULT, {}), plan(_scale_kernel(256, 512, "c", "d"), DEFAULT, {})]
    before = [timing.simulate(p, DEFAULT) for p in progs]
    decisions = plan_residency(progs, {"d"}, DEFAULT)  # may re-divide the consumer to line up
    assert [(d.buffer, d.store_elided) for d in decisions] == [("c", True)]
    assert progs[1].division["row_cores"] == progs[0].division["row_cores"]
    after = [timing.simulate(p, DEFAULT) for p in progs]
    c_bytes = 256 * 512 * 2
    assert before[0].dram_bytes - after[0].dram_bytes == c_bytes  # store elided
    assert before[1].dram_bytes - after[1].dram_bytes == c_bytes  # load served from LX
    assert sum(t.total_ns for t in after) < sum(t.total_ns for t in before)
    for p in progs:
        checks.check_program(p, DEFAULT, {})  # the kept data still fits LX
        assert metrics.compute(p, timing.simulate(p, DEFAULT), DEFAULT).rho >= 1.0


def test_lx_residency_spills_what_does_not_fit_and_keeps_outputs() -> None:
    from spyre_adapter.scheduler.residency import plan_residency

    big = [plan(_add_kernel(4096, 4096), DEFAULT, {}), plan(_scale_kernel(4096, 4096, "c", "d"), DEFAULT, {})]
    assert plan_residency(big, {"d"}, DEFAULT) == []  # 32 MiB per core would not fit 1.6 MB
    small = [plan(_add_kernel(256, 512), DEFAULT, {}), plan(_scale_kernel(256, 512, "c", "d"), DEFAULT, {})]
    (d,) = plan_residency(small, {"c", "d"}, DEFAULT)
    assert not d.store_elided  # c is a graph output: written through to DRAM


def test_uneven_blocks_share_operands_only_with_matching_cores() -> None:
    """granite's lm_head (1 x 49159 x 4096): N does not split evenly, so the last
    core walks fewer tiles; every candidate program must still complete (cores
    all-gather operand slices only with cores walking the same tiles)."""
    from spyre_adapter.scheduler.matmul import _program, rank, shape_of

    m, n, k = 1, 49159, 4096
    kern = ExternKernel("mm", "mm", (_buf("a", (m, k), "bfloat16"), _buf("b", (k, n), "bfloat16")),
                        _buf("c", (m, n), "bfloat16", "output"), ("a", "b", "c"))
    s = shape_of(kern, {})
    for g, c in rank(s, DEFAULT)[:6]:
        p = _program(kern, s, g, c, DEFAULT, {}, "mm", True)
        assert timing.simulate(p, DEFAULT).total_ns > 0


def test_long_simulations_finish() -> None:
    """Half a second of modeled time on one core: float residues of a transfer
    (bytes left below a float step of the clock) must not stall the event loop."""
    m1 = DEFAULT.replace(cores=1)
    p = plan(_mm(8192, 8192, 8192), m1, {})
    tl = timing.simulate(p, m1)
    macs = 8192 ** 3
    assert macs / m1.sustained_mac_per_ns_per_core <= tl.total_ns <= 1.05 * macs / m1.sustained_mac_per_ns_per_core
