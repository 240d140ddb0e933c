"""Regroup a program's steps by data dependence for the replayed launches.

The round scheduler runs, each round, every core whose next step can start,
and batches runs of consecutive cores doing the same step. Cores drift apart
(a ring receive waits for its send, a barrier for the slowest core), so the
same step of 32 cores often lands in several rounds and runs as several small
batches. A replayed launch has no timing to honour, only the program's data
dependences, so it runs the steps in dependence levels: a step's level is one
more than the highest level of an earlier step it conflicts with (it reads what
that step wrote, writes what it read or wrote, or receives its send). Steps of
one level are independent, so any order among them computes the same values,
and the same step of many cores batches again. Steps that meet other processes
(a collective's link exchanges: every card must meet them in the same order)
keep their program order among themselves (``Step.serial``).

Conflicts are found conservatively: LX bytes in blocks of ``LX_BLOCK`` per
core, DRAM elements in blocks per buffer (a data-dependent gather or scatter
touches its whole buffer), ring messages by (tag, receiver). Buffers that share
storage in the launch count as one buffer, touched whole. A ring message whose
source bytes the sender does not overwrite before the receive is marked for a
direct copy from the sender's LX (see :func:`levels`). Equal-shaped steps of a
level that no strided core view holds (unrelated cores and addresses) can pool
into one :class:`Gathered` group, run as one gather and scatter.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any

import numpy as np
import torch

from spyre_shims.kernel_ir import LoopKernel

from spyre_adapter.model import isa
from spyre_adapter.model.machine import Machine
from spyre_adapter.model.program import Instruction, Lx, Region

__all__ = ["Item", "LX_BLOCK", "DRAM_BLOCKS", "MIN_STRIDED", "Gathered", "aliasing", "levels", "regroup"]

#: One step of one core: (core, step index, instruction).
Item = tuple[int, int, Instruction]
#: LX conflict granularity in bytes.
LX_BLOCK = 64
#: DRAM conflict blocks per buffer at most (a large buffer gets coarser blocks).
DRAM_BLOCKS = 1 << 16
#: Steps a run of evenly spaced cores needs to stay one strided op rather than
#: join its level's gather (a gather moves the data twice, a strided op once).
MIN_STRIDED = 4


class Gathered(list):  # type: ignore[type-arg]
    """A group of steps of one level with equal shapes at unrelated cores and
    addresses: run as one gather and scatter, not as one strided op."""


def aliasing(buffers: Mapping[str, torch.Tensor]) -> frozenset[str]:
    """Names of buffers whose storage another buffer of the launch shares."""
    by_storage: dict[int, list[str]] = defaultdict(list)
    for name, t in buffers.items():
        by_storage[t.untyped_storage().data_ptr()].append(name)
    return frozenset(n for names in by_storage.values() if len(names) > 1 for n in names)


class _Blocks:
    """Last write level and highest read level per block of one address space."""

    def __init__(self, rows: int, blocks: int, block: int) -> None:
        self.block = block
        self.written = np.zeros((rows, blocks), dtype=np.int32)
        self.read = np.zeros((rows, blocks), dtype=np.int32)

    def span(self, lo: int, hi: int) -> slice:
        return slice(lo // self.block, max(hi - 1, lo) // self.block + 1)

    def after(self, row: int, s: slice, writes: bool) -> int:
        """The lowest level a step touching ``s`` may take."""
        lvl = int(self.written[row, s].max()) + 1
        if writes:
            lvl = max(lvl, int(self.read[row, s].max()) + 1)
        return lvl

    def touch(self, row: int, s: slice, writes: bool, lvl: int) -> None:
        if writes:
            self.written[row, s] = lvl
        else:
            np.maximum(self.read[row, s], lvl, out=self.read[row, s])


def levels(items: Sequence[Item], bodies: tuple[LoopKernel, ...], m: Machine,
           numels: Mapping[str, int], aliased: frozenset[str] = frozenset(),
           direct: dict[tuple[int, int], tuple[int, Lx]] | None = None) -> list[int]:
    """The dependence level (from 1) of each item of ``items``, a valid execution order.

    With ``direct``, ring messages whose source bytes the sender does not
    overwrite before the receive are entered there, (tag, receiver) ->
    (sender, source view): such a receive can copy from the sender's LX (no
    snapshot), and the sender's later writes to those bytes wait for it."""
    lx = _Blocks(m.cores, m.lx_bytes // LX_BLOCK + 1, LX_BLOCK)
    dram: dict[str, _Blocks] = {}
    sent: dict[tuple[int, int], int] = {}
    taken: dict[tuple[int, int], int] = {}
    sources: dict[tuple[int, int], tuple[int, Lx, slice, int]] = {}

    def dram_of(ref: Region | str) -> tuple[_Blocks, slice]:
        name = ref if isinstance(ref, str) else ref.buffer
        whole = isinstance(ref, str) or name in aliased
        key = "<aliased>" if name in aliased else name
        n = max(numels.get(name, 1), 1) if key == name else 1
        blocks = dram.get(key)
        if blocks is None:
            block = max(1, -(-n // DRAM_BLOCKS))
            blocks = dram[key] = _Blocks(1, -(-n // block) + 1, block)
        if whole:
            return blocks, slice(None)
        lo, hi = ref.bounds()
        return blocks, blocks.span(lo, hi + 1)

    out: list[int] = []
    serial = 0  # the level of the last step that meets other processes
    for core, _, ins in items:
        rec = isa.step(ins)
        reads, writes = rec.lx_accesses(ins, bodies)
        dreads, dwrites = rec.dram_accesses(ins)
        acc = [(lx, core, lx.span(*v.byte_range()), False) for v in reads]
        acc += [(lx, core, lx.span(*v.byte_range()), True) for v in writes]
        for ref in dreads:
            b, s = dram_of(ref)
            acc.append((b, 0, s, False))
        for ref in dwrites:
            b, s = dram_of(ref)
            acc.append((b, 0, s, True))
        lvl = 1
        for space, row, s, w in acc:
            lvl = max(lvl, space.after(row, s, w))
        if rec.sync == "recv":
            key = (ins.tag, core)
            lvl = max(lvl, sent[key] + 1)
            taken[key] = lvl
            sender, src, span, at = sources.pop(key)
            # a write after the send would carry a level above the send's
            if direct is not None and int(lx.written[sender, span].max()) < at:
                direct[key] = (sender, src)
                acc.append((lx, sender, span, False))
        elif rec.sync == "send":
            for peer in ins.peers:
                lvl = max(lvl, taken.get((ins.tag, peer), 0) + 1)
        if rec.serial:
            lvl = serial = max(lvl, serial + 1)
        for space, row, s, w in acc:
            space.touch(row, s, w, lvl)
        if rec.sync == "send":
            span = lx.span(*ins.src.byte_range())
            for peer in ins.peers:
                sent[(ins.tag, peer)] = lvl
                sources[(ins.tag, peer)] = (core, ins.src, span, lvl)
        out.append(lvl)
    return out


def regroup(items: Sequence[Item], lvls: Sequence[int], signature: Callable[[Item], Hashable | None],
            shape: Callable[[Item], Hashable | None] | None = None) -> list[list[Item]]:
    """``items`` in level order, batched: per level and signature, runs of
    consecutive cores become one group (an unbatchable step stays alone). With
    ``shape`` (a key of steps that can run gathered, else None), a level's runs
    of one shape shorter than :data:`MIN_STRIDED` pool into one :class:`Gathered`."""
    by_level: dict[int, dict[Any, list[Item]]] = defaultdict(dict)
    for n, (item, lvl) in enumerate(zip(items, lvls)):
        if isa.step(item[2]).sync == "barrier":  # the program's order is in the levels
            continue
        sig = signature(item)
        key = ("one", n) if sig is None else sig
        by_level[lvl].setdefault(key, []).append(item)
    groups: list[list[Item]] = []
    for lvl in sorted(by_level):
        pools: dict[Any, list[list[Item]]] = {}
        for members in by_level[lvl].values():
            for run in _progressions(sorted(members, key=lambda t: t[0])):
                key = shape(run[0]) if shape is not None and len(run) < MIN_STRIDED else None
                if key is None:
                    groups.append(run)
                else:
                    pools.setdefault(key, []).append(run)
        for runs in pools.values():
            if len(runs) == 1:
                groups.append(runs[0])
            else:
                groups.append(Gathered(item for run in runs for item in run))
    return groups


def _progressions(members: list[Item]) -> list[list[Item]]:
    """Split items sorted by core into runs whose cores step evenly (a strided
    core view batches them); a core met twice starts a later pass."""
    out: list[list[Item]] = []
    while members:
        later: list[Item] = []
        run: list[Item] = []
        for item in members:
            if run and item[0] == run[-1][0]:
                later.append(item)
                continue
            if len(run) >= 2 and item[0] - run[-1][0] != run[1][0] - run[0][0]:
                out.append(run)
                run = []
            run.append(item)
        out.append(run)
        members = later
    return out
