"""Steady-state replay of an executed program: the recorded steps (thunks) and
how a recording launch builds them.

A launch after the checked first one runs the same instructions in the same
order: which steps batch together, when a ring receive's data has arrived and
when a deferred PE chain completes depend only on the program. The first
unchecked launch records each step it executes as a thunk with its LX views
already resolved; later launches run the thunks in order, skipping the round
scheduler and the per-step lookups. Every value still comes from executing
the program's steps: a thunk is the step, not a shortcut around it.

DRAM buffers differ per launch, so thunks look them up by name in the launch's
buffers; LX views are views of the card's memory, stable for the card's life.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from spyre_shims.ops import torch_dtype as _torch_dtype

from spyre_adapter.emulator import grouping
from spyre_adapter.emulator.card import INTS, Where, bits, where_of
from spyre_adapter.model import isa
from spyre_adapter.model.program import Lx, Region

__all__ = ["Replay", "Thunk", "put", "region", "write_dram", "deliver", "load", "batched_load", "store", "batched_store", "send", "batched_send", "recv", "batched_recv", "matmul", "pe", "sequence", "copy",
           "INTS", "bits", "tiles", "gathered_copy", "gathered_load", "gathered_store", "lead_view", "gather_key",
           "gathered", "direct_copy"]

#: One recorded step: run on a launch (the executor's state for one execution).
Thunk = Callable[[Any], None]


@dataclasses.dataclass
class Replay:
    """The recorded steps of one program on one card (kept per program by its
    :class:`~spyre_adapter.emulator.executable.Executable`)."""

    card: Any = None
    thunks: list[Thunk] | None = None
    #: buffers that shared storage in the recorded launch (the steps' order relies on it)
    aliased: frozenset[str] = frozenset()

    def ready(self, card: Any, aliased: frozenset[str] = frozenset()) -> bool:
        """Whether a recording exists for ``card`` and this launch's buffer aliasing."""
        return self.thunks is not None and self.card is card and self.aliased == aliased


def put(out: torch.Tensor, value: torch.Tensor) -> None:
    """Copy ``value`` (same number of elements, any shape and dtype) into ``out``;
    no reshape or cast is dispatched when none is needed (copy_ converts dtypes)."""
    out.copy_(value if value.shape == out.shape else value.reshape(out.shape))


def region(buffers: Any, r: Region, lead: tuple[tuple[int, int], ...] = ()) -> torch.Tensor:
    """The DRAM view of region ``r`` in ``buffers``; with ``lead`` (count, offset
    step) dims, equal regions at those offsets stacked as leading dimensions."""
    return _view(buffers, *_dram(r, lead))


def _view(buffers: Any, name: str, sizes: tuple[int, ...], strides: tuple[int, ...], offset: int) -> torch.Tensor:
    flat = buffers[name]
    return flat.as_strided(sizes, strides, flat.storage_offset() + offset)


def write_dram(dst: torch.Tensor, src: torch.Tensor, accumulate: bool) -> None:
    """A DMA store of the LX view ``src`` into the DRAM view ``dst`` (added when ``accumulate``)."""
    value = src if src.shape == dst.shape else src.reshape(dst.shape)
    if accumulate:
        dst.add_(value)
    else:
        dst.copy_(value)


def deliver(out: torch.Tensor, sizes: tuple[int, ...], data: Sequence[torch.Tensor]) -> None:
    """Receives into one LX view of consecutive cores (``out`` stacks them): one
    copy, broadcast when every core gets the same send."""
    if all(d is data[0] for d in data):
        out.copy_(data[0].reshape(sizes).expand(out.shape))
    else:
        out.copy_(torch.stack(list(data)).reshape(out.shape))


def _dram(r: Region, lead: tuple[tuple[int, int], ...] = ()) -> tuple[str, tuple[int, ...], tuple[int, ...], int]:
    """:func:`region`'s arguments, built once for a recorded step: (buffer, sizes, strides, offset)."""
    return r.buffer, (*(n for n, _ in lead), *r.sizes), (*(d for _, d in lead), *r.strides), r.offset


