"""The instruction set's one table: every step type of the program format has a
record with every part (views, accesses, listing, cost, checks) and an emulator
registration, and the parts agree with each other on a sample of every type."""

from __future__ import annotations

import dataclasses
import typing

import pytest
import sympy

from spyre_shims import index as sidx
from spyre_shims.kernel_ir import Instr, LoopKernel, Ref

from spyre_adapter.emulator import steps
from spyre_adapter.model import isa
from spyre_adapter.model import program as prog
from spyre_adapter.model.machine import DEFAULT
from spyre_adapter.model.program import (AddrGen, Barrier, Combine, DmaGather, DmaLoad, DmaScatter, DmaStore,
                                         LinkExchange, Lx, Operand, Pe, Region, RingRecv, RingSend, Vec)


def _lx(addr: int, n: int = 64, dtype: str = "float32") -> Lx:
    return Lx.dense(addr, dtype, (n,))


def _bodies() -> tuple[LoopKernel, ...]:
    """Body 0: load ``x``, a sum (position 1: what Combine merges), store ``out``."""
    i0 = sidx.index_symbol("i0")
    body = (Instr("load", ("x", i0), "float32"), Instr("reduction", ("float32", "float32", "sum", Ref(0)), "float32"),
            Instr("store", ("out", i0, Ref(0), None)))
    return (LoopKernel("b0", (sympy.Integer(64),), (), body),)


def _samples() -> list[object]:
    """One step of every type, over a program whose body 0 loads ``x`` and stores ``out``."""
    w = Operand(0, "window", _lx(0))
    s = Operand(2, "window", _lx(512))
    return [
        DmaLoad(Region("x", 0, (64,), (1,)), _lx(0)),
        DmaStore(_lx(512), Region("out", 0, (64,), (1,))),
        DmaGather("x", Lx.dense(1024, "int64", (64,)), _lx(0)),
        DmaScatter(_lx(512), "out", Lx.dense(1024, "int64", (64,))),
        RingSend((1, 2), _lx(0), 7),
        RingRecv(0, _lx(0), 7),
        Vec(0, ((0, 64),), None, (w, s)),
        Combine(0, ((0, 64),), ((1, ((_lx(2048),), (_lx(2304),))),), (s,)),
        AddrGen(0, ((0, 64),), None, (w,), ((0, Lx.dense(1024, "int64", (64,))),)),
        Pe(Lx.dense(0, "float16", (8, 8)), Lx.dense(256, "float16", (8, 8)), Lx.dense(512, "float32", (8, 8)), True),
        Barrier(3),
        LinkExchange(((1, Region("x", 0, (64,), (1,))),), ((1, Region("out", 0, (64,), (1,))),), 1),
    ]


def test_every_step_type_has_a_record_and_an_emulator_registration() -> None:
    union = set(typing.get_args(prog.Instruction))
    assert set(isa.ISA) == union, "a step type of the format without an ISA record (or the reverse)"
    assert set(steps.RUNS) == union, "a step type the emulator does not run (register it in emulator/steps.py)"
    assert {type(s) for s in _samples()} == union, "this test's samples miss a step type"
    for t, rec in isa.ISA.items():
        assert rec.type is t and rec.lane and rec.sync in ("none", "barrier", "send", "recv")
        assert rec.dma in ("none", "in", "out")


@pytest.mark.parametrize("ins", _samples(), ids=lambda s: type(s).__name__)
def test_a_records_parts_agree(ins: object) -> None:
    body = _bodies()
    rec = isa.step(ins)
    views = rec.views(ins)
    # map_views: the identity keeps the step; a shift moves exactly the views
    assert rec.map_views(ins, lambda v: v) == ins
    moved = rec.map_views(ins, lambda v: dataclasses.replace(v, addr=v.addr + 128))
    assert [v.addr for v in rec.views(moved)] == [v.addr + 128 for v in views]
    # what it reads and writes are views it names
    reads, writes = rec.lx_accesses(ins, body)
    assert all(any(v == x for x in views) for v in reads + writes)
    # DRAM: renaming buffers renames every access
    dreads, dwrites = rec.dram_accesses(ins)
    renamed = rec.renamed(ins, {"x": "x2", "out": "out2"})
    names = {r if isinstance(r, str) else r.buffer for r in dreads + dwrites}
    r2, w2 = rec.dram_accesses(renamed)
    assert {r if isinstance(r, str) else r.buffer for r in r2 + w2} == {{"x": "x2", "out": "out2"}.get(n, n)
                                                                          for n in names}
    # a strided DMA's region is the DRAM it accesses
    moved_dram = rec.transfer(ins)
    if moved_dram is not None:
        assert moved_dram[0] in dreads + dwrites and moved_dram[1] in views
        assert rec.with_region(ins, dataclasses.replace(moved_dram[0], offset=64)) != ins
    # listing, cost
    op, rd, wr = rec.describe(ins, body)
    assert op and isinstance(rd, str) and isinstance(wr, str)
    assert rec.engine(ins).startswith(rec.lane)
    p = prog.Program("t", "loop", None, body, (prog.CoreProgram(0, (ins,)),), None,
                     workspace=(("x", "float32", 64), ("out", "float32", 64)))
    assert rec.duration(ins, p, DEFAULT, {}) >= 0
    assert rec.dram_bytes(ins, {"x": "float32", "out": "float32"}, 128, None) >= (128 if rec.dma != "none" else 0)
    # the JSON form round-trips every step type
    q = dataclasses.replace(p, kernel=None, plan=prog.AttentionPlan(1, 1, False, 1))
    assert prog.from_json(prog.to_json(q)).cores == q.cores


def test_listing_names_every_step() -> None:
    body = _bodies()
    p = prog.Program("t", "loop", None, body, (prog.CoreProgram(0, tuple(_samples())),), None)
    text = isa.listing(p)
    for ins in _samples():
        assert isa.describe(ins, body)[0] in text
