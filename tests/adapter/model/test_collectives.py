"""The link's algorithm model: its limits against first principles (bandwidth
and latency bounds that hold whatever the algorithm), the algorithm choice by
size, and the topology's effect."""

from __future__ import annotations

import pytest

from spyre_adapter.model.collectives import BUS_FACTOR, OPS, link_cost
from spyre_adapter.model.machine import DEFAULT, MachineSpecError

MIB = 1 << 20


@pytest.mark.parametrize("n", [2, 4, 8])
@pytest.mark.parametrize("op", ["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast"])
def test_bus_bandwidth_never_beats_the_link_and_approaches_it_for_large_messages(op: str, n: int) -> None:
    link = DEFAULT.link_gbps
    for size in (4096, MIB, 256 * MIB):
        c = link_cost(op, size, n, DEFAULT)
        busbw = size / c.ns * BUS_FACTOR[op](n)
        assert busbw <= link * (1 + 1e-9)
        # no algorithm beats one latency per message either
        assert c.ns >= DEFAULT.link_latency_ns
    big = link_cost(op, 256 * MIB, n, DEFAULT)
    assert 256 * MIB / big.ns * BUS_FACTOR[op](n) > 0.85 * link  # pipelined broadcast: ~0.88 at 8


def test_on_the_switch_an_all_reduce_takes_one_or_two_direct_steps_on_a_ring_topology_the_ring() -> None:
    # Through the switch every card reaches every peer in one hop. Two-shot: a
    # reduce-scatter then an all-gather, each one latency plus (n-1)/n of the
    # buffer over the card's own link. One-shot: one latency, the whole buffer to
    # each of the n-1 peers (small buffers; on 2 cards it never loses).
    lat, link = DEFAULT.link_latency_ns, DEFAULT.link_gbps
    for size in (MIB, 64 * MIB):
        c = link_cost("all_reduce", size, 8, DEFAULT)
        assert c.algorithm == "direct" and c.ns == pytest.approx(2 * lat + 2 * 7 / 8 * size / link)
    small = link_cost("all_reduce", 64, 8, DEFAULT)
    assert small.algorithm == "one-shot" and small.ns == pytest.approx(lat + 7 * 64 / link)
    two = link_cost("all_reduce", MIB, 2, DEFAULT)
    assert two.algorithm == "one-shot" and two.ns == pytest.approx(lat + MIB / link)
    g = link_cost("all_gather", MIB, 4, DEFAULT)
    assert g.algorithm == "direct" and g.ns == pytest.approx(lat + 3 / 4 * MIB / link)
    ring = DEFAULT.replace(link_topology="ring")
    assert link_cost("all_reduce", 64 * MIB, 8, ring).algorithm == "ring"
    assert link_cost("all_gather", MIB, 4, ring).algorithm == "ring"


def test_a_ring_topology_costs_more_than_the_switch_for_all_to_all_and_far_peers() -> None:
    ring = DEFAULT.replace(link_topology="ring")
    assert link_cost("all_to_all", 64 * MIB, 8, ring).ns > link_cost("all_to_all", 64 * MIB, 8, DEFAULT).ns
    assert link_cost("send", 64, 8, ring, peer_distance=4).ns > link_cost("send", 64, 8, ring, peer_distance=1).ns
    assert link_cost("send", 64, 8, DEFAULT, peer_distance=4).ns == link_cost("send", 64, 8, DEFAULT).ns


def test_one_rank_costs_nothing_and_unknown_ops_or_topologies_are_refused() -> None:
    for op in OPS:
        assert link_cost(op, MIB, 1, DEFAULT).ns == 0.0
    with pytest.raises(ValueError, match="op='allreduce' is not accepted"):
        link_cost("allreduce", MIB, 2, DEFAULT)
    with pytest.raises(MachineSpecError, match="link_topology='mesh' is not accepted: expected one of switch, ring"):
        DEFAULT.replace(link_topology="mesh")