def _as(view: torch.Tensor, shape: tuple[int, ...]) -> torch.Tensor | None:
    """``view`` as ``shape`` sharing its memory (None when no view can: reshape per launch)."""
    if tuple(view.shape) == shape:
        return view
    try:
        return view.view(shape)
    except RuntimeError:
        return None


def _transposing(strides: tuple[int, ...], dst: torch.Tensor) -> tuple[int, ...] | None:
    """The dim order that puts a DMA source's unit stride last, when the source
    reads across its rows into the destination's rows (a transposed weight
    tile); None for any other load."""
    if len(strides) < 2 or strides[-1] == 1 or 1 not in strides or min(strides) <= 0 or dst.stride()[-1] != 1:
        return None
    return tuple(sorted(range(len(strides)), key=lambda d: -strides[d]))


def _dma_in(dst: torch.Tensor, r: Region, lead: tuple[tuple[int, int], ...]) -> Thunk:
    name, sizes, strides, offset = _dram(r, lead)
    perm = _transposing(strides, dst) if tuple(sizes) == tuple(dst.shape) else None
    if perm is not None:
        # Two passes: the source's rows into a contiguous buffer, then that
        # buffer (small, in cache) transposed into LX; torch's one strided copy
        # of 31 transposed 64x64 fp32 tiles took 4.5x as long.
        sizes_p, strides_p, dst_p = tuple(sizes[d] for d in perm), tuple(strides[d] for d in perm), dst.permute(perm)

        def transposed(ex: Any) -> None:
            src = _view(ex.buffers, name, sizes_p, strides_p, offset)
            dst_p.copy_(torch.empty(sizes_p, dtype=src.dtype).copy_(src))
        return transposed

    def step(ex: Any) -> None:
        put(dst, _view(ex.buffers, name, sizes, strides, offset))
    return step


def _dma_out(src: torch.Tensor, r: Region, lead: tuple[tuple[int, int], ...], accumulate: bool) -> Thunk:
    name, sizes, strides, offset = _dram(r, lead)
    shaped = _as(src, tuple(sizes))

    def step(ex: Any) -> None:
        write_dram(_view(ex.buffers, name, sizes, strides, offset), shaped if shaped is not None else src, accumulate)
    return step


def load(dst: torch.Tensor, r: Region) -> Thunk:
    """DMA a DRAM region into the LX view ``dst``."""
    return _dma_in(dst, r, ())


def batched_load(dst: torch.Tensor, r: Region, lead: tuple[tuple[int, int], ...]) -> Thunk:
    """Equal loads of a core range from regions laid out as ``lead`` (see
    :func:`region`; ``dst`` stacks the cores the same way): one copy."""
    return _dma_in(dst, r, lead)


def store(src: torch.Tensor, r: Region, accumulate: bool) -> Thunk:
    """DMA the LX view ``src`` to a DRAM region (added to it when ``accumulate``)."""
    return _dma_out(src, r, (), accumulate)


def batched_store(src: torch.Tensor, r: Region, lead: tuple[tuple[int, int], ...], accumulate: bool) -> Thunk:
    """Equal stores of a core range to disjoint regions laid out as ``lead``: one copy."""
    return _dma_out(src, r, lead, accumulate)


def batched_send(src: torch.Tensor, messages: Sequence[tuple[int, Sequence[int]]]) -> Thunk:
    """Sends of one LX view by a core range (``src`` stacks them): one snapshot,
    core ``i``'s slice to its ``messages[i]`` (tag, peers)."""
    def step(ex: Any) -> None:
        for data, (tag, peers) in zip(src.clone().unbind(0), messages):
            for peer in peers:
                ex.mailbox[(tag, peer)] = data
    return step


