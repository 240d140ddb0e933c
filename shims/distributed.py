"""Collectives for host-backed devices: a c10d backend over gloo.

:func:`register_host_collectives` registers a ``torch.distributed`` backend for
the host-backed device (:mod:`spyre_shims.device`) as that device's default, so
``init_process_group()`` on its tensors, or ``backend="cpu:gloo,<device>:<name>"``,
works: every collective of ``torch.distributed`` (all_reduce with every reduce op,
broadcast, reduce, all_gather, all_gather_into_tensor, reduce_scatter_tensor,
gather, scatter, all_to_all_single, send/recv, barrier; async works with ``wait``
and ``is_completed``) runs through gloo on the memory of the device tensors.
Each call is announced first to the vendor's listener as a :class:`CollectiveCall`
(to charge it on a modeled link, for example).

Faults end in a one-line :class:`CollectiveError` on every rank instead of a
hang or an abort: ranks that disagree on a collective (which one, its dtype or
size: checked before it runs by one small gloo all_gather), and a rank that is
gone or does not answer within the group's timeout.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from ._torch import c10d
from ._torch.c10d import CollectiveError
from .device import _device

__all__ = ["CollectiveCall", "CollectiveError", "register_host_collectives"]


@dataclasses.dataclass(frozen=True)
class CollectiveCall:
    """One collective as a rank issues it.

    ``op``: ``all_reduce``, ``broadcast``, ``reduce``, ``all_gather``,
    ``reduce_scatter``, ``gather``, ``scatter``, ``all_to_all``, ``send``, ``recv``
    or ``barrier``; ``nbytes``: its size as nccl-tests counts it (one rank's buffer
    for all_reduce, broadcast, reduce, send and recv; the whole gathered or
    scattered buffer otherwise); ``ranks``: the group's size; ``rank``: the
    caller's rank in the group; ``peer``: the root, source or destination rank
    (``None`` when the op has none); ``card``: the device index of the tensors
    (``None`` for CPU tensors)."""

    op: str
    nbytes: int
    ranks: int
    rank: int
    peer: int | None
    card: int | None


def register_host_collectives(name: str, on_call: Callable[[CollectiveCall], None] | None = None) -> None:
    """Register c10d backend ``name`` as the default backend of the registered
    host-backed device (see the module docstring); ``on_call`` gets each
    collective before it runs. Registering the same name again changes nothing."""
    def listener(**fields: object) -> None:
        if on_call is not None:
            on_call(CollectiveCall(**fields))  # type: ignore[arg-type]

    c10d.register(name, _device(), listener)
