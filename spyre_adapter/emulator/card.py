"""The emulated card's on-core memory: every core's LX bytes and a write stamp
per byte, with the tensor views the executor reads and writes them through.

A view is addressed by a core, or a core range (:data:`Where`) stacked as the
leading dim, and an LX view (:class:`~spyre_adapter.model.program.Lx`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from spyre_shims.ops import torch_dtype

from spyre_adapter.model.machine import Machine
from spyre_adapter.model.program import Lx

__all__ = ["HELD", "STALE", "VIEW_CACHE_SIZE", "INTS", "Card", "Where", "where_of", "core_range", "core_view", "byte_dims",
           "bits"]

#: The stamp of LX bytes an earlier kernel left for a later one.
HELD = 255
#: The stamp of bytes written in this launch under an allocation that has since
#: ended: the allocation now holding them has not written them yet.
STALE = 254
#: Card views kept for reuse (cleared when full).
VIEW_CACHE_SIZE = 1 << 16


INTS = {1: np.uint8, 2: np.int16, 4: np.int32, 8: np.int64}
_TORCH_INTS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def bits(t: torch.Tensor) -> np.ndarray:
    """The elements of the flat tensor ``t`` as a numpy array of same-size
    integers sharing its memory."""
    return t.detach().view(_TORCH_INTS[t.element_size()]).numpy()


class Card:
    """The emulated card's on-core memory: every core's LX, kept across kernel
    launches, with a write stamp per byte."""

    def __init__(self, m: Machine) -> None:
        self.machine = m
        self.lx = torch.zeros(m.cores, m.lx_bytes, dtype=torch.uint8)
        self.stamp = torch.zeros(m.cores, m.lx_bytes, dtype=torch.uint8)
        self.epoch = 0
        self._typed: dict[torch.dtype, torch.Tensor] = {}
        self._bits: dict[int, Any] = {}
        # Views by (core or core range, LX view): a program's steps use the same
        # few views every launch, and building one costs more than the copy it serves.
        self._views: dict[tuple[Any, Lx], torch.Tensor] = {}

    def new_launch(self) -> int:
        """Start a checked launch: a new stamp; bytes stamped earlier become
        unreadable. Unchecked launches read no stamps and take none: the
        wrap-around below rewrites every core's stamps (tens of ms), which a
        decode loop of unchecked launches would otherwise pay every 253 launches."""
        self.epoch += 1
        if self.epoch >= STALE:
            # every stamp but HELD restarts at 0: HELD - 1 (STALE) and below clamp to
            # HELD - 1 and become 0, HELD becomes 1 and then HELD again (three
            # in-place passes; a mask of the 64 MB took 9x longer)
            self.stamp.clamp_(min=HELD - 1).sub_(HELD - 1).mul_(HELD)
            self.epoch = 1
        return self.epoch

    def bits(self, itemsize: int) -> Any:
        """Every core's LX, flat, as a numpy array of ``itemsize``-byte integers
        sharing the card's memory (the gathered replay steps address it)."""
        b = self._bits.get(itemsize)
        if b is None:
            b = self._bits[itemsize] = bits(self.lx.view(-1)).view(INTS[itemsize])
        return b

    def typed(self, dtype: torch.dtype) -> torch.Tensor:
        """Every core's LX as elements of ``dtype``: (cores, lx_bytes / itemsize)."""
        t = self._typed.get(dtype)
        if t is None:
            t = self._typed[dtype] = self.lx.view(dtype)
        return t

    def view(self, core: Where, lx: Lx) -> torch.Tensor:
        """The tensor view of ``lx`` on one core, or stacked over a core range (:data:`Where`)."""
        key = (core, lx)
        v = self._views.get(key)
        if v is None:
            if len(self._views) >= VIEW_CACHE_SIZE:
                self._views.clear()
            t = self.typed(torch_dtype(lx.dtype))
            v = self._views[key] = core_view(t, core, lx.sizes, lx.strides, lx.addr // t.element_size())
        return v

    def grid_view(self, first: int, strides: tuple[int, int], shape: tuple[int, int], lx: Lx) -> torch.Tensor:
        """``lx`` on a 2-D grid of cores ``first + i * strides[0] + j * strides[1]``."""
        t = self.typed(torch_dtype(lx.dtype))
        width = t.shape[1]
        return t.as_strided((*shape, *lx.sizes), (strides[0] * width, strides[1] * width, *lx.strides),
                            t.storage_offset() + first * width + lx.addr // t.element_size())

    def stamps(self, core: Where, lx: Lx) -> torch.Tensor:
        """Per-byte stamps of the bytes ``lx`` covers, as a view whose innermost
        dims are merged where contiguous (broadcast dims dropped): ``[B?] + dims``."""
        sizes, strides = byte_dims(lx)
        return core_view(self.stamp, core, sizes, strides, lx.addr)

    def element_stamps(self, core: Where, lx: Lx) -> torch.Tensor:
        """Per-byte stamps shaped like ``lx``'s elements: ``[B?] + sizes + [itemsize]``."""
        isz = lx.itemsize
        sizes, strides = (*lx.sizes, isz), (*(st * isz for st in lx.strides), 1)
        return core_view(self.stamp, core, sizes, strides, lx.addr)


#: One core, or the cores ``range(c0, c1[, step])`` stacked as a leading dim.
Where = int | tuple[int, ...]


def where_of(cores: Sequence[int]) -> Where:
    """The :data:`Where` of cores in arithmetic progression (one core: an int)."""
    if len(cores) == 1:
        return cores[0]
    step = cores[1] - cores[0]
    return (cores[0], cores[-1] + 1) if step == 1 else (cores[0], cores[-1] + 1, step)


def core_range(where: Where) -> range:
    """The cores of ``where``."""
    return range(where, where + 1) if isinstance(where, int) else range(*where)


def core_view(t: torch.Tensor, core: Where, sizes: tuple[int, ...], strides: tuple[int, ...],
               offset: int) -> torch.Tensor:
    """A strided view into row ``core`` of a (cores, n) tensor, or into the rows
    of a core range with the core as the first dim; ``offset`` in elements."""
    # Offsets computed directly: no per-core row slice (a tensor per call).
    width = t.shape[1]
    if isinstance(core, int):
        return t.as_strided(sizes, strides, t.storage_offset() + core * width + offset)
    rows = range(*core)
    return t.as_strided((len(rows), *sizes), (width * rows.step, *strides), t.storage_offset() + rows.start * width + offset)


def byte_dims(lx: Lx) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The bytes of a view as few strided dims as possible (contiguous runs merged)."""
    dims = [(n, st * lx.itemsize) for n, st in zip(lx.sizes, lx.strides) if n > 1 and st != 0]
    dims.sort(key=lambda t: -t[1])
    dims.append((lx.itemsize, 1))
    out = [dims[-1]]
    for n, st in reversed(dims[:-1]):
        inner_n, inner_st = out[0]
        if st == inner_n * inner_st:
            out[0] = (n * inner_n, inner_st)
        else:
            out.insert(0, (n, st))
    return tuple(n for n, _ in out), tuple(st for _, st in out)