def send(src: torch.Tensor, tag: int, peers: Sequence[int]) -> Thunk:
    """Put a snapshot of ``src`` in each peer's mailbox under ``tag``."""
    def step(ex: Any) -> None:
        data = src.clone()
        for peer in peers:
            ex.mailbox[(tag, peer)] = data
    return step


def recv(dst: torch.Tensor, key: tuple[int, int]) -> Thunk:
    """Take mailbox ``key`` (tag, receiving core) into the LX view ``dst``."""
    def step(ex: Any) -> None:
        put(dst, ex.take(key))
    return step


def batched_recv(out: torch.Tensor, sizes: tuple[int, ...], keys: Sequence[tuple[int, int]]) -> Thunk:
    """Receives into one LX view of consecutive cores (``out`` stacks them)."""
    def step(ex: Any) -> None:
        deliver(out, sizes, [ex.take(k) for k in keys])
    return step


#: Multiply-adds from which a PE step runs on ``threads`` intra-op threads: a
#: step batched over cores. One core's 64x128x64 tile (2^19) split over 2 threads
#: took 91 us against 26 us on one while another process held a core.
THREADED_MACS = 1 << 22


def _gemm(a: torch.Tensor, b: torch.Tensor) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """The product torch.matmul would compute for these ranks, called directly
    (bmm / mm: the same kernels, without matmul's expand and reshape ops)."""
    if a.dim() == b.dim() == 3 and a.shape[0] == b.shape[0]:
        return torch.bmm
    if a.dim() == b.dim() == 2:
        return torch.mm
    return torch.matmul


def _fp32(t: torch.Tensor) -> torch.Tensor:
    return t if t.dtype == torch.float32 else t.to(torch.float32)


def matmul(a: torch.Tensor, b: torch.Tensor, acc: torch.Tensor, accumulate: bool, threads: int = 1) -> None:
    """A PE step on LX views: ``acc (+)= a @ b``, products and sums in fp32; a
    large one (a step batched over many cores) on ``threads`` threads."""
    _pe_step(a, b, acc, accumulate)(threads)


def _pe_step(a: torch.Tensor, b: torch.Tensor, acc: torch.Tensor, accumulate: bool) -> Callable[[int], None]:
    """:func:`matmul` with what depends only on the views decided once: the
    GEMM, the fp32 casts, whether the step is large enough for threads."""
    gemm, big = _gemm(a, b), a.numel() * b.shape[-1] >= THREADED_MACS
    cast = a.dtype != torch.float32 or b.dtype != torch.float32
    finish = acc.add_ if accumulate else acc.copy_

    def run(threads: int) -> None:
        x, y = (_fp32(a), _fp32(b)) if cast else (a, b)
        if big and threads > 1:
            had = torch.get_num_threads()
            torch.set_num_threads(threads)
            try:
                prod = gemm(x, y)
            finally:
                torch.set_num_threads(had)
        else:
            prod = gemm(x, y)
        finish(prod)
    return run


def pe(a: torch.Tensor, b: torch.Tensor, acc: torch.Tensor, accumulate: bool) -> Thunk:
    """A PE step (of one core or a stacked core range) on resolved LX views."""
    run = _pe_step(a, b, acc, accumulate)

    def step(ex: Any) -> None:
        run(ex.pe_threads)
    return step


def sequence(steps: Sequence[Thunk]) -> Thunk:
    """Steps run one after the other (a group with no batched form)."""
    def step(ex: Any) -> None:
        for one in steps:
            one(ex)
    return step


def copy(dst: torch.Tensor, src: torch.Tensor) -> Thunk:
    """A ring message the receiver copies straight from the sender's LX view
    (the sender does not overwrite it before the receive)."""
    def step(ex: Any) -> None:
        put(dst, src)
    return step


