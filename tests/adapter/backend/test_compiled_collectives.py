"""Compiled collectives: ``all_reduce`` under ``torch.compile`` on spyre tensors
becomes each card's program (link exchanges and a reduction on the cores),
checked against gloo on CPU under torchrun with 2 and 4 ranks; and the
programs themselves: the rules hold on link regions, the simulated link time
is the link model's closed form for the same algorithm, the format round-trips."""

from __future__ import annotations

from pathlib import Path

import pytest

from spyre_shims import kernel_ir as kir
from spyre_shims.reference import COLLECTIVE_OPS

from ...support.kernels import buf
from ...support.torchrun import rank_results
from spyre_adapter.model import isa
from spyre_adapter.model import program as prog
from spyre_adapter.model.collectives import link_cost
from spyre_adapter.model.errors import EmulatorError
from spyre_adapter.model.machine import DEFAULT
from spyre_adapter.model.program import Barrier, CoreProgram, DmaLoad, LinkExchange, Lx, Program, Region
from spyre_adapter.model.rules import static_check
from spyre_adapter.model.timing import simulate
from spyre_adapter.scheduler.collectives import ALGORITHMS, build_collective, shares

CHECK = Path(__file__).parents[2] / "support" / "compiled_collectives_check.py"


def _torchrun(ranks: int, seed: int, tmp_path: Path) -> list[dict]:
    return rank_results(CHECK, ranks, seed, tmp_path, timeout=600)


@pytest.mark.parametrize(("ranks", "seed"), [(2, 1), (4, 2)])
def test_a_compiled_all_reduce_is_a_program_and_matches_gloo(ranks: int, seed: int, tmp_path: Path) -> None:
    results = _torchrun(ranks, seed, tmp_path)
    assert [r["rank"] for r in results] == list(range(ranks))
    for r in results:
        # every reduce op checked (first launch and replay), ranks bit-identical (asserted in the script)
        reduced = [c for c in r["checked"] if c.startswith("all_reduce[")]
        assert {c.rsplit(" ", 1)[1][:-1] for c in reduced} == {"sum", "avg", "max", "min", "product"}
        assert r["ops"] == ["all_gather_into_tensor", "all_reduce_", "reduce_scatter_tensor"]
        assert not r["fallbacks"], r["fallbacks"]  # neither the collectives nor their waits ran on the host
        assert {"link.exchange", "barrier", "dma.ld", "vec.all", "dma.st"} <= set(r["mnemonics"])
        for op, name in (("all_reduce", "all_reduce["), ("all_gather", "all_gather_into_tensor["),
                         ("reduce_scatter", "reduce_scatter_tensor[")):
            calls = r["collectives"][op]
            assert calls["calls"] == 2 * sum(c.startswith(name) for c in r["checked"])
            assert all(a.endswith("(program)") for a in calls["algorithms"])
        assert r["link_ns"] > 0
    # the big draw splits into shares on 4 cards (two-shot); small ones go one-shot; the biggest in stages
    assert "one-shot" in results[0]["algorithms"]
    if ranks == 4:
        assert "two-shot" in results[0]["algorithms"]
    assert results[0]["stages"][0] == 1 and results[0]["stages"][-1] > 1


def _all_reduce(numel: int, dtype: str = "float16", op: str = "sum") -> kir.ExternKernel:
    x = buf("x", (numel,), dtype)
    out = kir.BufferSpec(x.name, x.dtype, x.size, x.stride, x.offset, x.storage_numel, "inout")
    return kir.ExternKernel("ar", "all_reduce_", (x,), out, ("x",), (("reduce_op", op), ("group_name", "0")))


def test_the_collective_ops_have_reference_semantics_and_programs() -> None:
    from spyre_adapter.scheduler.collectives import COLLECTIVE_OPS as PLANNED
    assert PLANNED <= COLLECTIVE_OPS


