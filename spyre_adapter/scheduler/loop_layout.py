"""Where a loop-kernel group's operands live on a core, while its program is
built: the division's geometry (rows per core, reduction chunks), each core's
windows and packed tiles in LX, and the operations that place a load or a
store of a kernel on a tile - a *window* (a contiguous run of the buffer's
elements, whole sticks, one DMA; later kernels of the group on the same tile
read it again from LX), a *packed tile* (a strided DRAM region gathered by one
DMA into a dense LX tile), or a *gathered tile* (indices computed on the core by
:class:`~spyre_adapter.model.program.AddrGen`, elements fetched by a gather DMA).
Operands every tile of a core reads alike are loaded once per core, and by one
core for all the cores that need the same bytes.

:mod:`.loop_program` walks the tiles, chunks and phases over this placement.
"""

from __future__ import annotations

import dataclasses
import math
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import sympy
import torch

from spyre_shims import index as sidx
from spyre_shims.kernel_ir import KernelGroup, LoopKernel
from spyre_shims.reference import Tile, concrete, reduction_phases

from spyre_adapter.model import isa
from spyre_adapter.model.bodies import Access, accesses, index_cone, split_dim
from spyre_adapter.model.errors import DoesNotFit
from spyre_adapter.model.machine import Machine
from spyre_adapter.model.program import (AddrGen, Box, DmaGather, DmaLoad, Operand, Region, Resident, RingRecv,
                                         RingSend, itemsize)
from spyre_adapter.scheduler.analysis import _mask_bounds, boxes, row_lead, row_split
from spyre_adapter.scheduler.lx_alloc import Slot, SlotView

__all__ = ["LoopDivision", "Hold", "split_box", "chunk_bounds", "row_ranges", "NeedsPhases", "Placement", "CoreState", "Window"]


#: A load whose whole footprint is at most this share of LX is loaded once per
#: core and kept for every tile (and sent to the other cores needing it).
SHARED_LX_FRACTION = 0.125


class NeedsPhases(DoesNotFit):
    """A kernel of the group reads data no tile-local order provides: the division
    fits only when the group runs in phases (each kernel over every tile in turn)."""


@dataclasses.dataclass(frozen=True)
class LoopDivision:
    """Rows of the group per core, and how each row is cut.

    ``row_cores`` row groups each take a contiguous run of rows in units of
    ``unit`` rows; each row group has ``rsplit`` cores, each running
    ``chunks_per_core`` consecutive chunks of every row's reduction (and of the
    columns of the kernels that follow it). ``tile_rows``: rows per tile.
    A ``grid`` division instead cuts each iteration dimension of a group of
    equal-shaped pointwise kernels into pieces (whole sticks in the innermost),
    one box per core, tiled into boxes of at most ``tile_points`` points."""

    row_cores: int
    rsplit: int = 1
    chunks_per_core: int = 1
    tile_rows: int = 0
    phased: bool = False
    #: per iteration dim, how many pieces (a grid division; rows then unused)
    grid: tuple[int, ...] = ()
    #: grid divisions: iteration points per tile
    tile_points: int = 0

    @property
    def chunks(self) -> int:
        return self.rsplit * self.chunks_per_core

    @property
    def used(self) -> int:
        return math.prod(self.grid) if self.grid else self.row_cores * self.rsplit


# ------------------------------------------------------------------ geometry

@dataclasses.dataclass
class _KernelInfo:
    kernel: LoopKernel
    ranges: tuple[int, ...]
    red: tuple[int, ...]
    mult: int
    split_at: int | None  # reduction phases (None: no split possible)
    lead: int | None  # leading dims whose product is the group's rows

    @property
    def rnumel(self) -> int:
        return math.prod(self.red)