# ------------------------------------------------------------------ gathered steps
# Steps of one dependence level with equal shapes but unrelated cores and
# addresses (cores drift apart, double buffers alternate) have no common strided
# view. They run as one gather of every step's source tile and one scatter to
# every step's destination: numpy fancy indexing over a view holding "the tile
# at every start offset" (overlapping, read and written only at the steps'
# offsets). Elements move as integers of their size, so every dtype (bf16 too)
# copies bit for bit. Only copies run gathered: gathering a PE step's operands
# cost as much as the batched matmul saved.

def tiles(flat: np.ndarray, sizes: tuple[int, ...], strides: tuple[int, ...]) -> np.ndarray:
    """``flat``'s tiles of ``sizes``/``strides`` (elements, non-negative) at every
    start offset, as the leading dim of one overlapping view: ``tiles(...)[o]``
    is the tile starting at element ``o``."""
    extent = sum(s * (n - 1) for n, s in zip(sizes, strides)) + 1
    isz = flat.itemsize
    shape, byte_strides = (flat.shape[0] - extent + 1, *sizes), (isz, *(s * isz for s in strides))
    if flat.flags.c_contiguous:  # the direct constructor: a third of as_strided's cost, every launch
        return np.ndarray(shape, flat.dtype, flat, 0, byte_strides)
    return np.lib.stride_tricks.as_strided(flat, shape, byte_strides)


def gathered_copy(dst: np.ndarray, dst_idx: np.ndarray, src: np.ndarray, src_idx: np.ndarray,
                  shape: tuple[int, ...]) -> Thunk:
    """Ring messages copied straight from senders' LX: tile ``src_idx[k]`` of
    ``src`` to tile ``dst_idx[k]`` of ``dst`` (both :func:`tiles` views of the
    card; ``shape``: the gathered tiles as the destination's)."""
    def step(ex: Any) -> None:
        dst[dst_idx] = src[src_idx].reshape(shape)
    return step


def gathered_load(dst: np.ndarray, dst_idx: np.ndarray, buffer: str, sizes: tuple[int, ...],
                  strides: tuple[int, ...], src_idx: np.ndarray, shape: tuple[int, ...]) -> Thunk:
    """DMA loads of equal regions of DRAM ``buffer`` (starting at ``src_idx``) into
    the LX tiles ``dst_idx`` of ``dst``."""
    def step(ex: Any) -> None:
        dst[dst_idx] = tiles(bits(ex.buffers[buffer]), sizes, strides)[src_idx].reshape(shape)
    return step


def gathered_store(src: np.ndarray, src_idx: np.ndarray, buffer: str, sizes: tuple[int, ...],
                   strides: tuple[int, ...], dst_idx: np.ndarray, shape: tuple[int, ...]) -> Thunk:
    """DMA stores (overwriting, regions disjoint) of the LX tiles ``src_idx`` of
    ``src`` to equal regions of DRAM ``buffer`` starting at ``dst_idx``."""
    def step(ex: Any) -> None:
        tiles(bits(ex.buffers[buffer]), sizes, strides)[dst_idx] = src[src_idx].reshape(shape)
    return step


# ------------------------------------------------------------------ building recorded steps
# A recording launch resolves a group's LX views once, into views of the card's
# memory, which stay valid for the card's life. ``ex`` is the recording
# :class:`~spyre_adapter.emulator.execution.Execution`.

def lead_view(card: Any, where: Where, lx: Lx, lead: tuple[tuple[int, int], ...]) -> torch.Tensor:
    """``lx`` over a core range, its core dim split like the DRAM side's ``lead`` dims."""
    return card.view(where, lx).unflatten(0, tuple(n for n, _ in lead))


def gather_key(ex: Any, ins: Any) -> Any:
    """What strided DMA steps must share to run as one gather and scatter (None: they cannot)."""
    moved = isa.transfer(ins)
    if moved is None:
        return None
    r, lx = moved
    if not _dram_gatherable(ex, r, lx):
        return None
    if isa.step(ins).dma == "in":
        return ("load", r.buffer, r.sizes, r.strides, grouping.lx_shape(lx))
    # stores: overwriting, and each element of the stacked regions written once
    if ins.accumulate or not grouping.disjoint(r.sizes, r.strides):
        return None
    return ("store", r.buffer, r.sizes, r.strides, grouping.lx_shape(lx))