@pytest.mark.parametrize("ranks", [2, 4, 8])
@pytest.mark.parametrize("algorithm", ALGORITHMS["all_reduce_"])
def test_the_programs_link_time_is_the_link_models_closed_form(algorithm: str, ranks: int) -> None:
    numel = 1 << 20  # 2 MiB of fp16: whole sticks in every share
    p = build_collective(_all_reduce(numel), DEFAULT, algorithm, 1, ranks, "0")
    link = sum(lanes.get("link", 0.0) for lanes in simulate(p, DEFAULT, keep_events=False).busy.values())
    nbytes = numel * 2
    lat, bw = DEFAULT.link_latency_ns, DEFAULT.link_gbps
    want = lat + (ranks - 1) * nbytes / bw if algorithm == "one-shot" else 2 * (lat + (ranks - 1) / ranks * nbytes / bw)
    assert link == pytest.approx(want, rel=1e-9)
    # and the link model (which picks the faster) agrees on the one it would pick
    model = link_cost("all_reduce", nbytes, ranks, DEFAULT)
    if model.algorithm == {"one-shot": "one-shot", "two-shot": "direct"}[algorithm]:
        assert link == pytest.approx(model.ns, rel=1e-9)


def _out_of_place(op: str, numel_in: int, numel_out: int, dtype: str = "float16") -> kir.ExternKernel:
    x, out = buf("x", (numel_in,), dtype), buf("y", (numel_out,), dtype, "output")
    attrs = ((("reduce_op", "sum"),) if op == "reduce_scatter_tensor" else ()) + (("group_size", 4), ("group_name", "0"))
    return kir.ExternKernel("c", op, (x,), out, ("x", "y"), attrs)


@pytest.mark.parametrize(("op", "model_op"), [("all_gather_into_tensor", "all_gather"),
                                               ("reduce_scatter_tensor", "reduce_scatter")])
def test_gather_and_scatter_programs_link_time_is_the_direct_closed_form(op: str, model_op: str) -> None:
    slot = 1 << 16
    k = _out_of_place(op, slot if op.startswith("all_gather") else 4 * slot,
                      4 * slot if op.startswith("all_gather") else slot)
    p = build_collective(k, DEFAULT, "direct", 1, 4, "0")
    tl = simulate(p, DEFAULT, keep_events=False)
    link = sum(lanes.get("link", 0.0) for lanes in tl.busy.values())
    model = link_cost(model_op, 4 * slot * 2, 4, DEFAULT)
    assert model.algorithm == "direct" and link == pytest.approx(model.ns, rel=1e-9)
    if op.startswith("all_gather"):
        # whole-stick slots: no barrier, the copy of the card's own slot runs while the link moves the others
        assert not any(isinstance(i, Barrier) for c in p.cores for i in c.steps)
        rest = max(v for lanes in tl.busy.values() for lane, v in lanes.items() if lane != "link")
        assert tl.total_ns < link + rest


@pytest.mark.parametrize("algorithm", ALGORITHMS["all_reduce_"])
def test_stages_overlap_the_cores_work_with_the_link(algorithm: str) -> None:
    numel = 1 << 21  # 4 MiB of fp16 on 4 cards
    one = build_collective(_all_reduce(numel), DEFAULT, algorithm, 1, 4, "0")
    four = build_collective(_all_reduce(numel), DEFAULT, algorithm, 1, 4, "0", stages=4)
    t1, t4 = (simulate(p, DEFAULT, keep_events=False) for p in (one, four))
    link1, link4 = (sum(lanes.get("link", 0.0) for lanes in t.busy.values()) for t in (t1, t4))
    # the same bytes over the link in four exchanges instead of one: three more latencies
    assert link4 == pytest.approx(link1 + 3 * DEFAULT.link_latency_ns, rel=1e-9)
    # and the cores' work on stage k runs while the link moves stage k+1
    assert t4.total_ns < t1.total_ns
    assert t1.total_ns - link1 > 2 * (t4.total_ns - link4)
    assert four.plan.stages == 4 and sum(isinstance(i, LinkExchange) for c in four.cores for i in c.steps) == \
        4 + (algorithm == "two-shot")


