"""LX residency across the kernels of a graph: data stays in a core's LX for the
kernels that read it next - re-planned programs whose held windows the emulator
checks when it runs them."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from spyre_shims import kernel_ir as kir
from spyre_shims.runtime import capture_graphs
from tests.support import kernels as K

from spyre_adapter.backend.session import use_machine
from spyre_adapter.backend.spyre import plan
from spyre_adapter.emulator import Card, execute
from spyre_adapter.model import timing
from spyre_adapter.model.machine import DEFAULT, Machine
from spyre_adapter.model.program import DmaLoad, DmaStore
from spyre_adapter.model.rules import EmulatorError
from spyre_adapter.scheduler.residency import plan_residency


def _rms(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return w * (x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-5)).to(x.dtype)


def _qkv(x, w, wq, wk):
    h = _rms(x, w)
    return h @ wq, h @ wk


def _args(*shapes):
    g = torch.Generator().manual_seed(0)
    return [(torch.randn(*s, generator=g) * 0.1).half() for s in shapes]


def _compile(fn, args, report):
    report.reset()
    with capture_graphs() as graphs:
        out = torch.compile(fn, dynamic=False)(*[a.to("spyre") for a in args])
    for got, want in zip(out, fn(*args)):
        torch.testing.assert_close(got.cpu(), want, atol=2e-2, rtol=2e-2)
    return graphs, report.to_dict()["lx_residency"]


def _reads(kernels):
    return [{b.name for b in k.inputs} if isinstance(k, kir.ExternKernel)
            else {b.name for b in k.buffers if b.role in ("input", "inout")} for k in kernels]


def _writes(kernels):
    return [{k.output.name} if isinstance(k, kir.ExternKernel)
            else {b.name for b in k.buffers if b.role in ("output", "inout")} for k in kernels]


def test_an_aligned_intermediate_stays_in_lx_and_is_never_stored() -> None:
    """c = a + b, then d = 2c on the same partition: c stays in each core's LX;
    as it is neither read later nor returned, it never reaches DRAM."""
    g1, g2 = K.add(256, 512), K.scale(256, 512, "c", "d")
    before = [plan(g1, DEFAULT, {}), plan(g2, DEFAULT, {})]
    after, decisions = plan_residency(before, {"d"}, DEFAULT, _reads([g1, g2]), _writes([g1, g2]))
    assert [(d.buffer, d.store_elided) for d in decisions] == [("c", True)]
    assert not any(isinstance(i, DmaStore) and i.dst.buffer == "c" for c in after[0].cores for i in c.instrs)
    assert not any(isinstance(i, DmaLoad) and i.src.buffer == "c" for c in after[1].cores for i in c.instrs)
    sims = [[timing.simulate(p, DEFAULT) for p in ps] for ps in (before, after)]
    c_bytes = 256 * 512 * 2
    assert sum(t.dram_bytes for t in sims[0]) - sum(t.dram_bytes for t in sims[1]) == 2 * c_bytes
    assert sum(t.total_ns for t in sims[1]) < sum(t.total_ns for t in sims[0])
    # Run both kernels on one card: d is right, c never reached DRAM.
    card = Card(DEFAULT)
    bufs = K.buffers(g1)
    bufs["c"] = torch.full((256 * 512,), float("nan")).half()
    bufs["d"] = torch.empty(256 * 512).half()
    execute(after[0], bufs, card)
    execute(after[1], bufs, card)
    torch.testing.assert_close(bufs["d"], (bufs["a"] + bufs["b"]) * 2, atol=1e-2, rtol=1e-2)
    assert torch.isnan(bufs["c"].float()).all()


def test_a_reader_without_its_producer_finds_nothing_held() -> None:
    """The consumer's program expects c in LX: run alone on a fresh card, the
    emulator reports what it expected and no kernel left."""
    g1, g2 = K.add(256, 512), K.scale(256, 512, "c", "d")
    after, _ = plan_residency([plan(g1, DEFAULT, {}), plan(g2, DEFAULT, {})], {"d"}, DEFAULT, _reads([g1, g2]), _writes([g1, g2]))
    bufs = {"c": torch.zeros(256 * 512).half(), "d": torch.empty(256 * 512).half()}
    with pytest.raises(EmulatorError, match="no earlier kernel left it"):
        execute(after[1], bufs, Card(DEFAULT))


def test_what_does_not_fit_goes_through_dram_and_outputs_are_stored() -> None:
    two = DEFAULT.replace(cores=2)
    big = [K.add(2048, 1024), K.scale(2048, 1024, "c", "d")]
    _, decisions = plan_residency([plan(g, two, {}) for g in big], {"d"}, two, _reads(big), _writes(big))
    assert decisions == []  # 2 MiB per core would not fit LX
    small = [K.add(256, 512), K.scale(256, 512, "c", "d")]
    _, (d,) = plan_residency([plan(g, DEFAULT, {}) for g in small], {"c", "d"}, DEFAULT, _reads(small), _writes(small))
    assert not d.store_elided  # c is a graph output: written through to DRAM


def test_norm_output_stays_in_lx_for_every_matmul_reading_it(report) -> None:
    # 1024 rows: holding the rows makes the norm run on the matmuls' row groups, and
    # its reductions along the stick are lane-bound on few cores; on 512 rows that
    # costs more than the store and the reloads it saves (the matmuls, divided
    # finely, gain less from held rows), and the plan keeps nothing
    graphs, lx = _compile(_qkv, _args((1024, 512), (512,), (512, 256), (512, 128)), report)
    assert lx["kept"] == 1 and lx["readers_served"] == 2 and lx["stores_elided"] == 1
    kernels = [k for g in graphs for k in g.kernels]
    before = [plan(k, DEFAULT, {}) for k in kernels]
    outputs = set(dict(graphs[0].meta).get("outputs", ()))
    after, decisions = plan_residency(before, outputs, DEFAULT, _reads(kernels), _writes(kernels))
    h = decisions[0].buffer
    assert {d.consumer for d in decisions} == {k.name for k in kernels if isinstance(k, kir.ExternKernel)}
    for p in after:
        if p.kind == "matmul":  # A rows from the holders' LX: in place there, over the ring elsewhere
            assert not any(isinstance(i, DmaLoad) and i.src.buffer == h for c in p.cores for i in c.instrs)
            assert p.lx_in
    # h never reaches DRAM (the readers may re-tile B, so total bytes need not drop); time does.
    assert not any(isinstance(i, DmaStore) and i.dst.buffer == h for c in after[0].cores for i in c.instrs)
    sims = [[timing.simulate(p, DEFAULT) for p in ps] for ps in (before, after)]
    assert sum(t.total_ns for t in sims[1]) < sum(t.total_ns for t in sims[0])


@pytest.mark.skipif(not hasattr(torch.compiler, "nested_compile_region"), reason="no nested compile regions")
def test_nothing_is_held_across_a_subgraph_call(report) -> None:
    """The same norm and readers, with a nested compile region called in between
    (twice: a region called once is inlined): its kernels run between the graph's
    own, so the norm's output goes through DRAM."""
    region = torch.compiler.nested_compile_region(lambda y: (y * 2).relu())

    def fn(x, w, wq, wk, y):
        h = _rms(x, w)
        z = region(region(y))
        return h @ wq, h @ wk, z

    shapes = ((1024, 512), (512,), (512, 256), (512, 128), (64, 128))
    _, lx = _compile(lambda *a: _qkv(*a[:4]), _args(*shapes), report)
    assert lx["kept"] == 1  # without the call the norm's output stays in LX
    torch._dynamo.reset()
    graphs, lx = _compile(fn, _args(*shapes), report)
    assert any(dict(g.meta).get("calls_subgraphs") for g in graphs)
    assert lx["kept"] == 0 and lx["stores_elided"] == 0


