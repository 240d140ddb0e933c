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

:func:`link_group` serves a backend that runs collectives as programs of its
own (compiled functional collectives): the group a collective names, with its
rank, size and a raw exchange of bytes with peers, uncharged.

Faults end in a one-line :class:`CollectiveError` on every rank instead of a
hang or an abort: ranks that disagree on a collective (which one, its dtype or
size: checked before it runs by one small gloo all_gather), and a rank that is
gone or does not answer within the group's timeout.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import torch

from ._torch import c10d
from ._torch.c10d import CollectiveError
from .device import _device

__all__ = ["CollectiveCall", "CollectiveError", "LinkGroup", "link_group", "register_host_collectives"]


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


@dataclasses.dataclass(frozen=True)
class LinkGroup:
    """A process group as a collective program sees it: this process's ``rank``
    among ``size`` ranks, and :meth:`exchange`, which moves bytes between ranks
    directly (through gloo underneath; nothing is charged or announced)."""

    name: str
    rank: int
    size: int
    _group: Any = dataclasses.field(repr=False, compare=False)

    def exchange(self, sends: Sequence[tuple[int, torch.Tensor]], recvs: Sequence[tuple[int, torch.Tensor]],
                 tag: int) -> None:
        """Send each ``(peer rank, CPU tensor)`` of ``sends`` and fill each
        ``(peer rank, contiguous CPU tensor)`` of ``recvs`` with what that peer
        sends under the same ``tag``. Every send is posted before any receive
        waits, so ranks exchanging at once do not deadlock. A rank that is gone
        or silent past the group's timeout: :class:`CollectiveError`."""
        c10d.exchange(self._group, sends, recvs, tag)


def link_group(name: str) -> LinkGroup:
    """The process group the functional collectives name ``name`` (their
    ``group_name`` argument), as a :class:`LinkGroup`; :class:`CollectiveError`
    (one line) when torch.distributed is not initialised or has no such group."""
    group = c10d.group_named(name)
    return LinkGroup(name, group.rank(), group.size(), group)
