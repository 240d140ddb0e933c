"""The Spyre c10d backend, ``sccl``: torch.distributed collectives on spyre
tensors, their data moved by gloo (:mod:`spyre_shims.distributed`), each charged
on the emulated card-to-card link by the algorithm model of
:mod:`spyre_adapter.model.collectives` and recorded in the card's report.

Registered with the device, as its default backend: ``init_process_group()``
on spyre tensors, or ``init_process_group(backend="cpu:gloo,spyre:sccl")``.
"""

from __future__ import annotations

from spyre_shims.distributed import CollectiveCall, register_host_collectives

from spyre_adapter.backend.session import current
from spyre_adapter.model.collectives import link_cost

__all__ = ["BACKEND", "register", "charge"]

#: The backend's name in torch.distributed.
BACKEND = "sccl"


def charge(call: CollectiveCall) -> None:
    """Charge one collective on the link of the process's current card (its rank's
    card under torchrun): a rank is one card, whatever index its tensors carry
    (``.to("spyre")`` gives ``spyre:0`` on torch._C._acc, whose device guard
    reports device 0)."""
    session = current()
    distance = (call.peer - call.rank) % call.ranks if call.peer is not None else 1
    cost = link_cost(call.op, call.nbytes, call.ranks, session.machine, peer_distance=distance)
    session.report.record_collective(cost)


def register() -> None:
    """Register ``sccl`` as the spyre device's c10d backend (idempotent)."""
    register_host_collectives(BACKEND, charge)