def test_a_kernel_the_planner_cannot_see_into_keeps_the_store(report) -> None:
    """The norm's output is also read by the hand-written attention kernel (run
    outside the graph's programs): the value must still reach DRAM."""
    def fn(x, w, wq):
        h = _rms(x, w)
        q = h.view(1, 1, 64, 512)
        return h @ wq, F.scaled_dot_product_attention(q, q, q, is_causal=True)

    _, lx = _compile(fn, _args((64, 512), (512,), (512, 256)), report)
    assert lx["stores_elided"] == 0


def test_rows_that_do_not_fit_lx_go_through_dram(report) -> None:
    """On a 2-core card with 256 KiB of LX a core's share of the norm's output
    (256 KiB) cannot stay."""
    with use_machine(Machine.from_spec("cores=2,lx_kib=256")):
        _, lx = _compile(_qkv, _args((256, 1024), (1024,), (1024, 128), (1024, 64)), report)
    assert lx["kept"] == 0 and lx["stores_elided"] == 0


def test_identical_layers_are_replanned_once_and_alike() -> None:
    """Two layers of the same structure (other buffer names): with the backend's
    program cache the second layer's re-plans are cache hits, and both layers
    get the same decisions, with programs that name their own buffers."""
    from spyre_adapter.scheduler.cache import ProgramCache
    layer1 = [K.add(256, 512, out="c"), K.scale(256, 512, "c", "d")]
    layer2 = [K.add(256, 512, out="e"), K.scale(256, 512, "e", "f")]
    cache = ProgramCache()
    plans = {}
    for name, ks in (("one", layer1), ("two", layer2)):
        progs = [plan(k, DEFAULT, {}) for k in ks]
        out = {ks[-1].buffers[-1].name}
        hits = cache.hits
        plans[name] = plan_residency(progs, out, DEFAULT, _reads(ks), _writes(ks), cache)
        plans[name + "_hits"] = cache.hits - hits
        plans[name + "_plain"] = plan_residency(progs, out, DEFAULT, _reads(ks), _writes(ks))
    assert plans["one_hits"] == 0 and plans["two_hits"] > 0
    (p1, d1), (p2, d2) = plans["one"], plans["two"]
    assert [(d.buffer, d.store_elided) for d in d1] == [("c", True)]
    assert [(d.buffer, d.store_elided) for d in d2] == [("e", True)]
    for cached, plain in ((p1, plans["one_plain"][0]), (p2, plans["two_plain"][0])):
        assert [timing.simulate(p, DEFAULT).total_ns for p in cached] == \
            [timing.simulate(p, DEFAULT).total_ns for p in plain]
    # The second layer's programs are about its own buffers.
    named = {i.src.buffer for c in p2[1].cores for i in c.instrs if isinstance(i, DmaLoad)} | \
        {r.buffer for p in p2 for r in (*p.lx_in, *p.lx_out)}
    assert named <= {"e", "f"} and "e" in named
    bufs = {"a": torch.randn(256 * 512).half(), "b": torch.randn(256 * 512).half(),
            "e": torch.full((256 * 512,), float("nan")).half(), "f": torch.empty(256 * 512).half()}
    card = Card(DEFAULT)
    execute(p2[0], bufs, card)
    execute(p2[1], bufs, card)
    torch.testing.assert_close(bufs["f"], (bufs["a"] + bufs["b"]) * 2, atol=1e-2, rtol=1e-2)


