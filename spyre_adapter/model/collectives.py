"""The card-to-card link's time for a collective: an algorithm model (ring, tree,
direct) over the machine's link (``link_gbps``, ``link_latency_ns``,
``link_topology``), the way NCCL's tuner models its own algorithms.

Sizes follow nccl-tests: ``nbytes`` is the buffer of one rank for all_reduce,
broadcast, reduce and send/recv; the whole gathered (or scattered) buffer for
all_gather, reduce_scatter, gather, scatter and all_to_all. :data:`BUS_FACTOR`
turns an algorithm bandwidth into nccl-tests' bus bandwidth (what a link
carries), so a benchmark can put it against the link's roof.

Every step costs ``link_latency_ns`` plus its bytes over ``link_gbps``. On the
``switch`` topology every pair of cards is one hop (peer to peer through the
drawer's PCIe switch, each card's own link the bottleneck), so a card can send
to all its peers in one step ("direct": the all-reduce is then two steps, a
reduce-scatter and an all-gather, not the ring's 2(n-1); or one, "one-shot",
each card sending its whole buffer to every peer, for small buffers); on ``ring`` a card
reaches only its two neighbours and a message to a card ``d`` away pays ``d``
latencies (cut-through forwarding).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

from spyre_adapter.model.machine import Machine

__all__ = ["LinkCost", "link_cost", "BUS_FACTOR", "OPS"]


@dataclasses.dataclass(frozen=True)
class LinkCost:
    """A collective's modeled time on the link: the algorithm chosen (the fastest
    the model knows for the op, size and topology) and its time in ns."""

    op: str
    nbytes: int
    ranks: int
    algorithm: str
    ns: float


#: nccl-tests' bus bandwidth factor per op (busbw = algbw x factor).
BUS_FACTOR: dict[str, Callable[[int], float]] = {
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "all_to_all": lambda n: (n - 1) / n,
    "gather": lambda n: (n - 1) / n,
    "scatter": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0,
    "reduce": lambda n: 1.0,
    "send": lambda n: 1.0,
    "recv": lambda n: 1.0,
    "barrier": lambda n: 0.0,
}
OPS = tuple(BUS_FACTOR)


def _hops(m: Machine, distance: int, n: int) -> int:
    """Link hops between two cards ``distance`` apart on the ring of ``n``."""
    return 1 if m.link_topology == "switch" else max(1, min(distance % n, n - distance % n))


def _step(m: Machine, nbytes: float, hops: int = 1) -> float:
    return hops * m.link_latency_ns + nbytes / m.link_gbps


def _tree_rounds(m: Machine, n: int, nbytes: float) -> float:
    """A binomial tree's ceil(log2 n) rounds; round k talks across 2**k cards."""
    return sum(_step(m, nbytes, _hops(m, 2**k, n)) for k in range(math.ceil(math.log2(n))))


def _pipelined_chain(m: Machine, n: int, nbytes: float) -> float:
    """A message passed along the ring's n-1 hops in k chunks (k chosen best)."""
    return min((n - 2 + k) * _step(m, nbytes / k) for k in (2**j for j in range(11)))


def _direct(m: Machine, n: int, nbytes: float) -> float:
    """Every card sends its n-1 pieces of ``nbytes / n`` at once, one hop each
    through the switch: one latency, (n-1)/n of the bytes over each card's link."""
    return m.link_latency_ns + (n - 1) / n * nbytes / m.link_gbps


def link_cost(op: str, nbytes: int, ranks: int, m: Machine, peer_distance: int = 1) -> LinkCost:
    """The modeled link time of one collective of ``nbytes`` (see the module
    docstring for what the size means per op) over ``ranks`` cards of ``m``."""
    if op not in BUS_FACTOR:
        raise ValueError(f"op={op!r} is not accepted: expected one of {', '.join(OPS)}")
    n, s = ranks, float(nbytes)
    if n <= 1:
        return LinkCost(op, nbytes, n, "local", 0.0)
    candidates: dict[str, float] = {}
    switch = m.link_topology == "switch"
    if op == "all_reduce":
        # ring: a reduce-scatter then an all-gather, 2(n-1) steps of s/n each
        candidates["ring"] = 2 * (n - 1) * _step(m, s / n)
        # tree: reduce up a binomial tree, broadcast down it (latency-bound sizes)
        candidates["tree"] = 2 * _tree_rounds(m, n, s)
        if switch:
            # two-shot: every card sends each peer its share of the reduction at
            # once, then each reduced share to every peer: two latencies, the
            # ring's bytes through each card's own link
            candidates["direct"] = 2 * _direct(m, n, s)
            # one-shot: every card sends its whole buffer to every peer and
            # reduces what it receives: one latency, n-1 buffers through its link
            candidates["one-shot"] = m.link_latency_ns + (n - 1) * s / m.link_gbps
    elif op in ("all_gather", "reduce_scatter"):
        candidates["ring"] = (n - 1) * _step(m, s / n)
        if switch:
            candidates["direct"] = _direct(m, n, s)
    elif op in ("broadcast", "reduce"):
        candidates["tree"] = _tree_rounds(m, n, s)
        candidates["ring"] = _pipelined_chain(m, n, s)
    elif op in ("gather", "scatter"):
        if switch:
            # every card sends its piece at once; the root's link carries n-1 of them
            candidates["direct"] = _direct(m, n, s)
        else:
            candidates["ring"] = (n - 1) * m.link_latency_ns + (n - 1) / n * s / m.link_gbps
    elif op == "all_to_all":
        if switch:
            candidates["direct"] = _direct(m, n, s)
        else:
            # each piece of s/n travels min(d, n-d) hops; the load splits over both directions
            load = s / n * sum(min(d, n - d) for d in range(1, n)) / 2
            candidates["ring"] = n // 2 * m.link_latency_ns + load / m.link_gbps
    elif op in ("send", "recv"):
        candidates["direct"] = _step(m, s, _hops(m, peer_distance, n))
    else:  # barrier: a dissemination barrier, empty messages
        candidates["tree"] = _tree_rounds(m, n, 0.0)
    algorithm = min(candidates, key=candidates.__getitem__)
    return LinkCost(op, nbytes, n, algorithm, candidates[algorithm])