def test_shares_are_whole_sticks_and_cover_the_buffer() -> None:
    for numel in (1, 63, 64, 65, 1000, 4096, 100_003):
        for ranks in (2, 3, 4, 8):
            cuts = shares(numel, ranks, 64)
            assert cuts[0][0] == 0 and cuts[-1][1] == numel
            assert all(a[1] == b[0] for a, b in zip(cuts, cuts[1:]))
            assert all(lo % 64 == 0 for lo, hi in cuts if hi > lo)  # empty shares sit at the end


def test_a_program_too_small_to_share_is_not_built_two_shot() -> None:
    from spyre_adapter.model.errors import DoesNotFit
    with pytest.raises(DoesNotFit, match="share of whole sticks"):
        build_collective(_all_reduce(100), DEFAULT, "two-shot", 0, 4, "0")


def _exchanging(*cores: CoreProgram, numel: int = 64) -> Program:
    k = _all_reduce(numel, "float32")
    return Program("t", "collective", k, (), cores, None, workspace=(("w", "float32", numel),))


def test_the_rules_hold_on_link_regions() -> None:
    m = DEFAULT
    numels = {"x": 64, "w": 64}
    inside = LinkExchange(((1, Region("x", 0, (64,), (1,))),), ((1, Region("w", 0, (64,), (1,))),), 1)
    static_check(_exchanging(CoreProgram(0, (inside,))), m, numels)
    past = LinkExchange(((1, Region("x", 32, (64,), (1,))),), (), 1)
    with pytest.raises(EmulatorError, match="link transfer outside a tensor's bytes"):
        static_check(_exchanging(CoreProgram(0, (past,))), m, numels)
    unknown = LinkExchange((), ((1, Region("nope", 0, (8,), (1,))),), 1)
    with pytest.raises(EmulatorError, match="unknown buffer"):
        static_check(_exchanging(CoreProgram(0, (unknown,))), m, numels)
    # another core reading what arrives, with no barrier after the exchange: a race
    load = DmaLoad(Region("w", 0, (64,), (1,)), Lx.dense(0, "float32", (64,)))
    with pytest.raises(EmulatorError, match="unordered DRAM access"):
        static_check(_exchanging(CoreProgram(0, (inside,)), CoreProgram(1, (load,))), m, numels)
    static_check(_exchanging(CoreProgram(0, (inside, Barrier(1))), CoreProgram(1, (Barrier(1), load))), m, numels)


def test_a_collective_program_round_trips_and_lists_its_exchanges() -> None:
    p = build_collective(_all_reduce(50_000), DEFAULT, "two-shot", 2, 4, "0")
    assert prog.from_json(prog.to_json(p)) == p
    text = isa.listing(p)
    assert text.count("link.exchange") == 2  # the reduce-scatter and the all-gather, on one core
    assert "card3->x[" in text and "x[" in text.split("link.exchange #2", 1)[1]


def test_link_exchanges_keep_their_program_order_in_replayed_launches() -> None:
    """Two exchanges with nothing in common would share a dependence level, and a
    level runs in any order: ranks meeting them in different orders deadlock."""
    from spyre_adapter.emulator.regroup import levels
    first = LinkExchange(((1, Region("x", 0, (64,), (1,))),), ((1, Region("w", 0, (64,), (1,))),), 1)
    second = LinkExchange(((1, Region("x", 64, (64,), (1,))),), ((1, Region("w", 64, (64,), (1,))),), 2)
    load = DmaLoad(Region("x", 0, (64,), (1,)), Lx.dense(0, "float32", (64,)))
    lv = levels([(0, 0, first), (1, 0, load), (0, 1, second)], (), DEFAULT, {"x": 128, "w": 128})
    assert lv[0] < lv[2] and lv[1] == 1