def test_a_phased_producer_that_reads_its_output_back_keeps_the_store(report) -> None:
    """Issue 33: topk along dim 1 of (6, 17, 7, 64) runs its first group in
    phases (argmax indices stored, then re-read from DRAM by the next phase);
    keeping them in LX for the next kernel elided that store, and the read-back
    phase indexed with never-written memory (the emulator stopped it:
    'indirect index out of bounds')."""
    x = torch.randn(6, 17, 7, 64, generator=torch.Generator().manual_seed(1))
    with capture_graphs() as graphs:
        v, i = torch.compile(lambda a: torch.topk(a, 2, dim=1), dynamic=False)(x.to("spyre"))
    ve, ie = torch.topk(x, 2, dim=1)
    assert torch.equal(i.cpu(), ie) and torch.equal(v.cpu(), ve)
    kernels = graphs[0].kernels
    programs = [plan(k, DEFAULT, {}) for k in kernels]
    new, decisions = plan_residency(programs, set(graphs[0].outputs), DEFAULT, _reads(kernels), _writes(kernels))
    read_back = [(p.name, b) for p in new if p is not None for b in {i.src.buffer for c in p.cores for i in c.instrs
                                                                       if isinstance(i, DmaLoad)}
                 if any(isinstance(i, DmaStore) and i.dst.buffer == b for c in p.cores for i in c.instrs)
                 or b in {b.name for b in p.kernel.buffers if b.role == "inout"}]
    assert read_back  # the case still has a producer reading its own output back
    for name, buf in read_back:
        p = next(q for q in new if q is not None and q.name == name)
        assert any(isinstance(i, DmaStore) and i.dst.buffer == buf for c in p.cores for i in c.instrs), (name, buf)
        assert not any(d.store_elided and d.buffer == buf and d.producer == name for d in decisions)
