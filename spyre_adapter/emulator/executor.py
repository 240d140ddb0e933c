"""The functional pass: run every core's instructions over that core's LX memory
and the card's DRAM. Every output value comes from executing the program.

The card keeps each core's LX bytes and, per byte, a stamp of when it was
written: reading bytes not written in this launch (or left for it by an earlier
kernel, see :class:`~spyre_adapter.model.program.Resident`) is an error, as is
overwriting bytes an earlier kernel left for a later one. A checked launch runs
in rounds (:class:`.execution.Execution`); an unchecked launch given a
:class:`.replay.Replay` records its steps on the first run and replays them after.

What is checked, each violation an :class:`EmulatorError` naming the kernel,
core, step and buffer: LX views inside the usable capacity and aligned; DMA
LX addresses on stick boundaries; DMA regions inside their tensor; per-core
span of each tensor; reads of unwritten LX; two cores writing the same DRAM
bytes, or parts of one stick, or one reading what another writes, without an
order between them (matched barrier tags and ring messages:
:mod:`spyre_adapter.model.ordering`), for strided and data-dependent transfers
alike; ring transfers without a partner; barriers some core never reaches.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, MutableMapping

import sympy
import torch

from spyre_shims.ops import torch_dtype

from spyre_adapter.emulator import regroup
from spyre_adapter.emulator.card import HELD, STALE, Card
from spyre_adapter.emulator.execution import Execution
from spyre_adapter.emulator.replay import Replay
from spyre_adapter.model.errors import EmulatorError
from spyre_adapter.model.gc_pause import gc_paused
from spyre_adapter.model.ordering import order_of
from spyre_adapter.model.program import Program, itemsize
from spyre_adapter.model.rules import static_check

__all__ = ["EmulatorError", "Card", "Replay", "RunStats", "execute"]


@dataclasses.dataclass
class RunStats:
    """What one execution measured: DRAM bytes of data-dependent transfers by
    (core, step); per core the highest LX byte its instructions name (the static
    figure) and, when asked for, the highest byte the launch actually wrote or
    held (the card's own high-water mark)."""

    dynamic_bytes: dict[tuple[int, int], int]
    lx_peak: dict[int, int]
    lx_peak_executed: dict[int, int] = dataclasses.field(default_factory=dict)


def _high_water(p: Program, card: Card, epoch: int) -> dict[int, int]:
    """Per core, one past the highest LX byte stamped by this (checked) launch:
    written now, written under an allocation that ended, or held for a later kernel."""
    out = {}
    held = {r.core: r.addr + (r.hi - r.lo) * itemsize(r.dtype) for r in (*p.lx_in, *p.lx_out)}
    for c in p.cores:
        if not c.instrs:
            continue
        st = card.stamp[c.core]
        hit = ((st == epoch) | (st == STALE)).nonzero()
        top = int(hit[-1]) + 1 if hit.numel() else 0
        out[c.core] = max(top, held.get(c.core, 0))
    return out


def _with_workspace(p: Program, buffers: MutableMapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The launch's DRAM: the kernel's arguments and the program's scratch buffers
    (floating ones NaN-filled, so a read before a write shows)."""
    bufs = dict(buffers)
    for name, dt, numel in p.workspace:
        bufs[name] = torch.full((numel,), float("nan"), dtype=torch_dtype(dt)) if torch_dtype(dt).is_floating_point \
            else torch.zeros(numel, dtype=torch_dtype(dt))
    return bufs


def _take_held(p: Program, card: Card, checking: bool, epoch: int) -> None:
    """What earlier kernels left in LX for this one becomes this launch's data."""
    for r in p.lx_in:
        st = card.stamps(r.core, r.lx)
        if checking and not bool((st == HELD).all()):
            raise EmulatorError("read of unwritten LX", p.name, r.core, -1, r.buffer,
                                f"expects {r.buffer}[{r.lo}:{r.hi}] held in LX at {r.addr}; no earlier kernel left it")
        st.fill_(epoch)


@gc_paused
def execute(p: Program, buffers: MutableMapping[str, torch.Tensor], card: Card,
            sizes: Mapping[sympy.Symbol, int] | None = None, checking: bool = True,
            replay: Replay | None = None, pe_threads: int = 1, measure_peak: bool = False) -> RunStats:
    """Run ``p`` on ``card`` over the flat DRAM ``buffers`` (kernel arguments by
    name; the program's workspace is allocated here). ``checking`` off skips the
    LX stamp checks (a program already run once with them); ``pe_threads``: the
    intra-op threads of large PE steps (see :func:`.replay.matmul`); an unchecked launch
    given ``replay`` records its steps there, or replays them once recorded;
    ``measure_peak``: read the LX high-water mark off the card after a checked launch."""
    bufs = _with_workspace(p, buffers)
    order = order_of(p) if checking else None
    peaks = static_check(p, card.machine, {k: v.numel() for k, v in bufs.items()}, order) if checking else {}
    epoch = card.new_launch() if checking else card.epoch
    _take_held(p, card, checking, epoch)
    ex = Execution(p, card, bufs, sizes or {}, checking, pe_threads, order)
    aliased = regroup.aliasing(bufs) if replay is not None and not checking else frozenset()
    if replay is not None and not checking and replay.ready(card, aliased):
        ex.replay(replay.thunks or ())
    elif replay is not None and not checking:
        ex.record = []
        ex.run()
        replay.card, replay.thunks, replay.aliased = card, ex.record, aliased
    else:
        ex.run()
    executed = _high_water(p, card, epoch) if measure_peak and checking else {}
    for r in p.lx_out:
        card.stamps(r.core, r.lx).fill_(HELD)
    return RunStats(ex.dynamic_bytes, peaks, executed)