def row_ranges(rows: int, unit: int, cores: int) -> list[tuple[int, int]]:
    """Rows ``[a, b)`` per core: whole units of ``unit`` rows, spread evenly."""
    units = -(-rows // unit)
    out = []
    for c in range(cores):
        a = min(rows, (c * units // cores) * unit)
        b = min(rows, ((c + 1) * units // cores) * unit)
        out.append((a, b))
    return out


def chunk_bounds(n: int, chunks: int, align: int = 128) -> list[int]:
    """Boundaries of ``chunks`` consecutive pieces of ``[0, n)`` on multiples of ``align``."""
    out = [0]
    for j in range(1, chunks):
        out.append(min(n, max(out[-1], (n * j // chunks) // align * align)))
    out.append(n)
    return out


@dataclasses.dataclass(frozen=True)
class Hold:
    """Where a core keeps its share ``[lo, hi)`` of a buffer the program writes,
    for later kernels: LX byte ``addr``; ``store`` also writes it to DRAM."""

    addr: int
    lo: int
    hi: int
    store: bool = True


@dataclasses.dataclass
class Window:
    """A run of a buffer's elements in a core's LX: ``scope`` says how long it
    stays findable ("task", "tile" or "persistent")."""

    buffer: str
    lo: int  # first element held
    hi: int  # one past the last
    view: SlotView
    scope: str = "tile"

    def covers(self, lo: int, hi: int) -> bool:
        return self.lo <= lo and hi <= self.hi


@dataclasses.dataclass
class _Packed:
    """A strided DRAM region gathered into a dense LX tile (``view``: dims in region order)."""

    region: Region
    view: SlotView
    scope: str = "tile"


#: A static footprint spanning over SPARSE_RATIO times the elements it touches,
#: plus SPARSE_SLACK, is gathered element by element rather than loaded as one window.
SPARSE_RATIO, SPARSE_SLACK = 4, 4096


@dataclasses.dataclass
class _Geom:
    kind: str  # "affine" | "static" | "indirect" | "empty"
    lo: int = 0
    hi: int = 0  # one past the last element
    #: elements touched; of a "static" footprint counted only when :func:`sparse`
    #: could hold (else a bound: the tile's index count, at most the span)
    touched: int = 0
    start: int = 0
    coeffs: tuple[int, ...] = ()
    shape: tuple[int, ...] = ()
    #: a masked load's box within the tile: per dim (offset from the tile's start, extent)
    clip: tuple[tuple[int, int], ...] = ()


def _point_geometry(tile: Tile, acc: Access, shape: tuple[int, ...], n: int) -> _Geom:
    """A static footprint from the index evaluated at every point of the tile
    (a masked load's lanes outside the buffer's ``n`` elements dropped)."""
    idx = tile.indices(acc.index, keep=acc.reduced).expand(shape)
    if acc.masked and not acc.store:
        idx = idx[(idx >= 0) & (idx < n)]
        if idx.numel() == 0:
            return _Geom("empty", shape=shape)
    return _static(int(idx.min()), int(idx.max()) + 1, idx.numel(), shape, lambda: int(torch.unique(idx).numel()))


def _static(lo: int, hi: int, points: int, shape: tuple[int, ...], distinct: Callable[[], int]) -> _Geom:
    """A static footprint over [lo, hi) of ``points`` indices: their distinct count
    (``distinct``, which sorts or sums sets) only where :func:`sparse` could hold; a
    span within SPARSE_RATIO times the indices' count cannot be sparse."""
    dense = hi - lo <= SPARSE_RATIO * points + SPARSE_SLACK or points >= 1 << 22
    return _Geom("static", lo, hi, min(points, hi - lo) if dense else distinct(), shape=shape)


def _summed_geometry(tile: Tile, acc: Access, shape: tuple[int, ...], n: int) -> _Geom | None:
    """A static footprint from the index's parts over disjoint variables
    (:meth:`~spyre_shims.reference.Tile.index_terms`), without a value per point:
    the same bounds and count as evaluating every point. None when the index has
    no such parts, or a masked load reaches outside the buffer (those lanes are
    dropped point by point)."""
    terms = tile.index_terms(acc.index, keep=acc.reduced)
    points = math.prod(shape)
    if terms is None or points == 0:
        return None
    const, sets = terms
    lo = const + sum(int(s[0]) for s in sets)
    hi = const + sum(int(s[-1]) for s in sets) + 1
    if acc.masked and not acc.store and (lo < 0 or hi > n):
        return None
    return _static(lo, hi, points, shape, lambda: _sum_count(sets))


def _sum_count(sets: list[torch.Tensor]) -> int:
    """How many distinct sums one value from each sorted set makes. Taken in
    order of their smallest gap, when each set's gap exceeds the span of the
    sums before it every combination is distinct (a mixed radix); else the sums
    are counted."""
    multi = [(int((s[1:] - s[:-1]).min()), s) for s in sets if s.numel() > 1]
    multi.sort(key=lambda gs: gs[0])
    span = 0
    for gap, s in multi:
        if gap <= span:
            break
        span += int(s[-1] - s[0])
    else:
        return math.prod(s.numel() for _, s in multi)
    sums = multi[0][1]
    for _, s in multi[1:]:
        sums = torch.unique((sums[:, None] + s[None, :]).flatten())
    return int(sums.numel())


def sparse(g: _Geom) -> bool:
    """Whether a static footprint is too sparse to load as one window (gather it)."""
    return g.kind == "static" and g.hi - g.lo > SPARSE_RATIO * max(g.touched, 1) + SPARSE_SLACK


class CoreState:
    """One core's stream under construction, with the windows it holds."""

    def __init__(self, core: int) -> None:
        self.core = core
        self.instrs: list[Any] = []
        self.windows: list[Window] = []
        self.previous: list[Window] = []  # the previous tile's windows (their slots are still allocated)
        self.packed: list[_Packed] = []
        self.slots: dict[str, list[Slot]] = {"task": [], "tile": []}
        self.held: dict[str, list[Slot]] = {"task": [], "tile": []}
        self.partials: dict[tuple[Any, ...], tuple[SlotView, ...]] = {}
        self.stored: dict[str, list[tuple[int, int]]] = defaultdict(list)

    def find(self, buffer: str, lo: int, hi: int) -> Window | None:
        """A window holding elements [lo, hi) of ``buffer``: this tile's, or the
        previous tile's (still allocated: it is then kept through this tile too)."""
        for w in reversed(self.windows):
            if w.buffer == buffer and w.covers(lo, hi):
                return w
        for w in reversed(self.previous):
            if w.buffer == buffer and w.covers(lo, hi):
                slot = w.view.slot
                if slot in self.held["tile"]:
                    self.held["tile"].remove(slot)
                    self.slots["tile"].append(slot)
                self.previous.remove(w)
                self.windows.append(w)
                return w
        return None

    def drop(self, buffer: str, lo: int, hi: int) -> None:
        """Forget windows holding stale copies of elements [lo, hi) of ``buffer``."""
        self.windows = [w for w in self.windows if not (w.buffer == buffer and w.lo < hi and lo < w.hi)]
        self.previous = [w for w in self.previous if not (w.buffer == buffer and w.lo < hi and lo < w.hi)]
        self.packed = [x for x in self.packed
                       if not (x.region.buffer == buffer and x.region.bounds()[0] < hi and lo <= x.region.bounds()[1])]

    def stored_covers(self, buffer: str, lo: int, hi: int) -> bool:
        return any(a <= lo and hi <= b for a, b in self.stored.get(buffer, ()))

    def end(self, scope: str) -> None:
        """End a task or a tile: its windows are no longer found, and its slots
        stay allocated until the next one of the same scope ends (so the next
        one's loads overlap this one's compute)."""
        mark = len(self.instrs)
        for s in self.held[scope]:
            s.hold_until = max(s.hold_until, mark)
        self.held[scope] = self.slots[scope]
        self.slots[scope] = []
        drop = {"task"} if scope == "task" else {"task", "tile"}
        if scope == "tile":
            self.previous = [w for w in self.windows if w.scope == "tile"]
        self.windows = [w for w in self.windows if w.scope not in drop]
        self.packed = [x for x in self.packed if x.scope not in drop]


class Placement:
    """A loop group's program being built: its cores, the LX slots and windows of
    each, and where every load and store of a kernel on a tile lives."""

    def __init__(self, group: KernelGroup, m: Machine, sizes: Mapping[sympy.Symbol, int], rows: int, unit: int,
                 mults: Sequence[int], d: LoopDivision, lx_in: Sequence[Resident],
                 keep: Mapping[str, Mapping[int, Hold]], reserved: Mapping[int, Sequence[tuple[int, int]]]) -> None:
        self.group, self.m, self.sizes, self.rows, self.unit, self.d = group, m, dict(sizes), rows, unit, d
        self.stick = m.stick_bytes
        self.dtypes = {b.name: b.dtype for b in group.buffers}
        self.internal = {b.name for b in group.buffers if b.role == "internal"}
        self.numel = {b.name: concrete(b.storage_numel, sizes) for b in group.buffers}
        # a masked load's var bounds, per (kernel body, position): the same for every tile
        self._masks: dict[tuple[int, int], tuple[tuple[str, int, int], ...]] = {}
        self.infos: list[_KernelInfo] = []
        for lk, mult in zip(group.kernels, mults):
            ranges = tuple(concrete(r, sizes) for r in lk.ranges)
            red = tuple(concrete(r, sizes) for r in lk.reduction_ranges)
            lead = row_lead(ranges, rows, mult)
            if lead is None and not red and mult > 1:
                # The rows end inside a dimension (a grouped norm's pointwise
                # kernel over (tokens, groups * width)): iterate it as two.
                split = row_split(ranges, rows)
                if split is not None:
                    lk = split_dim(dataclasses.replace(lk, ranges=tuple(sympy.Integer(r) for r in ranges)), *split)
                    ranges = tuple(int(r) for r in lk.ranges)
                    lead = row_lead(ranges, rows, mult)
            self.infos.append(_KernelInfo(lk, ranges, red, mult, reduction_phases(lk.body) if red else None, lead))
        # the first kernel of the group that stores each buffer
        self.writer: dict[str, int] = {}
        for k, info in enumerate(self.infos):
            for a in accesses(info.kernel.body):
                if a.store:
                    self.writer.setdefault(a.buffer, k)
        self.cores: dict[int, CoreState] = {}
        self.tag = 0
        self.workspace: dict[str, tuple[str, int]] = {}
        self.lx_in = list(lx_in)
        self.keep = keep  # buffer -> core -> Hold: where its stored windows stay for later kernels
        self.held_slots: dict[tuple[str, int], Slot] = {}
        self.lx_out: list[Resident] = []
        self.reserved = reserved
        self.scope = "tile"
        self.kernel_index = 0
        self.invariant: set[tuple[int, int]] = set()  # (kernel, body position) of loads alike on every tile
        self.whole: dict[tuple[int, int], tuple[int, int]] = {}  # of those, loaded whole: element range
        self.core_rows: dict[int, tuple[int, int]] = {}  # rows each core runs (row divisions)

    def core(self, c: int) -> CoreState:
        if c not in self.cores:
            core = self.cores[c] = CoreState(c)
            for r in self.lx_in:
                if r.core == c:
                    slot = Slot(f"{r.buffer}[{r.lo}:{r.hi}] held", (r.hi - r.lo) * itemsize(r.dtype), fixed=r.addr)
                    core.windows.append(Window(r.buffer, r.lo, r.hi, slot.view(r.dtype, (r.hi - r.lo,)),
                                                "persistent"))
        return self.cores[c]

    def next_tag(self) -> int:
        self.tag += 1
        return self.tag

    def slot(self, core: CoreState, name: str, nbytes: int, scope: str | None = None) -> Slot:
        """A slot for an operand: held like ``scope`` ("task"/"tile"), for the
        whole program ("persistent") or until its last use ("none")."""
        s = Slot(name, nbytes)
        scope = scope or self.scope
        if scope == "persistent":
            s.hold_until = 1 << 60
        elif scope in core.slots:
            core.slots[scope].append(s)
        return s

    def dram_name(self, buf: str) -> str:
        """The DRAM buffer holding ``buf`` (an internal one gets workspace)."""
        if buf in self.internal and buf not in self.workspace:
            self.workspace[buf] = (self.dtypes[buf], self.numel[buf])
        return buf

    def geometry(self, info: _KernelInfo, acc: Access, tile: Tile) -> _Geom:
        body = info.kernel.body
        n = self.numel[acc.buffer]
        shape = tuple(tile.keep_shape() if acc.reduced else tile.shape)
        if any(s.name.startswith("v") for s in sidx.free_symbols(acc.index)):
            return _Geom("indirect", shape=shape)
        clip = None
        if acc.masked and not acc.store:
            key = (id(body), acc.pos)
            bounds = self._masks.get(key)
            if bounds is None:
                bounds = self._masks[key] = _mask_bounds(body, body[acc.pos].mask, self.sizes)
            if bounds:
                names = [v.name for v in tile.vars]
                clip = {names.index(v): (lo, hi) for v, lo, hi in bounds if v in names}
        aff = tile.affine(acc.index)
        if aff is not None:
            start, coeffs = int(aff[0]), tuple(aff[1])
            starts = list(tile.starts)
            ext = list(shape)
            if clip:
                for k, (lo, hi) in clip.items():
                    a, b = max(starts[k], lo), min(starts[k] + ext[k], hi)
                    if b <= a:
                        return _Geom("empty", shape=shape)
                    start += coeffs[k] * (a - starts[k])
                    starts[k], ext[k] = a, b - a
            lo = start + sum(c * (e - 1) for c, e in zip(coeffs, ext) if c < 0)
            hi = start + sum(c * (e - 1) for c, e in zip(coeffs, ext) if c > 0) + 1
            touched = math.prod(e for c, e in zip(coeffs, ext) if c != 0)
            if acc.masked and not acc.store:
                lo, hi = max(lo, 0), min(hi, n)
                if hi <= lo:
                    return _Geom("empty", shape=shape)
            sub = tuple((a - s0, e) for a, s0, e in zip(starts, tile.starts, ext)) if clip else ()
            return _Geom("affine", lo, hi, touched, start, coeffs, shape, sub)
        return _summed_geometry(tile, acc, shape, n) or _point_geometry(tile, acc, shape, n)

    def window_bounds(self, buf: str, lo: int, hi: int) -> tuple[int, int]:
        """[lo, hi) widened to whole sticks within the buffer."""
        per = max(1, self.stick // itemsize(self.dtypes[buf]))
        a = lo // per * per
        b = min(self.numel[buf], -(-hi // per) * per)
        return a, max(b, a + 1)

    def load_operand(self, core: CoreState, k: int, acc: Access, g: _Geom) -> Operand:
        buf = acc.buffer
        dt = self.dtypes[buf]
        isz = itemsize(dt)
        if g.kind == "empty":  # every lane masked off: nothing to read
            slot = self.slot(core, f"{buf} masked", self.stick)
            return Operand(acc.pos, "window", slot.view(dt, (self.stick // isz,)), 0)  # type: ignore[arg-type]
        w = core.find(buf, g.lo, g.hi)
        if w is not None:
            return Operand(acc.pos, "window", w.view, w.lo)  # type: ignore[arg-type]
        if not self.d.phased and self.writer.get(buf, 1 << 30) < k and not core.stored_covers(buf, g.lo, g.hi):
            raise NeedsPhases(f"kernel {k} reads {buf}[{g.lo}:{g.hi}] that this tile did not produce", "tile-local order")
        src = self.dram_name(buf)
        span = g.hi - g.lo
        dense = g.kind == "static" or span <= g.touched + 2 * max(1, self.stick // isz) or span * isz <= 4096
        if not dense and g.kind == "affine" and all(c >= 0 for c in g.coeffs):
            region = self.packed_region(src, g)
            hit = next((x for x in reversed(core.packed) if x.region == region), None)
            if hit is not None and (view := self.tile_view(hit, g)) is not None:
                return Operand(acc.pos, "tile", view)  # type: ignore[arg-type]
            packed, view = self.packed(core, buf, g, "in")
            if g.clip:  # a masked load: only its box within the tile is read
                dims = _packed_dims(g)
                region = Region(src, g.start, tuple(g.clip[k][1] for k in dims), tuple(g.coeffs[k] for k in dims))
                offset = sum(g.clip[k][0] * st for k, st in zip(dims, packed.strides))
                packed = packed.sub(offset, region.sizes, packed.strides, itemsize(self.dtypes[buf]))
            else:
                core.packed.append(_Packed(region, packed, self.scope))
            core.instrs.append(DmaLoad(region, packed))  # type: ignore[arg-type]
            return Operand(acc.pos, "tile", view)  # type: ignore[arg-type]
        span = (g.lo, g.hi)
        if (k, acc.pos) in self.whole:
            rows = self.core_rows.get(core.core)
            span = (self.footprint(k, acc, *rows) if rows else None) or self.whole[(k, acc.pos)]
        lo, hi = self.window_bounds(buf, *span)
        scope = "persistent" if (k, acc.pos) in self.invariant else self.scope
        view = self.slot(core, f"{buf}[{lo}:{hi}]", (hi - lo) * isz, scope).view(dt, (hi - lo,))
        core.instrs.append(DmaLoad(Region(src, lo, (hi - lo,), (1,)), view))  # type: ignore[arg-type]
        core.windows.append(Window(buf, lo, hi, view, scope))
        return Operand(acc.pos, "window", view, lo)  # type: ignore[arg-type]

    def packed(self, core: CoreState, buf: str, g: _Geom, what: str) -> tuple[SlotView, SlotView]:
        """A dense LX tile of an affine access's elements, laid out in DRAM order
        (so the DMA moves contiguous runs): (the DMA's view, the tile-shaped view).
        A masked load's box starts on a stick (the tile is shifted to put it there)."""
        dt = self.dtypes[buf]
        isz = itemsize(dt)
        dims = _packed_dims(g)
        numel = math.prod(g.shape[k] for k in dims)
        dense_strides = Slot("", 1).view(dt, tuple(g.shape[k] for k in dims)).strides
        pad = 0
        if g.clip:
            first = sum(g.clip[k][0] * st for k, st in zip(dims, dense_strides)) * isz
            pad = -first % self.stick
        slot = self.slot(core, f"{buf} packed {what}", numel * isz + pad)
        dense = SlotView(slot, pad, dt, tuple(g.shape[k] for k in dims), dense_strides)
        strides = dict(zip(dims, dense.strides))
        return dense, SlotView(slot, pad, dt, g.shape, tuple(strides.get(k, 0) for k in range(len(g.shape))))

    @staticmethod
    def tile_view(hit: _Packed, g: _Geom) -> SlotView | None:
        """A tile-shaped view of an already packed region for an access that reads
        the same elements (each of its dims maps to the region dim of equal stride)."""
        by_stride = {st: k for k, st in enumerate(hit.region.strides)}
        strides = []
        for n, c in zip(g.shape, g.coeffs):
            if c == 0 or n == 1:
                strides.append(0)
            elif c in by_stride and hit.region.sizes[by_stride[c]] == n:
                strides.append(hit.view.strides[by_stride[c]])
            else:
                return None
        return SlotView(hit.view.slot, hit.view.offset, hit.view.dtype, g.shape, tuple(strides))

    @staticmethod
    def packed_region(src: str, g: _Geom) -> Region:
        dims = _packed_dims(g)
        return Region(src, g.start, tuple(g.shape[k] for k in dims), tuple(g.coeffs[k] for k in dims))

    def store_operand(self, core: CoreState, acc: Access,
                      g: _Geom) -> tuple[Operand, tuple[SlotView, Region] | None, SlotView | None]:
        """The LX operand of a store, the DMA that writes it to DRAM, or the
        values a scatter writes (indices computed by an AddrGen)."""
        buf = acc.buffer
        dt = self.dtypes[buf]
        isz = itemsize(dt)
        local = buf in self.internal and not self.d.phased
        numel = math.prod(g.shape)
        hold = self.keep.get(buf, {}).get(core.core)
        if hold is not None:
            if not (g.kind == "affine" and g.hi - g.lo == g.touched and hold.lo <= g.lo and g.hi <= hold.hi):
                raise DoesNotFit(f"{buf} is not stored as one run inside the core's kept share")
            view = self.held(core, buf, hold).sub(g.lo - hold.lo, (g.hi - g.lo,), (1,), isz)
            core.drop(buf, g.lo, g.hi)
            core.windows.append(Window(buf, g.lo, g.hi, view, "persistent"))
            dma = (view, Region(self.dram_name(buf), g.lo, (g.hi - g.lo,), (1,))) if hold.store else None
            return Operand(acc.pos, "window", view, g.lo), dma, None  # type: ignore[arg-type]
        if g.kind == "affine" and not acc.atomic and all(c >= 0 for c in g.coeffs):
            if local or g.hi - g.lo == g.touched:
                # a contiguous run (or a group-internal value): a window, stored in one DMA
                view = self.slot(core, f"{buf}[{g.lo}:{g.hi}] out", (g.hi - g.lo) * isz).view(dt, (g.hi - g.lo,))
                core.drop(buf, g.lo, g.hi)
                core.windows.append(Window(buf, g.lo, g.hi, view, self.scope))
                dma = None if local else (view, Region(self.dram_name(buf), g.lo, (g.hi - g.lo,), (1,)))
                return Operand(acc.pos, "window", view, g.lo), dma, None  # type: ignore[arg-type]
            if g.touched == numel:
                core.drop(buf, g.lo, g.hi)
                dense, view = self.packed(core, buf, g, "out")
                region = self.packed_region(self.dram_name(buf), g)
                core.packed.append(_Packed(region, dense, self.scope))
                return Operand(acc.pos, "tile", view), (dense, region), None  # type: ignore[arg-type]
        if local and not self.d.phased:
            raise NeedsPhases(f"{buf}: an irregular store of a group-internal buffer", "tile-local order")
        view = self.slot(core, f"{buf} scatter", numel * isz).view(dt, g.shape)
        core.drop(buf, 0, self.numel[buf])
        return Operand(acc.pos, "tile", view), None, SlotView(view.slot, 0, dt, (numel,), (1,))  # type: ignore[arg-type]

    def held(self, core: CoreState, buf: str, hold: Hold) -> SlotView:
        """The fixed LX window where this core keeps its share of ``buf``."""
        key = (buf, core.core)
        if key not in self.held_slots:
            dt = self.dtypes[buf]
            slot = Slot(f"{buf}[{hold.lo}:{hold.hi}] kept", (hold.hi - hold.lo) * itemsize(dt), fixed=hold.addr)
            self.held_slots[key] = slot
            self.lx_out.append(Resident(core.core, buf, hold.lo, hold.hi, hold.addr, dt))
        return self.held_slots[key].view(self.dtypes[buf], (hold.hi - hold.lo,))

    def gather(self, core: CoreState, k: int, box: Box, red: Box | None, batch: list[Access],
               operands: dict[int, Operand], tile: Tile) -> None:
        lk = self.infos[k].kernel
        numel = math.prod(tile.shape)
        targets = [(a.pos, self.slot(core, f"addrs {a.buffer}@{a.pos}", numel * 8).view("int64", (numel,)))
                   for a in batch]
        cone = index_cone(lk.body, tuple(a.pos for a in batch))
        gathered = {a.pos for a in batch}
        if any(lk.body[p].op == "load" and p not in operands and p not in gathered for p in cone):
            raise DoesNotFit(f"{lk.name}: an irregular index depends on an operand not yet loaded")
        ops = tuple(o for p, o in sorted(operands.items()) if p in cone)
        core.instrs.append(AddrGen(k, box, red, ops, tuple(targets)))  # type: ignore[arg-type]
        for acc, (_, addrs) in zip(batch, targets):
            dt = self.dtypes[acc.buffer]
            slot = self.slot(core, f"{acc.buffer} gathered", numel * itemsize(dt))
            core.instrs.append(DmaGather(self.dram_name(acc.buffer), addrs, slot.view(dt, (numel,))))  # type: ignore[arg-type]
            operands[acc.pos] = Operand(acc.pos, "tile", slot.view(dt, tuple(tile.shape)))  # type: ignore[arg-type]

    def find_invariant(self) -> None:
        """Loads whose window is the same for the first two units of rows (a
        norm's weight, a bias), or whose whole footprint is small (RoPE's cos
        and sin across heads): loaded once per core and kept."""
        if self.rows <= self.unit or self.d.chunks_per_core > 1:
            return
        for k, info in enumerate(self.infos):
            for acc in accesses(info.kernel.body):
                if acc.store or acc.buffer in self.writer:
                    continue
                whole = self.footprint(k, acc, 0, self.rows)
                if whole is not None and (whole[1] - whole[0]) * itemsize(self.dtypes[acc.buffer]) \
                        <= SHARED_LX_FRACTION * self.m.lx_usable_bytes:
                    self.invariant.add((k, acc.pos))
                    self.whole[(k, acc.pos)] = whole
                    continue
                geo = []
                for r0 in (0, self.unit):
                    bxs = boxes(list(info.ranges), r0 * info.mult, min(self.rows, r0 + self.unit) * info.mult)
                    if len(bxs) != 1:
                        break
                    g = self.geometry(info, acc, Tile(info.kernel, bxs[0], self.sizes))
                    geo.append((g.kind, g.lo, g.hi))
                if len(geo) == 2 and geo[0] == geo[1] and geo[0][0] == "affine":
                    self.invariant.add((k, acc.pos))

    def footprint(self, k: int, acc: Access, r0: int, r1: int) -> tuple[int, int] | None:
        """The element range an access touches over rows [r0, r1) (regular indices only)."""
        info = self.infos[k]
        geos = [self.geometry(info, acc, Tile(info.kernel, bx, self.sizes))
                for bx in boxes(list(info.ranges), r0 * info.mult, r1 * info.mult)]
        if not geos or any(g.kind not in ("affine", "static") for g in geos):
            return None
        return min(g.lo for g in geos), max(g.hi for g in geos)

    def share_duplicate_loads(self) -> None:
        """A DRAM region several cores load at the same point of their streams
        (a norm weight, a KV head of grouped-query attention): the first core
        loads it and sends it to the others over the ring."""
        if len(self.cores) < 2:
            return
        where: dict[tuple[Region, int], list[tuple[int, int]]] = defaultdict(list)
        for c, core in sorted(self.cores.items()):
            n = 0
            for i, ins in enumerate(core.instrs):
                moved = isa.transfer(ins)
                if moved is not None and isa.step(ins).dma == "in":
                    where[(moved[0], n)].append((c, i))
                    n += 1
        edits: dict[int, dict[int, list[Any]]] = defaultdict(dict)
        for (region, _), sites in where.items():
            if len(sites) < 2:
                continue
            owner, oi = sites[0]
            tag = self.next_tag()
            src = self.cores[owner].instrs[oi]
            edits[owner][oi] = [src, RingSend(tuple(c for c, _ in sites[1:]), isa.transfer(src)[1], tag)]
            for c, i in sites[1:]:
                edits[c][i] = [RingRecv(owner, isa.transfer(self.cores[c].instrs[i])[1], tag)]
        for c, changes in edits.items():
            core = self.cores[c]
            out: list[Any] = []
            for i, ins in enumerate(core.instrs):
                out.extend(changes.get(i, [ins]))
            core.instrs = out


def _packed_dims(g: _Geom) -> list[int]:
    """The tile dims a packed tile stores, outermost (largest DRAM stride) first."""
    dims = [k for k, (n, c) in enumerate(zip(g.shape, g.coeffs)) if c != 0 and n > 1]
    return sorted(dims, key=lambda k: -g.coeffs[k])


def split_box(box: Box, max_points: int) -> list[Box]:
    """``box`` cut into boxes of at most ``max_points`` points: along its outermost
    dimension first (whole sticks when the innermost one is cut)."""
    points = math.prod(hi - lo for lo, hi in box)
    if points <= max_points:
        return [box]
    for k, (lo, hi) in enumerate(box):
        n = hi - lo
        if n <= 1:
            continue
        inner = math.prod(b - a for a, b in box[k + 1:])
        if inner <= max_points or k == len(box) - 1:
            step = max(1, max_points // max(inner, 1))
            if k == len(box) - 1:
                step = max(128, step // 128 * 128)
            return [box[:k] + ((a, min(hi, a + step)),) + box[k + 1:] for a in range(lo, hi, step)]
        out = []
        for a in range(lo, hi):
            out += split_box(box[:k] + ((a, a + 1),) + box[k + 1:], max_points)
        return out
    return [box]


def _numel(op: Operand) -> int:
    return math.prod(op.lx.sizes)