def _dram_gatherable(ex: Any, r: Region, lx: Lx) -> bool:
    """Whether DMA between ``r`` and ``lx`` copies bits (same dtype, no
    conversion) over non-negative strides, so it can run gathered."""
    buf = ex.buffers.get(r.buffer)
    return buf is not None and buf.dtype == _torch_dtype(lx.dtype) and min(r.strides, default=0) >= 0 \
        and grouping.gatherable(lx, lx)


def _tiles_of(ex: Any, lx: Lx) -> Any:
    """The card's tiles shaped like ``lx`` at every element offset (see :func:`tiles`)."""
    return tiles(ex.card.bits(lx.itemsize), lx.sizes, lx.strides)


def _offsets(ex: Any, pairs: Sequence[tuple[int, Lx]]) -> Any:
    """Element offsets of (core, view) pairs in the card's flat memory."""
    width = ex.m.lx_bytes
    return np.array([(core * width + lx.addr) // lx.itemsize for core, lx in pairs], dtype=np.int64)


def gathered(ex: Any, group: Sequence[tuple[int, int, Any]]) -> Thunk:
    """A pooled group (:class:`~spyre_adapter.emulator.regroup.Gathered`) as one gather and scatter:
    receives copied from their senders' LX, or strided DMA loads or stores."""
    ins = group[0][2]
    n = len(group)
    if isa.step(ins).sync == "recv":
        src = [ex.direct[(g[2].tag, g[0])] for g in group]
        return gathered_copy(_tiles_of(ex, ins.dst), _offsets(ex, [(g[0], g[2].dst) for g in group]),
                             _tiles_of(ex, src[0][1]), _offsets(ex, src), (n, *ins.dst.sizes))
    r, lx = isa.transfer(ins)  # type: ignore[misc]
    lx_at = _offsets(ex, [(g[0], isa.transfer(g[2])[1]) for g in group])  # type: ignore[index]
    dram_at = np.array([isa.transfer(g[2])[0].offset for g in group], dtype=np.int64)  # type: ignore[index]
    if isa.step(ins).dma == "in":
        return gathered_load(_tiles_of(ex, lx), lx_at, r.buffer, r.sizes, r.strides, dram_at, (n, *lx.sizes))
    return gathered_store(_tiles_of(ex, lx), lx_at, r.buffer, r.sizes, r.strides, dram_at, (n, *r.sizes))


def _senders(ex: Any, cores: list[int], src: Lx) -> torch.Tensor:
    """``src`` on sender cores stepping evenly upward (one sender to many: expanded)."""
    if len(cores) > 1 and cores[0] == cores[1]:
        one = ex.card.view(cores[0], src)
        return one.expand((len(cores), *one.shape))
    return ex.card.view(where_of(cores), src)


def direct_copy(ex: Any, group: Sequence[tuple[int, int, Any]]) -> Thunk:
    """Ring receives whose messages the recording launch copies straight from the
    senders' LX: one copy between core grids, or one per run of evenly spaced cores."""
    c, _, ins = group[0]
    src = ex.direct[(ins.tag, c)][1]
    pairs = [(g[0], ex.direct[(g[2].tag, g[0])][0]) for g in group]
    grid = grouping.core_grid(pairs)
    if grid is not None:
        shape, (r0, rs), (s0, ss) = grid
        return copy(ex.card.grid_view(r0, rs, shape, ins.dst), ex.card.grid_view(s0, ss, shape, src))
    runs = [copy(ex.card.view(where_of([r for r, _ in run]), ins.dst), _senders(ex, [s for _, s in run], src))
            for run in grouping.even_pairs(pairs)]
    return runs[0] if len(runs) == 1 else sequence(runs)
