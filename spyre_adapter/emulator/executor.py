"""The functional pass: run every core's instructions over that core's LX memory
and the card's DRAM. Every output value comes from executing the program.

The card keeps each core's LX bytes and, per byte, a stamp of when it was
written: reading bytes not written in this launch (or left for it by an earlier
kernel, see :class:`~spyre_adapter.model.program.Resident`) is an error, as is
overwriting bytes an earlier kernel left for a later one. Cores run in rounds,
one instruction each; cores that run the same step on different tiles in a
round run it as one batched op (one torch op over their stacked LX views). An
unchecked launch that records its steps for replay runs them in dependence
levels instead (:mod:`.regroup`), where more cores share each batched op.

What is checked, each violation an :class:`EmulatorError` naming the kernel,
core, step and buffer: LX views inside the usable capacity and aligned; DMA
LX addresses on stick boundaries; DMA regions inside their tensor; per-core
span of each tensor; reads of unwritten LX; two cores writing the same DRAM
bytes, or parts of one stick, between the same barriers; a core reading DRAM
another core writes between the same barriers; ring transfers without a
partner; barriers some core never reaches.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping, MutableMapping, Sequence
from typing import Any

import numpy as np
import sympy
import torch

from spyre_shims import index as sidx
from spyre_shims.kernel_ir import LoopKernel
from spyre_shims.ops import torch_dtype
from spyre_shims.reference import (KernelFault, Tile, combine_partials, compile_evaluation, data_index_symbols, evaluate,
                                   merge_partials, partial_dtypes)

from ..machine import Machine
from ..model.bodies import index_cone
from ..model.program import (AddrGen, Barrier, Combine, DmaGather, DmaLoad, DmaScatter, DmaStore, Instruction, Lx,
                             Operand, Pe, Program, Region, RingRecv, RingSend, Vec, describe)
from ..model.rules import EmulatorError, buffer_dtypes, overlaps, static_check
from ..model.traffic import StickMarks
from . import regroup
from . import replay as rp
from .replay import Replay, put

__all__ = ["EmulatorError", "Card", "Replay", "RunStats", "execute", "static_check"]

#: The stamp of LX bytes an earlier kernel left for a later one.
HELD = 255
#: Replayed vector steps run compiled: loads and stores resolved once, the body
#: a flat list of steps (False: interpreted every launch, for A/B measurements).
REPLAY_COMPILED = True
#: Card views kept for reuse (cleared when full).
VIEW_CACHE_SIZE = 1 << 16


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
        decode loop of unchecked launches would otherwise pay every 254 launches."""
        self.epoch += 1
        if self.epoch >= HELD:
            # every stamp but HELD restarts at 0: HELD - 1 and below clamp to
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
            b = self._bits[itemsize] = rp.bits(self.lx.view(-1)).view(rp.INTS[itemsize])
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
            v = self._views[key] = _core_view(t, core, lx.sizes, lx.strides, lx.addr // t.element_size())
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
        sizes, strides = _byte_dims(lx)
        return _core_view(self.stamp, core, sizes, strides, lx.addr)

    def element_stamps(self, core: Where, lx: Lx) -> torch.Tensor:
        """Per-byte stamps shaped like ``lx``'s elements: ``[B?] + sizes + [itemsize]``."""
        isz = lx.itemsize
        sizes, strides = (*lx.sizes, isz), (*(st * isz for st in lx.strides), 1)
        return _core_view(self.stamp, core, sizes, strides, lx.addr)


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


def _core_view(t: torch.Tensor, core: Where, sizes: tuple[int, ...], strides: tuple[int, ...],
               offset: int) -> torch.Tensor:
    """A strided view into row ``core`` of a (cores, n) tensor, or into the rows
    of a core range with the core as the first dim; ``offset`` in elements."""
    # Offsets computed directly: no per-core row slice (a tensor per call).
    width = t.shape[1]
    if isinstance(core, int):
        return t.as_strided(sizes, strides, t.storage_offset() + core * width + offset)
    rows = range(*core)
    return t.as_strided((len(rows), *sizes), (width * rows.step, *strides), t.storage_offset() + rows.start * width + offset)


def _byte_dims(lx: Lx) -> tuple[tuple[int, ...], tuple[int, ...]]:
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


@dataclasses.dataclass
class RunStats:
    """What one execution measured: DRAM bytes of data-dependent transfers by
    (core, step), and per core the highest LX byte its instructions touched."""

    dynamic_bytes: dict[tuple[int, int], int]
    lx_peak: dict[int, int]


# ------------------------------------------------------------------ LX memory for vector steps

class _NotBatchable(Exception):
    pass


class _LxMemory:
    """A vector step's loads and stores against its LX operands, on one core or
    stacked over a core range."""

    def __init__(self, ex: _Execution, where: Where, ops: Sequence[Operand] | Sequence[Sequence[Operand]],
                 step: int, kernel: LoopKernel, targets: Mapping[int, Lx] | None = None) -> None:
        self.ex, self.where, self.step, self.kernel = ex, where, step, kernel
        self.batched = not isinstance(where, int)
        # per position: one operand (single core) or the per-core operands of the batch
        if self.batched:
            per_core = list(ops)  # type: ignore[arg-type]
            self.ops = {o.pos: [c_ops[k] for c_ops in per_core] for k, o in enumerate(per_core[0])}  # type: ignore[index]
        else:
            self.ops = {o.pos: [o] for o in ops}  # type: ignore[union-attr]
        self.targets = targets or {}
        #: a replayed step's memory keeps its windows and gather indices (the
        #: tile and operands are the same every launch; a masked gather's
        #: indices are kept for the very mask tensor they were built under)
        self.memo: dict[Any, Any] | None = None
        #: and the body values that depend only on the tile (evaluate's ``memo``)
        self.values: dict[int, Any] | None = None
        #: and, once replayed, how each body position loads and stores
        #: (resolved on the first replay; a load's under the mask it saw)
        self.fast: dict[int, Any] | None = None
        #: and the step's evaluation compiled to a flat list of steps
        self.plan: Callable[[], dict[int, Any]] | None = None

    def _core(self) -> int:
        return self.where if isinstance(self.where, int) else self.where[0]

    def _fail(self, kind: str, name: str, detail: str) -> EmulatorError:
        return EmulatorError(kind, self.ex.p.name, self._core(), self.step, name, detail)

    def _window(self, ops: list[Operand], name: str, index: sympy.Expr, tile: Tile, shape: Sequence[int]) -> tuple[Any, Any]:
        """(strided view over ``shape``, its LX view) for an affine access of a window, or (None, None)."""
        if self.memo is None:
            return self._find_window(ops, index, tile, shape)
        key = ("window", index, tuple(shape), ops[0].lx, ops[0].base)
        found = self.memo.get(key)
        if found is None:
            found = self.memo[key] = self._find_window(ops, index, tile, shape)
        return found

    def _find_window(self, ops: list[Operand], index: sympy.Expr, tile: Tile, shape: Sequence[int]) -> tuple[Any, Any]:
        aff = tile.affine(index)
        if aff is None or any(c < 0 for c in aff[1]):
            return None, None
        start, coeffs = aff
        lx = ops[0].lx
        n = lx.sizes[0]
        if self.batched:
            if any(o.lx != lx for o in ops):
                raise _NotBatchable()
            rel_all = start - torch.tensor([o.base for o in ops], dtype=torch.int64)
            if bool((rel_all != rel_all[0]).any()):
                return None, None  # each core reads its own part of the window: a batched gather
            rel = int(rel_all[0])
            inner = shape[1:]
        else:
            rel = int(start) - ops[0].base
            inner = shape
        last = rel + sum(c * (k - 1) for c, k in zip(coeffs, inner) if k > 0)
        if rel < 0 or last >= n:
            return None, None
        strides = [c if k > 1 else 0 for c, k in zip(coeffs, inner)]
        sub = Lx(lx.addr + rel * lx.itemsize, lx.dtype, tuple(inner), tuple(strides))
        return self.ex.card.view(self.where, sub), sub

    def _gather_idx(self, ops: list[Operand], name: str, index: sympy.Expr, tile: Tile, keep: bool,
                    mask: torch.Tensor | None, shape: Sequence[int]) -> torch.Tensor:
        if self.memo is None:
            return self._find_gather_idx(ops, name, index, tile, keep, mask, shape)
        # A tile-constant mask is the same tensor every launch (evaluate's memo);
        # one computed from data is new each time and misses.
        if self._data_indexed(index):
            return self._find_gather_idx(ops, name, index, tile, keep, mask, shape)
        key = ("gather", index, keep, tuple(shape), ops[0].lx, ops[0].base)
        found = self.memo.get(key)
        if found is None or found[0] is not mask:
            found = self.memo[key] = (mask, self._find_gather_idx(ops, name, index, tile, keep, mask, shape))
        return found[1]

    def _find_gather_idx(self, ops: list[Operand], name: str, index: sympy.Expr, tile: Tile, keep: bool,
                         mask: torch.Tensor | None, shape: Sequence[int]) -> torch.Tensor:
        idx = tile.indices(index, keep=keep).expand(tuple(shape))
        if self.batched:
            bases = torch.tensor([o.base for o in ops], dtype=torch.int64).view(-1, *[1] * (len(shape) - 1))
            idx = idx - bases
        else:
            idx = idx - ops[0].base
        n = ops[0].lx.sizes[0]
        if mask is None and (idx.numel() == 0 or (int(idx.amin()) >= 0 and int(idx.amax()) < n)):
            return idx
        bad = (idx < 0) | (idx >= n)
        if mask is not None:
            m = mask.bool().expand(tuple(shape))
            bad = bad & m
            idx = torch.where(m, idx, torch.zeros((), dtype=idx.dtype))
        if bool(bad.any()):
            raise self._fail("read outside its LX window", name,
                             f"element {int(idx[bad].flatten()[0]) + ops[0].base} not in the window of {n} at {ops[0].base}")
        return idx

    def _flat_window(self, ops: list[Operand]) -> tuple[torch.Tensor, torch.Tensor]:
        lx = ops[0].lx
        if self.batched and any(o.lx != lx for o in ops):
            raise _NotBatchable()
        return self.ex.card.view(self.where, lx), self.ex.card.element_stamps(self.where, lx)

    def load(self, pos: int, name: str, index: sympy.Expr, tile: Tile, mask: torch.Tensor | None) -> torch.Tensor:
        if pos in self.targets:  # address generation: record the DRAM index, value not needed
            self._record_target(pos, index, tile, mask)
            return torch.zeros((), dtype=torch_dtype(self.ex.dtypes.get(name, "float32")))
        fast = self.fast if REPLAY_COMPILED else None
        if fast is not None:
            hit = fast.get(pos)
            if hit is not None and hit[0] is mask:
                return hit[1]()
        read = self._reader(pos, name, index, tile, mask)
        if fast is not None and not self._data_indexed(index):
            fast[pos] = (mask, read)
        return read()

    def _data_indexed(self, index: sympy.Expr) -> bool:
        """Whether ``index`` goes through a value read from data (an ``indirect``):
        its reader must not be kept from one launch to the next."""
        return bool(sidx.free_symbols(index) & data_index_symbols(self.kernel.body))

    def _reader(self, pos: int, name: str, index: sympy.Expr, tile: Tile,
                mask: torch.Tensor | None) -> Callable[[], torch.Tensor]:
        """How the load at ``pos`` reads (its checks done now): a view of LX, or a
        gather through kept indices."""
        ops = self.ops.get(pos)
        if ops is None:
            if self.targets:
                return lambda: torch.zeros((), dtype=torch_dtype(self.ex.dtypes.get(name, "float32")))
            raise self._fail("missing operand", name, f"load at body position {pos} has no LX operand")
        shape = list(tile.shape)
        op = ops[0]
        if op.kind == "tile":
            if self.batched and any(o.lx != op.lx for o in ops):
                raise _NotBatchable()
            if list(op.lx.sizes) != shape[tile.lead:]:
                raise self._fail("operand shape mismatch", name, f"LX tile {list(op.lx.sizes)} for tile {shape}")
            view = self.ex.card.view(self.where, op.lx)
            self.ex.check_written(self.where, op.lx, self.step, name, mask)
            return lambda: view
        view, sub = self._window(ops, name, index, tile, shape)
        if view is not None:
            self.ex.check_written(self.where, sub, self.step, name, mask)
            return lambda: view
        flat, stamps = self._flat_window(ops)
        idx = self._gather_idx(ops, name, index, tile, False, mask, shape)
        if self.ex.checking:
            written = (stamps == self.ex.epoch).all(-1)
            ok = written.gather(-1, idx.reshape(idx.shape[0], -1)).reshape(idx.shape) if self.batched \
                else written.take(idx)
            if mask is not None:
                ok = ok | ~mask.bool().expand(tuple(shape))
            if not bool(ok.all()):
                raise self._fail("read of unwritten LX", name, f"window element {int(idx[~ok].flatten()[0])}")
        if self.batched:
            rows = idx.reshape(idx.shape[0], -1)
            return lambda: flat.gather(-1, rows).reshape(idx.shape)
        return lambda: flat.take(idx)

    def _record_target(self, pos: int, index: sympy.Expr, tile: Tile, mask: torch.Tensor | None,
                       keep: bool = False) -> None:
        lx = self.targets[pos]
        shape = tile.keep_shape() if keep else list(tile.shape)
        idx = tile.indices(index, keep=keep).expand(tuple(shape))
        if mask is not None:
            idx = torch.where(mask.bool().expand(tuple(shape)), idx, torch.full((), -1, dtype=torch.int64))
        out = self.ex.card.view(self.where, lx)
        out.copy_(idx.reshape(out.shape))
        self.ex.mark(self.where, lx)

    def store(self, pos: int, name: str, index: sympy.Expr, value: torch.Tensor, tile: Tile, reduced: bool,
              mode: str | None) -> None:
        if pos in self.targets:
            self._record_target(pos, index, tile, None, keep=reduced)
            return
        if self.targets:
            return  # address generation stores nothing
        fast = self.fast if REPLAY_COMPILED else None
        write = fast.get(pos) if fast is not None else None
        if write is None:
            write = self._writer(pos, name, index, tile, reduced, mode)
            if fast is not None:
                fast[pos] = write
        write(value)

    def _writer(self, pos: int, name: str, index: sympy.Expr, tile: Tile, reduced: bool,
                mode: str | None) -> Callable[[torch.Tensor], None]:
        """How the store at ``pos`` writes a value: into a view of LX, or scattered
        through kept indices; LX stamped as written when the launch is checked."""
        ops = self.ops.get(pos)
        if ops is None:
            raise self._fail("missing operand", name, f"store at body position {pos} has no LX operand")
        shape = tile.keep_shape() if reduced else list(tile.shape)
        op = ops[0]
        dt = torch_dtype(op.lx.dtype)
        size = tuple(shape)
        checking = self.ex.checking

        def cast(value: torch.Tensor) -> torch.Tensor:
            v = torch.as_tensor(value)
            v = v if v.dtype == dt else v.to(dt)
            return v if v.shape == size else v.expand(size)
        if op.kind == "tile":
            if self.batched and any(o.lx != op.lx for o in ops):
                raise _NotBatchable()
            if list(op.lx.sizes) != shape[tile.lead:]:
                raise self._fail("operand shape mismatch", name, f"LX tile {list(op.lx.sizes)} for tile {shape}")
            # One LX element per tile point: an accumulating store's adding
            # happens in DRAM (DmaScatter/DmaStore with accumulate).
            view, sub = self.ex.card.view(self.where, op.lx), op.lx
        else:
            view, sub = (None, None) if mode == "atomic_add" else self._window(ops, name, index, tile, shape)
        if view is not None:
            def write_view(value: torch.Tensor) -> None:
                view.copy_(cast(value))
                if checking:
                    self.ex.mark(self.where, sub)
            return write_view
        flat, stamps = self._flat_window(ops)
        idx = self._gather_idx(ops, name, index, tile, reduced, None, shape)
        add = mode == "atomic_add"
        if self.batched:
            rows = idx.reshape(idx.shape[0], -1)
            st = stamps.reshape(stamps.shape[0], -1, stamps.shape[-1])
            st_rows = rows.unsqueeze(-1).expand(-1, -1, st.shape[-1])

            def scatter_rows(value: torch.Tensor) -> None:
                v = cast(value).reshape(rows.shape)
                flat.scatter_add_(-1, rows, v) if add else flat.scatter_(-1, rows, v)
                if checking:
                    st.scatter_(1, st_rows, torch.full((), self.ex.epoch, dtype=torch.uint8).expand(st_rows.shape))
            return scatter_rows
        at = (idx.reshape(-1),)

        def scatter(value: torch.Tensor) -> None:
            flat.index_put_(at, cast(value).reshape(-1), accumulate=add)
            if checking:
                stamps[at[0]] = self.ex.epoch
        return scatter


# ------------------------------------------------------------------ execution

#: The data-moving instruction kinds and the method of :class:`_Execution` that runs each.
_HANDLERS: dict[type, str] = {DmaLoad: "dma_load", DmaStore: "dma_store", DmaGather: "dma_gather",
                              DmaScatter: "dma_scatter", RingSend: "ring_send", RingRecv: "ring_recv",
                              AddrGen: "addr_gen", Combine: "combine"}


class _Execution:
    """One launch of one program."""

    def __init__(self, p: Program, card: Card, buffers: MutableMapping[str, torch.Tensor],
                 sizes: Mapping[sympy.Symbol, int], checking: bool, pe_threads: int = 1) -> None:
        self.p, self.card, self.buffers, self.checking = p, card, buffers, checking
        self.m = card.machine
        self.sizes = dict(sizes)
        self.sizes.update({sidx.index_symbol(k): v for k, v in p.sizes})
        self.dtypes = buffer_dtypes(p)
        self.epoch = card.epoch
        self.mailbox: dict[tuple[int, int], torch.Tensor] = {}
        self.dynamic_bytes: dict[tuple[int, int], int] = {}
        self.dyn_writes: dict[str, list[tuple[int, int, torch.Tensor]]] = defaultdict(list)
        self.dyn_reads: dict[str, list[tuple[int, int, torch.Tensor]]] = defaultdict(list)
        self.core_epoch: dict[int, int] = defaultdict(int)
        #: the steps executed so far, as replayable thunks (an unchecked recording launch)
        self.record: list[rp.Thunk] | None = None
        self.pe_threads = pe_threads
        #: ring messages a recording launch copies from the sender's LX: (tag, receiver) -> (sender, view)
        self.direct: dict[tuple[int, int], tuple[int, Lx]] = {}

    # ---------------------------------------------------------- LX bookkeeping
    def check_written(self, where: Where, lx: Lx, step: int, name: str,
                      mask: torch.Tensor | None) -> None:
        """Every byte of ``lx`` (where ``mask`` is set) was written in this launch."""
        if not self.checking or lx.numel == 0:
            return
        st = self.card.stamps(where, lx)
        # Every byte stamped now (masked lanes included) ends the check. amax of
        # the bitwise complement is the fast way to a uint8 minimum on strided views.
        if 255 - int((~st).amax()) == self.epoch == int(st.amax()):
            return
        st = self.card.element_stamps(where, lx)
        ok = (st == self.epoch).all(-1)
        if mask is not None:
            ok = ok | ~mask.bool().expand(ok.shape)
        if bool(ok.all()):
            return
        held = int(st.amax()) == HELD
        bad = (~ok).nonzero()[0].tolist()
        core = core_range(where)[bad[0]] if not isinstance(where, int) else where
        raise EmulatorError("read of unwritten LX", self.p.name, core, step, name,
                            f"{lx.dtype} element {bad[-1] if bad else 0} of the LX view at {lx.addr}"
                            + (" holds another kernel's data" if held else " was never written in this launch"))

    def mark(self, where: Where, lx: Lx) -> None:
        """Stamp ``lx``'s bytes as written now (it must not overwrite data held for a later kernel)."""
        if lx.numel == 0 or not self.checking:
            return
        st = self.card.stamps(where, lx)
        if self.checking and int(st.amax()) == HELD:
            core = where if isinstance(where, int) else where[0]
            raise EmulatorError("overwrites held LX data", self.p.name, core, -1, "-",
                                f"LX bytes at {lx.addr} hold data an earlier kernel left for a later one")
        st.fill_(self.epoch)

    # ---------------------------------------------------------- DMA
    def _dram(self, name: str) -> torch.Tensor:
        return self.buffers[name]

    def dma_load(self, core: int, step: int, ins: DmaLoad) -> None:
        put(self.card.view(core, ins.dst), rp.region(self.buffers, ins.src))
        self.mark(core, ins.dst)

    def dma_store(self, core: int, step: int, ins: DmaStore) -> None:
        self.check_written(core, ins.src, step, ins.dst.buffer, None)
        rp.write_dram(rp.region(self.buffers, ins.dst), self.card.view(core, ins.src), ins.accumulate)

    def _addresses(self, core: int, step: int, ins: DmaGather | DmaScatter) -> tuple[torch.Tensor, torch.Tensor]:
        self.check_written(core, ins.addrs, step, ins.buffer, None)
        idx = self.card.view(core, ins.addrs).reshape(-1).clone()
        live = idx >= 0
        n = self._dram(ins.buffer).numel()
        if bool(((idx >= n) & live).any()):
            raise EmulatorError("DMA outside a tensor's bytes", self.p.name, core, step, ins.buffer,
                                f"element {int(idx[(idx >= n) & live][0])} of {n}")
        isz = self._dram(ins.buffer).element_size()
        marks = StickMarks(n * isz + self.m.stick_bytes, self.m.stick_bytes)
        marks.add_indices(idx[live], isz)
        self.dynamic_bytes[(core, step)] = marks.count() * self.m.stick_bytes
        if self.checking and bool(live.any()):
            lo, hi = int(idx[live].min()), int(idx[live].max())
            if (hi - lo + 1) * isz > self.m.span_bytes_per_core:
                raise EmulatorError("per-core span exceeded", self.p.name, core, step, ins.buffer,
                                    f"{(hi - lo + 1) * isz} B > {self.m.span_bytes_per_core} B")
        return idx, live

    def dma_gather(self, core: int, step: int, ins: DmaGather) -> None:
        idx, live = self._addresses(core, step, ins)
        dst = self.card.view(core, ins.dst).reshape(-1)
        dst[live] = self._dram(ins.buffer)[idx[live]]
        st = self.card.element_stamps(core, ins.dst).reshape(dst.numel(), -1)
        st[live] = self.epoch
        if self.checking:
            self.dyn_reads[ins.buffer].append((core, self._epoch_of(core), idx[live]))

    def dma_scatter(self, core: int, step: int, ins: DmaScatter) -> None:
        idx, live = self._addresses(core, step, ins)
        self.check_written(core, ins.src, step, ins.buffer, None)
        src = self.card.view(core, ins.src).reshape(-1)
        self._dram(ins.buffer).index_put_((idx[live],), src[live], accumulate=ins.accumulate)
        if self.checking and not ins.accumulate:
            self.dyn_writes[ins.buffer].append((core, self._epoch_of(core), idx[live]))

    # ---------------------------------------------------------- ring
    def ring_send(self, core: int, step: int, ins: RingSend) -> None:
        self.check_written(core, ins.src, step, "ring", None)
        data = self.card.view(core, ins.src).clone()
        for peer in ins.peers:
            if (ins.tag, peer) in self.mailbox:
                raise EmulatorError("ring tag reused", self.p.name, core, step, "ring", f"#{ins.tag} to core {peer}")
            self.mailbox[(ins.tag, peer)] = data

    def _received(self, core: int, step: int, ins: RingRecv) -> torch.Tensor:
        data = self.take((ins.tag, core))
        if data.numel() != ins.dst.numel or data.dtype != torch_dtype(ins.dst.dtype):
            raise EmulatorError("ring size mismatch", self.p.name, core, step, "ring",
                                f"#{ins.tag}: {data.numel()} {data.dtype} sent, {ins.dst.numel} {ins.dst.dtype} expected")
        return data

    def ring_recv(self, core: int, step: int, ins: RingRecv) -> None:
        put(self.card.view(core, ins.dst), self._received(core, step, ins))
        self.mark(core, ins.dst)

    def _batched_recv(self, group: list[tuple[int, int, Instruction]]) -> None:
        """Receives into the same LX view of consecutive cores: one copy (one
        stacked or broadcast source: a send to many peers is one tensor)."""
        data = [self._received(c, step, ins) for c, step, ins in group]  # type: ignore[arg-type]
        where = where_of([g[0] for g in group])
        dst = group[0][2].dst  # type: ignore[union-attr]
        rp.deliver(self.card.view(where, dst), dst.sizes, data)
        self.mark(where, dst)

    # ---------------------------------------------------------- compute
    def _tile(self, ins: Vec | AddrGen | Combine, kernel: LoopKernel, starts: torch.Tensor | None = None,
              bind: Sequence[tuple[str, int]] = ()) -> Tile:
        sizes = dict(self.sizes)
        sizes.update({sidx.index_symbol(k): v for k, v in bind})
        red = ins.red if isinstance(ins, (Vec, AddrGen)) else None
        return Tile(kernel, ins.box, sizes, red=red, batch_starts=starts)

    def vec(self, cores: list[int], steps: list[int], instrs: list[Vec], kept: list[Any] | None = None) -> None:
        """Run a group of vector steps: batched over its cores when their operands
        allow one view, else core by core. ``kept`` (a replayed step's slot) keeps
        the memories and tiles built here for the next launch."""
        ins = instrs[0]
        kernel = self.p.bodies[ins.body]
        if len(cores) > 1 and (kept is None or kept[0] != "single"):
            where = where_of(cores)
            validated = kept is not None and kept[0] == "batched"
            if validated:
                mem, tile = kept[1]
                mem.ex = self
            else:
                starts = torch.tensor([[lo for lo, _ in v.box] + [lo for lo, _ in (v.red or ())] +
                                       ([0] * len(kernel.reduction_ranges) if v.red is None else [])
                                       for v in instrs], dtype=torch.int64)
                mem = _LxMemory(self, where, [v.operands for v in instrs], steps[0], kernel)
                tile = self._tile(ins, kernel, starts, ins.bind)
            try:
                self._run_vec(where, steps[0], ins, kernel, mem, tile, batched=None if validated else instrs)
                if kept is not None and not validated:
                    mem.memo, mem.values, mem.fast = {}, {}, {}
                    kept[:] = ["batched", (mem, tile)]
                return
            except _NotBatchable:
                pass
        if kept is not None and kept[0] == "single":
            parts = kept[1]
        else:
            parts = [(core, step, v, _LxMemory(self, core, v.operands, step, kernel), self._tile(v, kernel, None, v.bind))
                     for core, step, v in zip(cores, steps, instrs)]
            if kept is not None:
                for part in parts:
                    part[3].memo, part[3].values, part[3].fast = {}, {}, {}
                kept[:] = ["single", parts]
        for core, step, v, mem, tile in parts:
            mem.ex = self
            self._run_vec(core, step, v, kernel, mem, tile)

    def _run_vec(self, where: Where, step: int, ins: Vec, kernel: LoopKernel, mem: _LxMemory,
                 tile: Tile, batched: list[Vec] | None = None) -> None:
        if batched is not None:
            self._prevalidate(mem)
        try:
            if mem.fast is not None and REPLAY_COMPILED:  # a replayed step: compiled on its first replay, then rerun
                if mem.plan is None:
                    mem.plan = compile_evaluation(kernel, mem, tile, phase=ins.phase, memo=mem.values)
                partials = mem.plan()
            else:
                partials = evaluate(kernel, mem, tile, phase=ins.phase, memo=mem.values)
        except KernelFault as exc:
            raise EmulatorError("kernel fault", self.p.name, where if isinstance(where, int) else where[0], step,
                                "-", str(exc)) from None
        for pos, comps in ins.partials:
            state = partials[pos]
            for value, lx in zip(state, comps):
                put(self.card.view(where, lx), value)
                self.mark(where, lx)

    @staticmethod
    def _prevalidate(mem: _LxMemory) -> None:
        """Raise _NotBatchable before any store when the batch's operands are not
        at one LX view on every core."""
        for ops in mem.ops.values():
            if any(o.lx != ops[0].lx for o in ops):
                raise _NotBatchable()

    def addr_gen(self, core: int, step: int, ins: AddrGen) -> None:
        kernel = self.p.bodies[ins.body]
        targets = dict(ins.targets)
        only = index_cone(kernel.body, tuple(sorted(targets)))
        mem = _LxMemory(self, core, ins.operands, step, kernel, targets=targets)
        try:
            evaluate(kernel, mem, self._tile(ins, kernel, None, ins.bind), only=only)
        except KernelFault as exc:
            raise EmulatorError("kernel fault", self.p.name, core, step, "-", str(exc)) from None
        missing = set(targets) - set(only)
        if missing:
            raise EmulatorError("missing operand", self.p.name, core, step, "-", f"no access at {sorted(missing)}")

    def combine(self, core: int, step: int, ins: Combine) -> None:
        kernel = self.p.bodies[ins.body]
        tile = self._tile(ins, kernel)
        keep = tile.keep_shape()
        reduced: dict[int, Any] = {}
        for pos, chunks in ins.partials:
            red = kernel.body[pos]
            states = []
            for comps in chunks:
                vals = []
                for lx in comps:
                    self.check_written(core, lx, step, "partials", None)
                    vals.append(self.card.view(core, lx).reshape(keep))
                states.append(tuple(vals))
            if len(states[0]) != len(partial_dtypes(red)):
                raise EmulatorError("partials mismatch", self.p.name, core, step, "partials",
                                    f"{len(states[0])} components for a {red.args[2]} reduction")
            if ins.into:
                reduced[pos] = merge_partials(red.args[2], states)
            else:
                reduced[pos] = combine_partials(red.args[2], states, torch_dtype(red.args[0]))
        if ins.into:
            for pos, comps in ins.into:
                for value, lx in zip(reduced[pos], comps):
                    put(self.card.view(core, lx), value)
                    self.mark(core, lx)
            return
        mem = _LxMemory(self, core, ins.operands, step, kernel)
        evaluate(kernel, mem, tile, phase="finish", reduced=reduced)

    def pe(self, cores: list[int], steps: list[int], instrs: list[Pe]) -> None:
        ins = instrs[0]
        where = where_of(cores)
        for x in (ins.a, ins.b) + ((ins.acc,) if ins.accumulate else ()):
            self.check_written(where, x, steps[0], "pe operand", None)
        rp.matmul(self.card.view(where, ins.a), self.card.view(where, ins.b), self.card.view(where, ins.acc),
                  ins.accumulate, self.pe_threads)
        self.mark(where, ins.acc)

    def _epoch_of(self, core: int) -> int:
        return self.core_epoch.get(core, 0)

    # ---------------------------------------------------------- the rounds
    def _rounds(self, inbox: Any) -> Iterator[list[tuple[int, int, Instruction]]]:
        """The round schedule: each round, every core whose next step can start;
        yields its batches, which the caller must run (or account for: a ring
        receive can start once ``(tag, core)`` is in ``inbox``) before resuming."""
        streams = {c.core: c.instrs for c in self.p.cores if c.instrs}
        pcs = {c: 0 for c in streams}
        members: dict[int, set[int]] = defaultdict(set)
        for c, s in streams.items():
            for ins in s:
                if isinstance(ins, Barrier):
                    members[ins.tag].add(c)
        waiting: dict[int, set[int]] = defaultdict(set)
        while pcs:
            runnable: list[tuple[int, int, Instruction]] = []
            for c, pc in pcs.items():
                ins = streams[c][pc]
                if isinstance(ins, RingRecv) and (ins.tag, c) not in inbox:
                    continue
                if isinstance(ins, Barrier):
                    waiting[ins.tag].add(c)
                    continue
                runnable.append((c, pc, ins))
            released = [t for t, cs in waiting.items() if cs and cs >= members[t]]
            for t in released:
                for c in waiting.pop(t):
                    pcs[c] += 1
                    self.core_epoch[c] += 1
            if not runnable and not released:
                stuck = ", ".join(f"core {c} at step {pc} ({describe(streams[c][pc], self.p.bodies)[0]})"
                                  for c, pc in list(pcs.items())[:4])
                raise EmulatorError("deadlock", self.p.name, next(iter(pcs)), pcs[next(iter(pcs))], "-",
                                    f"no core can proceed: {stuck}")
            for group in _batches(runnable):
                yield group
                for c, pc, _ in group:
                    pcs[c] = pc + 1
            for c in [c for c, pc in pcs.items() if pc >= len(streams[c])]:
                del pcs[c]

    def run(self) -> None:
        """Run the program round by round (a recording launch: in dependence levels)."""
        if self.record is not None:
            for group in self._levelled():
                self._execute(group)
        else:
            for group in self._rounds(self.mailbox):
                self._execute(group)
        self._check_mailbox()
        if self.checking:
            self._dynamic_races()

    def _levelled(self) -> list[list[tuple[int, int, Instruction]]]:
        """The program's steps regrouped by dependence level (see :mod:`.regroup`),
        from the round order, which the program's own synchronisation makes valid."""
        order: list[tuple[int, int, Instruction]] = []
        inbox: set[tuple[int, int]] = set()
        for group in self._rounds(inbox):
            for c, _, ins in group:
                if isinstance(ins, RingSend):
                    inbox.update((ins.tag, peer) for peer in ins.peers)
                elif isinstance(ins, RingRecv):
                    inbox.discard((ins.tag, c))
            order.extend(group)
        self.core_epoch.clear()
        numels = {k: v.numel() for k, v in self.buffers.items()}
        lvls = regroup.levels(order, self.p.bodies, self.m, numels, regroup.aliasing(self.buffers), self.direct)

        def signature(item: tuple[int, int, Instruction]) -> Any:
            c, _, ins = item
            src = self.direct.get((ins.tag, c)) if isinstance(ins, RingRecv) else None
            return ("direct", ins.dst, src[1]) if src else _signature(ins)

        def shape(item: tuple[int, int, Instruction]) -> Any:
            c, _, ins = item
            if isinstance(ins, RingRecv):
                src = self.direct.get((ins.tag, c))
                return ("copy", _lx_shape(ins.dst), _lx_shape(src[1])) if src and _gatherable(ins.dst, src[1]) else None
            if isinstance(ins, DmaLoad) and self._dram_gatherable(ins.src, ins.dst):
                return ("load", ins.src.buffer, ins.src.sizes, ins.src.strides, _lx_shape(ins.dst))
            if isinstance(ins, DmaStore) and not ins.accumulate and self._dram_gatherable(ins.dst, ins.src) \
                    and _disjoint(ins.dst.sizes, ins.dst.strides):
                return ("store", ins.dst.buffer, ins.dst.sizes, ins.dst.strides, _lx_shape(ins.src))
            return None

        return regroup.regroup(order, lvls, signature, shape)

    def _dram_gatherable(self, r: Region, lx: Lx) -> bool:
        """Whether DMA between ``r`` and ``lx`` copies bits (same dtype, no
        conversion) over non-negative strides, so it can run gathered."""
        buf = self.buffers.get(r.buffer)
        return buf is not None and buf.dtype == torch_dtype(lx.dtype) and min(r.strides, default=0) >= 0 \
            and _gatherable(lx, lx)

    def replay(self, thunks: Sequence[rp.Thunk]) -> None:
        """Run a recorded launch's steps in their order (unchecked launches only)."""
        for step in thunks:
            step(self)
        self._check_mailbox()

    def take(self, key: tuple[int, int]) -> torch.Tensor:
        """The ring message ``key`` (tag, receiving core), removed from the mailbox."""
        data = self.mailbox.pop(key, None)
        if data is None:
            raise EmulatorError("ring receive before its send", self.p.name, key[1], -1, "ring",
                                f"#{key[0]}: the recorded steps are out of order")
        return data

    def _check_mailbox(self) -> None:
        if self.mailbox:
            (tag, peer), _ = next(iter(self.mailbox.items()))
            raise EmulatorError("ring send without receive", self.p.name, peer, -1, "ring",
                                f"#{tag} sent to core {peer}, never received")

    def _execute(self, group: list[tuple[int, int, Instruction]]) -> None:
        if self.record is None:
            self._dispatch(group)
            return
        step = self._thunk(group)
        if step is not None:
            self.record.append(step)
            step(self)

    def _thunk(self, group: list[tuple[int, int, Instruction]]) -> rp.Thunk | None:
        """The group as a replayable step, its LX views resolved now (None: nothing
        to do, a send whose every message is copied by its receiver)."""
        if isinstance(group, regroup.Gathered):
            return self._gathered(group)
        c, _, ins = group[0]
        view = self.card.view
        if isinstance(ins, RingRecv) and (ins.tag, c) in self.direct:
            src = self.direct[(ins.tag, c)][1]
            pairs = [(g[0], self.direct[(g[2].tag, g[0])][0]) for g in group]  # type: ignore[attr-defined]
            grid = _core_grid(pairs)
            if grid is not None:
                shape, (r0, rs), (s0, ss) = grid
                return rp.copy(self.card.grid_view(r0, rs, shape, ins.dst), self.card.grid_view(s0, ss, shape, src))
            runs = [rp.copy(view(where_of([r for r, _ in run]), ins.dst), self._senders([s for _, s in run], src))
                    for run in _even_pairs(pairs)]
            return runs[0] if len(runs) == 1 else rp.sequence(runs)
        if isinstance(ins, RingSend):
            group = [(g[0], g[1], dataclasses.replace(g[2], peers=tuple(  # type: ignore[call-arg, attr-defined]
                p for p in g[2].peers if (g[2].tag, p) not in self.direct))) for g in group]  # type: ignore[attr-defined]
            if not any(g[2].peers for g in group):  # type: ignore[attr-defined]
                return None
        lead = _spacing(group) if len(group) > 1 and isinstance(ins, (DmaLoad, DmaStore)) else None
        if len(group) > 1 and isinstance(ins, (DmaLoad, DmaStore)) and lead is None:
            return rp.sequence([self._thunk([g]) for g in group])
        if len(group) == 1:
            if isinstance(ins, DmaLoad):
                return rp.load(view(c, ins.dst), ins.src)
            if isinstance(ins, DmaStore):
                return rp.store(view(c, ins.src), ins.dst, ins.accumulate)
            if isinstance(ins, RingSend):
                return rp.send(view(c, ins.src), ins.tag, ins.peers)
            if isinstance(ins, RingRecv):
                return rp.recv(view(c, ins.dst), (ins.tag, c))
        if isinstance(ins, Pe):
            where = where_of([g[0] for g in group])
            return rp.pe(view(where, ins.a), view(where, ins.b), view(where, ins.acc), ins.accumulate)
        elif isinstance(ins, DmaLoad) and lead is not None:
            return rp.batched_load(self._lead_view(where_of([g[0] for g in group]), ins.dst, lead), ins.src, lead)
        elif isinstance(ins, DmaStore) and lead is not None:
            return rp.batched_store(self._lead_view(where_of([g[0] for g in group]), ins.src, lead), ins.dst, lead,
                                    ins.accumulate)
        elif isinstance(ins, RingSend):
            return rp.batched_send(view(where_of([g[0] for g in group]), ins.src),
                                   [(g[2].tag, g[2].peers) for g in group])  # type: ignore[union-attr]
        elif isinstance(ins, RingRecv):
            return rp.batched_recv(view(where_of([g[0] for g in group]), ins.dst), ins.dst.sizes,
                                   [(g[2].tag, g[0]) for g in group])  # type: ignore[union-attr]
        if isinstance(ins, Vec):
            cores, steps, instrs = [g[0] for g in group], [g[1] for g in group], [g[2] for g in group]
            kept: list[Any] = [None, None]
            return lambda ex: ex.vec(cores, steps, instrs, kept)
        return lambda ex: ex._dispatch(group)

    def _tiles(self, lx: Lx) -> Any:
        """The card's tiles shaped like ``lx`` at every element offset (see :func:`.replay.tiles`)."""
        return rp.tiles(self.card.bits(lx.itemsize), lx.sizes, lx.strides)

    def _offsets(self, pairs: Sequence[tuple[int, Lx]]) -> Any:
        """Element offsets of (core, view) pairs in the card's flat memory."""
        width = self.m.lx_bytes
        return np.array([(core * width + lx.addr) // lx.itemsize for core, lx in pairs], dtype=np.int64)

    def _gathered(self, group: list[tuple[int, int, Instruction]]) -> rp.Thunk:
        """A :class:`.regroup.Gathered` group as one gather and scatter."""
        ins = group[0][2]
        if isinstance(ins, RingRecv):
            src = [self.direct[(g[2].tag, g[0])] for g in group]  # type: ignore[attr-defined]
            return rp.gathered_copy(self._tiles(ins.dst), self._offsets([(g[0], g[2].dst) for g in group]),  # type: ignore[attr-defined]
                                    self._tiles(src[0][1]), self._offsets(src), (len(group), *ins.dst.sizes))
        if isinstance(ins, DmaLoad):
            return rp.gathered_load(self._tiles(ins.dst), self._offsets([(g[0], g[2].dst) for g in group]),  # type: ignore[attr-defined]
                                    ins.src.buffer, ins.src.sizes, ins.src.strides,
                                    np.array([g[2].src.offset for g in group], dtype=np.int64),  # type: ignore[attr-defined]
                                    (len(group), *ins.dst.sizes))
        assert isinstance(ins, DmaStore)
        return rp.gathered_store(self._tiles(ins.src), self._offsets([(g[0], g[2].src) for g in group]),  # type: ignore[attr-defined]
                                 ins.dst.buffer, ins.dst.sizes, ins.dst.strides,
                                 np.array([g[2].dst.offset for g in group], dtype=np.int64),  # type: ignore[attr-defined]
                                 (len(group), *ins.dst.sizes))

    def _senders(self, cores: list[int], src: Lx) -> torch.Tensor:
        """``src`` on sender cores stepping evenly upward (one sender to many: expanded)."""
        if len(cores) > 1 and cores[0] == cores[1]:
            one = self.card.view(cores[0], src)
            return one.expand((len(cores), *one.shape))
        return self.card.view(where_of(cores), src)

    def _dispatch(self, group: list[tuple[int, int, Instruction]]) -> None:
        c, step, ins = group[0]
        if isinstance(ins, Vec):
            self.vec([g[0] for g in group], [g[1] for g in group], [g[2] for g in group])  # type: ignore[misc]
        elif isinstance(ins, Pe):
            self.pe([g[0] for g in group], [g[1] for g in group], [g[2] for g in group])  # type: ignore[misc]
        elif isinstance(ins, (DmaLoad, DmaStore)) and len(group) > 1 and self._batched_dma(group):
            pass
        elif isinstance(ins, RingRecv) and len(group) > 1:
            self._batched_recv(group)
        else:
            for c, step, ins in group:
                self._one(c, step, ins)

    def _batched_dma(self, group: list[tuple[int, int, Instruction]]) -> bool:
        """Loads (stores) of equal shape into (from) the same LX view of a core
        range, to (from) regions spaced evenly or on a 2-D grid: one strided copy."""
        lead = _spacing(group)
        if lead is None:
            return False
        first = group[0][2]
        where = where_of([g[0] for g in group])
        dram = rp.region(self.buffers, first.src if isinstance(first, DmaLoad) else first.dst, lead)
        if isinstance(first, DmaLoad):
            put(self._lead_view(where, first.dst, lead), dram)
            self.mark(where, first.dst)
        else:
            assert isinstance(first, DmaStore)
            for c, step, ins in group:
                self.check_written(c, ins.src, step, ins.dst.buffer, None)  # type: ignore[union-attr]
            rp.write_dram(dram, self._lead_view(where, first.src, lead), first.accumulate)
        return True

    def _lead_view(self, where: Where, lx: Lx, lead: tuple[tuple[int, int], ...]) -> torch.Tensor:
        """``lx`` over a core range, its core dim split like the DRAM side's ``lead`` dims."""
        return self.card.view(where, lx).unflatten(0, tuple(n for n, _ in lead))

    def _one(self, core: int, step: int, ins: Instruction) -> None:
        handler = _HANDLERS.get(type(ins))
        if handler is None:
            raise EmulatorError("unknown instruction", self.p.name, core, step, "-", repr(ins))
        getattr(self, handler)(core, step, ins)

    def _dynamic_races(self) -> None:
        for buf, writes in self.dyn_writes.items():
            isz = self._dram(buf).element_size()
            by_epoch: dict[int, list] = defaultdict(list)
            for core, epoch, idx in writes:
                by_epoch[epoch].append((core, idx * isz, idx * isz + isz - 1))
            for epoch, items in by_epoch.items():
                hit = overlaps(items) if len({c for c, _, _ in items}) > 1 else None
                if hit:
                    raise EmulatorError("cross-core write conflict", self.p.name, hit[1], -1, buf,
                                        f"cores {hit[0]} and {hit[1]} both scatter to byte {hit[2]}")


def _lx_shape(lx: Lx) -> tuple[str, tuple[int, ...], tuple[int, ...]]:
    """What a gathered step needs equal across its views: dtype, sizes, strides."""
    return lx.dtype, lx.sizes, lx.strides


def _gatherable(dst: Lx, src: Lx) -> bool:
    """Whether a copy from ``src`` to ``dst`` can run gathered: bits copied as
    they are (one dtype), strides non-negative, and no element of the
    destination written twice (a broadcast destination is not)."""
    return dst.dtype == src.dtype and min(src.strides, default=0) >= 0 and \
        _disjoint(dst.sizes, dst.strides) and dst.addr % dst.itemsize == 0 and src.addr % src.itemsize == 0


def _spacing(group: list[tuple[int, int, Instruction]]) -> tuple[tuple[int, int], ...] | None:
    """How a DMA group's DRAM regions lie, as leading (count, offset step) dims
    of one strided view: ``((n, delta),)`` when spaced evenly, or ``((rows, d0),
    (cols, d1))`` when the k-th region is at ``(k // cols) * d0 + (k % cols) * d1``
    (a 2-D tiling spread over a core range); else None. Stores must also not
    overlap: the stacked view must address each element once."""
    regions: list[Region] = [g[2].src if isinstance(g[2], DmaLoad) else g[2].dst for g in group]  # type: ignore[union-attr]
    offs = [r.offset for r in regions]
    n = len(offs)
    found = None
    for cols in _row_lengths(n):
        fit = _grid_strides(offs, cols)
        if fit is not None:
            found = ((n, fit[1]),) if cols == n else ((n // cols, fit[0]), (cols, fit[1]))
            break
    if found is None:
        return None
    if isinstance(group[0][2], DmaStore) and not _disjoint(
            (*(c for c, _ in found), *regions[0].sizes), (*(d for _, d in found), *regions[0].strides)):
        return None
    return found


def _core_grid(pairs: list[tuple[int, int]]) -> tuple[tuple[int, int], tuple[int, tuple[int, int]],
                                                      tuple[int, tuple[int, int]]] | None:
    """(shape, (first receiver, core strides), (first sender, core strides)) when
    the pairs, in order, fill a 2-D grid on which receivers and senders are
    affine (e.g. receivers 4..31 from senders 0..3 repeating: shape (7, 4),
    strides (4, 1) and (0, 1)); else None. Receivers distinct, strides >= 0."""
    n = len(pairs)
    if n < 2 or len({r for r, _ in pairs}) != n:
        return None
    receivers, senders = [r for r, _ in pairs], [c for _, c in pairs]
    for cols in _row_lengths(n):
        rs, ss = _grid_strides(receivers, cols), _grid_strides(senders, cols)
        if rs is not None and ss is not None:
            return (n // cols, cols), (pairs[0][0], rs), (pairs[0][1], ss)
    return None


def _row_lengths(n: int) -> Iterator[int]:
    """Row lengths a sequence of ``n`` items can be laid out in, longest first
    (``n`` itself: one row)."""
    return (d for d in range(n, 1, -1) if n % d == 0)


def _grid_strides(values: Sequence[int], cols: int) -> tuple[int, int] | None:
    """(outer, inner) >= 0 with ``values[k] == values[0] + (k // cols) * outer +
    (k % cols) * inner`` for every k, else None (``outer`` is 0 for one row)."""
    inner = values[1] - values[0]
    outer = values[cols] - values[0] if cols < len(values) else 0
    if inner < 0 or outer < 0 or any(v != values[0] + (k // cols) * outer + (k % cols) * inner
                                     for k, v in enumerate(values)):
        return None
    return outer, inner


def _even_pairs(pairs: list[tuple[int, int]]) -> list[list[tuple[int, int]]]:
    """Split (receiver, sender) pairs, receivers ascending, into runs where both
    cores step evenly (each run: one copy between strided core views)."""
    runs: list[list[tuple[int, int]]] = []
    for pair in pairs:
        run = runs[-1] if runs else None
        if run and pair[1] >= run[-1][1] and (len(run) == 1 or (pair[0] - run[-1][0] == run[1][0] - run[0][0]
                                                                 and pair[1] - run[-1][1] == run[1][1] - run[0][1])):
            run.append(pair)
        else:
            runs.append([pair])
    return runs


def _disjoint(sizes: tuple[int, ...], strides: tuple[int, ...]) -> bool:
    """Whether a strided view addresses no element twice (sufficient test: each
    stride, smallest first, clears the extent of the dims inside it)."""
    extent = 0
    for n, st in sorted(((n, st) for n, st in zip(sizes, strides) if n > 1), key=lambda t: t[1]):
        if st <= extent:
            return False
        extent += st * (n - 1)
    return True


def _signature(ins: Instruction) -> Any:
    if isinstance(ins, Vec):
        return ("vec", ins.body, tuple(b - a for a, b in ins.box), tuple(b - a for a, b in (ins.red or ())),
                ins.phase, ins.bind, ins.partials, tuple((o.pos, o.kind, o.lx) for o in ins.operands))
    if isinstance(ins, Pe):
        return ("pe", ins)
    if isinstance(ins, DmaLoad):
        return ("load", ins.src.buffer, ins.src.sizes, ins.src.strides, ins.dst)
    if isinstance(ins, RingRecv):
        return ("recv", ins.dst)
    if isinstance(ins, RingSend):
        return ("send", ins.src)
    if isinstance(ins, DmaStore):
        return ("store", ins.dst.buffer, ins.dst.sizes, ins.dst.strides, ins.src, ins.accumulate)
    return None


def _batches(runnable: list[tuple[int, int, Instruction]]) -> list[list[tuple[int, int, Instruction]]]:
    """Runs of consecutive cores executing the same step on their own tiles."""
    out: list[list[tuple[int, int, Instruction]]] = []
    for item in sorted(runnable, key=lambda t: t[0]):
        sig = _signature(item[2])
        if out and sig is not None and out[-1][-1][0] == item[0] - 1 and _signature(out[-1][-1][2]) == sig:
            out[-1].append(item)
        else:
            out.append([item])
    return out


def execute(p: Program, buffers: MutableMapping[str, torch.Tensor], card: Card,
            sizes: Mapping[sympy.Symbol, int] | None = None, checking: bool = True,
            replay: Replay | None = None, pe_threads: int = 1) -> RunStats:
    """Run ``p`` on ``card`` over the flat DRAM ``buffers`` (kernel arguments by
    name; the program's workspace is allocated here). ``checking`` off skips the
    LX stamp checks (a program already run once with them); ``pe_threads``: the
    intra-op threads of large PE steps (see :func:`.replay.matmul`); an unchecked launch
    given ``replay`` records its steps there, or replays them once recorded."""
    bufs = dict(buffers)
    for name, dt, numel in p.workspace:
        bufs[name] = torch.full((numel,), float("nan"), dtype=torch_dtype(dt)) if torch_dtype(dt).is_floating_point \
            else torch.zeros(numel, dtype=torch_dtype(dt))
    peaks = {}
    if checking:
        peaks = static_check(p, card.machine, {k: v.numel() for k, v in bufs.items()})
    epoch = card.new_launch() if checking else card.epoch
    for r in p.lx_in:
        lx = r.lx
        st = card.stamps(r.core, lx)
        if checking and not bool((st == HELD).all()):
            raise EmulatorError("read of unwritten LX", p.name, r.core, -1, r.buffer,
                                f"expects {r.buffer}[{r.lo}:{r.hi}] held in LX at {r.addr}; no earlier kernel left it")
        st.fill_(epoch)
    ex = _Execution(p, card, bufs, sizes or {}, checking, pe_threads)
    aliased = regroup.aliasing(bufs) if replay is not None and not checking else frozenset()
    if replay is not None and not checking and replay.ready(card, aliased):
        ex.replay(replay.thunks or ())
    elif replay is not None and not checking:
        ex.record = []
        ex.run()
        replay.card, replay.thunks, replay.aliased = card, ex.record, aliased
    else:
        ex.run()
    for r in p.lx_out:
        card.stamps(r.core, r.lx).fill_(HELD)
    return RunStats(ex.dynamic_bytes, peaks)
