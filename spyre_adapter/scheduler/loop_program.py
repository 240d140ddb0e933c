"""Addressed Spyre programs for loop-kernel groups.

Given a division (which rows of the group each core runs, and into how many
chunks each row's reduction is cut), the builder walks every core's tiles and,
for each loop kernel of the group on a tile, decides where each load and store
lives in LX:

* a *window*: a contiguous run of the buffer's elements (whole sticks), loaded
  by one DMA; later kernels of the group on the same tile read it again from LX
  (an intermediate the group produces never leaves the core);
* a *packed tile*: a strided DRAM region gathered by one DMA into a dense LX
  tile (transposed and sliced reads whose span would waste a window);
* a *gathered tile*: indices computed on the core (:class:`AddrGen`) and the
  elements fetched by a gather DMA (data-dependent indices, scatters).

Operands every tile of a core reads alike (a norm's weight) are loaded once
per core and, when several cores need the same bytes, by one core and sent to
the others over the ring. A row whose working set does not fit LX is cut into
chunks: each chunk's reduction leaves a partial state, the row's first core
merges them (:class:`Combine`) and sends the result to the cores of the other
chunks. When a kernel of the group needs data another tile or core produced
(no tile-local order exists), the group runs in phases: each kernel over every
core's rows, intermediates through DRAM, a barrier between phases.

LX addresses come from :mod:`.lx_alloc`; a tile's operands stay allocated until
the next tile ends, so the next tile's loads overlap this tile's compute.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

import sympy
import torch

from spyre_shims import index as sidx
from spyre_shims.kernel_ir import KernelGroup, LoopKernel
from spyre_shims.reference import Tile, concrete, partial_dtypes, reduction_phases

from spyre_adapter.model import isa
from spyre_adapter.model.bodies import Access, accesses, index_cone, indirect_levels
from spyre_adapter.model.errors import DoesNotFit
from spyre_adapter.model.machine import Machine
from spyre_adapter.model.program import (AddrGen, Barrier, Box, Combine, CoreProgram, DmaGather, DmaLoad, DmaScatter,
                                         DmaStore, LoopPlan, Operand, Program, Region, Resident, RingRecv, RingSend,
                                         Vec, itemsize)
from spyre_adapter.scheduler.analysis import _mask_bounds, boxes
from spyre_adapter.scheduler.lx_alloc import Slot, SlotView, allocate

__all__ = ["LoopDivision", "Hold", "build", "split_box", "chunk_bounds", "row_ranges", "NeedsPhases"]


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
class _Window:
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


@dataclasses.dataclass
class _Geom:
    kind: str  # "affine" | "static" | "indirect" | "empty"
    lo: int = 0
    hi: int = 0  # one past the last element
    touched: int = 0
    start: int = 0
    coeffs: tuple[int, ...] = ()
    shape: tuple[int, ...] = ()
    #: a masked load's box within the tile: per dim (offset from the tile's start, extent)
    clip: tuple[tuple[int, int], ...] = ()


class _Core:
    """One core's stream under construction, with the windows it holds."""

    def __init__(self, core: int) -> None:
        self.core = core
        self.instrs: list[Any] = []
        self.windows: list[_Window] = []
        self.previous: list[_Window] = []  # the previous tile's windows (their slots are still allocated)
        self.packed: list[_Packed] = []
        self.slots: dict[str, list[Slot]] = {"task": [], "tile": []}
        self.held: dict[str, list[Slot]] = {"task": [], "tile": []}
        self.partials: dict[tuple[Any, ...], tuple[SlotView, ...]] = {}
        self.stored: dict[str, list[tuple[int, int]]] = defaultdict(list)

    def find(self, buffer: str, lo: int, hi: int) -> _Window | None:
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


class _Builder:
    def __init__(self, group: KernelGroup, m: Machine, sizes: Mapping[sympy.Symbol, int], rows: int, unit: int,
                 mults: Sequence[int], d: LoopDivision, lx_in: Sequence[Resident],
                 keep: Mapping[str, Mapping[int, Hold]], reserved: Mapping[int, Sequence[tuple[int, int]]]) -> None:
        self.group, self.m, self.sizes, self.rows, self.unit, self.d = group, m, dict(sizes), rows, unit, d
        self.stick = m.stick_bytes
        self.dtypes = {b.name: b.dtype for b in group.buffers}
        self.internal = {b.name for b in group.buffers if b.role == "internal"}
        self.numel = {b.name: concrete(b.storage_numel, sizes) for b in group.buffers}
        self.infos: list[_KernelInfo] = []
        for lk, mult in zip(group.kernels, mults):
            ranges = tuple(concrete(r, sizes) for r in lk.ranges)
            red = tuple(concrete(r, sizes) for r in lk.reduction_ranges)
            lead, acc = None, 1
            for t in range(len(ranges) + 1):
                if acc == rows and math.prod(ranges[t:]) == mult:
                    lead = t
                    break
                if t < len(ranges):
                    acc *= ranges[t]
            self.infos.append(_KernelInfo(lk, ranges, red, mult, reduction_phases(lk.body) if red else None, lead))
        # the first kernel of the group that stores each buffer
        self.writer: dict[str, int] = {}
        for k, info in enumerate(self.infos):
            for a in accesses(info.kernel.body):
                if a.store:
                    self.writer.setdefault(a.buffer, k)
        self.cores: dict[int, _Core] = {}
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

    # ---------------------------------------------------------- helpers
    def core(self, c: int) -> _Core:
        if c not in self.cores:
            core = self.cores[c] = _Core(c)
            for r in self.lx_in:
                if r.core == c:
                    slot = Slot(f"{r.buffer}[{r.lo}:{r.hi}] held", (r.hi - r.lo) * itemsize(r.dtype), fixed=r.addr)
                    core.windows.append(_Window(r.buffer, r.lo, r.hi, slot.view(r.dtype, (r.hi - r.lo,)),
                                                "persistent"))
        return self.cores[c]

    def next_tag(self) -> int:
        self.tag += 1
        return self.tag

    def slot(self, core: _Core, name: str, nbytes: int, scope: str | None = None) -> Slot:
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

    # ---------------------------------------------------------- geometry of one access on one tile
    def geometry(self, info: _KernelInfo, acc: Access, tile: Tile) -> _Geom:
        body = info.kernel.body
        n = self.numel[acc.buffer]
        shape = tuple(tile.keep_shape() if acc.reduced else tile.shape)
        if any(s.name.startswith("v") for s in sidx.free_symbols(acc.index)):
            return _Geom("indirect", shape=shape)
        clip = None
        if acc.masked and not acc.store:
            bounds = _mask_bounds(body, body[acc.pos].mask, self.sizes)
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
        idx = tile.indices(acc.index, keep=acc.reduced).expand(shape)
        if acc.masked and not acc.store:
            idx = idx[(idx >= 0) & (idx < n)]
            if idx.numel() == 0:
                return _Geom("empty", shape=shape)
        lo, hi = int(idx.min()), int(idx.max()) + 1
        touched = int(torch.unique(idx).numel()) if idx.numel() < 1 << 22 else idx.numel()
        return _Geom("static", lo, hi, touched, shape=shape)

    def window_bounds(self, buf: str, lo: int, hi: int) -> tuple[int, int]:
        """[lo, hi) widened to whole sticks within the buffer."""
        per = max(1, self.stick // itemsize(self.dtypes[buf]))
        a = lo // per * per
        b = min(self.numel[buf], -(-hi // per) * per)
        return a, max(b, a + 1)

    # ---------------------------------------------------------- one task: a kernel over a tile on a core
    def task(self, c: int, k: int, box: Box, red: Box | None, phase: str, chunk: int) -> None:
        core = self.core(c)
        info = self.infos[k]
        lk = info.kernel
        tile = Tile(lk, box, self.sizes, red=red)
        if tile.numel == 0:
            return
        if red is None and lk.reduction_ranges:
            red = tile.red  # concrete: the program never depends on run-time sizes
        self.kernel_index = k
        accs = accesses(lk.body)
        if phase == "partial":
            accs = tuple(a for a in accs if a.pos < (info.split_at or 0))
        levels = indirect_levels(lk.body)
        operands: dict[int, Operand] = {}
        irregular: list[Access] = []
        for acc in accs:
            if acc.store:
                continue
            g = self.geometry(info, acc, tile)
            if g.kind == "indirect" or (g.kind == "static" and (g.hi - g.lo) > 4 * max(g.touched, 1) + 4096):
                irregular.append(acc)
                continue
            operands[acc.pos] = self.load_operand(core, k, acc, g)
        for lv in sorted({levels.get(a.pos, 1) for a in irregular}):
            self.gather(core, k, box, red, [a for a in irregular if levels.get(a.pos, 1) == lv], operands, tile)
        scatters: list[tuple[Access, SlotView]] = []
        dmas: list[tuple[SlotView, Region]] = []
        for acc in accs:
            if acc.store:
                op, dma, scatter = self.store_operand(core, acc, self.geometry(info, acc, tile))
                operands[acc.pos] = op
                if dma is not None:
                    dmas.append(dma)
                if scatter is not None:
                    scatters.append((acc, scatter))
        partials: list[tuple[int, tuple[SlotView, ...]]] = []
        if phase == "partial":
            points = math.prod(tile.keep_shape())
            for pos, ins in enumerate(lk.body):
                if ins.op == "reduction":
                    comps = []
                    for dt in partial_dtypes(ins):
                        name = str(dt).removeprefix("torch.")
                        slot = self.slot(core, f"partial {lk.name}@{pos}#{chunk}", points * itemsize(name), "none")
                        comps.append(slot.view(name, (points,)))
                    core.partials[(k, pos, chunk, box)] = tuple(comps)
                    partials.append((pos, tuple(comps)))
        core.instrs.append(Vec(k, box, red, tuple(operands[p] for p in sorted(operands)),  # type: ignore[arg-type]
                               phase, tuple(partials)))  # type: ignore[arg-type]
        self.emit_stores(core, k, box, red, dmas, scatters, operands)

    def emit_stores(self, core: _Core, k: int, box: Box, red: Box | None, dmas: list[tuple[SlotView, Region]],
                    scatters: list[tuple[Access, SlotView]], operands: Mapping[int, Operand]) -> None:
        for src, region in dmas:
            core.instrs.append(DmaStore(src, region))  # type: ignore[arg-type]
            core.stored[region.buffer].append(region.bounds()[0:1] + (region.bounds()[1] + 1,))  # type: ignore[arg-type]
        if not scatters:
            return
        body = self.infos[k].kernel.body
        targets = []
        for acc, src in scatters:
            n = src.sizes[0]
            targets.append((acc.pos, self.slot(core, f"addrs {acc.buffer}@{acc.pos}", n * 8).view("int64", (n,))))
        cone = index_cone(body, tuple(a.pos for a, _ in scatters))
        ops = tuple(o for p, o in sorted(operands.items()) if p in cone and body[p].op == "load")
        core.instrs.append(AddrGen(k, box, red, ops, tuple(targets)))  # type: ignore[arg-type]
        for (acc, src), (_, addrs) in zip(scatters, targets):
            core.instrs.append(DmaScatter(src, self.dram_name(acc.buffer), addrs, acc.atomic))  # type: ignore[arg-type]

    def load_operand(self, core: _Core, k: int, acc: Access, g: _Geom) -> Operand:
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
        core.windows.append(_Window(buf, lo, hi, view, scope))
        return Operand(acc.pos, "window", view, lo)  # type: ignore[arg-type]

    def packed(self, core: _Core, buf: str, g: _Geom, what: str) -> tuple[SlotView, SlotView]:
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

    def store_operand(self, core: _Core, acc: Access,
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
            core.windows.append(_Window(buf, g.lo, g.hi, view, "persistent"))
            dma = (view, Region(self.dram_name(buf), g.lo, (g.hi - g.lo,), (1,))) if hold.store else None
            return Operand(acc.pos, "window", view, g.lo), dma, None  # type: ignore[arg-type]
        if g.kind == "affine" and not acc.atomic and all(c >= 0 for c in g.coeffs):
            if local or g.hi - g.lo == g.touched:
                # a contiguous run (or a group-internal value): a window, stored in one DMA
                view = self.slot(core, f"{buf}[{g.lo}:{g.hi}] out", (g.hi - g.lo) * isz).view(dt, (g.hi - g.lo,))
                core.drop(buf, g.lo, g.hi)
                core.windows.append(_Window(buf, g.lo, g.hi, view, self.scope))
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

    def held(self, core: _Core, buf: str, hold: Hold) -> SlotView:
        """The fixed LX window where this core keeps its share of ``buf``."""
        key = (buf, core.core)
        if key not in self.held_slots:
            dt = self.dtypes[buf]
            slot = Slot(f"{buf}[{hold.lo}:{hold.hi}] kept", (hold.hi - hold.lo) * itemsize(dt), fixed=hold.addr)
            self.held_slots[key] = slot
            self.lx_out.append(Resident(core.core, buf, hold.lo, hold.hi, hold.addr, dt))
        return self.held_slots[key].view(self.dtypes[buf], (hold.hi - hold.lo,))

    def gather(self, core: _Core, k: int, box: Box, red: Box | None, batch: list[Access],
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

    # ---------------------------------------------------------- loads alike on every tile
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

    # ---------------------------------------------------------- tiles
    def kernel_boxes(self, k: int, r0: int, r1: int, chunk: tuple[int, int] | None) -> list[tuple[Box, Box | None]]:
        """(box, reduction box) pieces of kernel ``k`` on rows [r0, r1), for one
        chunk ``(j, n)`` of each row's reduction (or columns), or all of it."""
        info = self.infos[k]
        if chunk is None or (info.mult == 1 and not info.red):
            return [(b, None) for b in boxes(list(info.ranges), r0 * info.mult, r1 * info.mult)]
        j, n = chunk
        if info.red:
            multi = len(info.red) > 1
            b = chunk_bounds(info.red[0] if multi else info.rnumel, n, 1 if multi else 128)
            if b[j + 1] <= b[j]:
                return []
            red = ((b[j], b[j + 1]),) + tuple((0, r) for r in info.red[1:])
            return [(bx, red) for bx in boxes(list(info.ranges), r0 * info.mult, r1 * info.mult)]
        t = info.lead
        assert t is not None
        b = chunk_bounds(info.mult, n)
        return [(lb + tb, None) for lb in boxes(list(info.ranges[:t]), r0, r1)
                for tb in boxes(list(info.ranges[t:]), b[j], b[j + 1])]

    def check_chunkable(self) -> None:
        for info in self.infos:
            if info.red and (info.mult != 1 or info.split_at is None):
                raise DoesNotFit(f"{info.kernel.name}: its reduction cannot be cut into chunks")
            if not info.red and info.mult > 1 and info.lead is None:
                raise DoesNotFit(f"{info.kernel.name}: its columns do not line up with the rows")

    def run_tiles(self) -> None:
        d = self.d
        if d.chunks > 1:
            self.check_chunkable()
        step = max(self.unit, d.tile_rows)
        for g, rr in enumerate(row_ranges(self.rows, self.unit, d.row_cores)):
            cores = [g * d.rsplit + j for j in range(d.rsplit)]
            if d.chunks == 1:
                self.core_rows[cores[0]] = rr
            for r0 in range(rr[0], rr[1], step):
                self.tile(cores, r0, min(rr[1], r0 + step))
                for c in cores:
                    self.core(c).end("tile")

    def tile(self, cores: list[int], r0: int, r1: int) -> None:
        d = self.d
        leader = cores[0]
        if d.chunks == 1:
            for k in range(len(self.infos)):
                for box, red in self.kernel_boxes(k, r0, r1, None):
                    self.task(leader, k, box, red, "all", 0)
            return
        for k, info in enumerate(self.infos):
            if info.red or info.mult > 1:
                self.scope = "task" if d.chunks_per_core > 1 else "tile"
                for j, c in enumerate(cores):
                    for q in range(d.chunks_per_core):
                        ch = j * d.chunks_per_core + q
                        for box, red in self.kernel_boxes(k, r0, r1, (ch, d.chunks)):
                            self.task(c, k, box, red, "partial" if info.red else "all", ch)
                        if d.chunks_per_core > 1:
                            self.core(c).end("task")
                    if info.red and d.chunks_per_core > 1:
                        self.merge_chunks(c, k, r0, r1, j)
                self.scope = "tile"
                if info.red:
                    self.combine(cores, k, r0, r1)
            else:
                for box, red in self.kernel_boxes(k, r0, r1, None):
                    self.task(leader, k, box, red, "all", 0)
                    self.broadcast(cores, k, box)

    def merge_chunks(self, c: int, k: int, r0: int, r1: int, j: int) -> None:
        """A core's chunks of each reduction merged into one partial (chunk ``j``
        of the row group: what it sends to the row group's first core)."""
        d = self.d
        core = self.core(c)
        lk = self.infos[k].kernel
        reds = [p for p, ins in enumerate(lk.body) if ins.op == "reduction"]
        for box, _ in self.kernel_boxes(k, r0, r1, None):
            parts = []
            into = []
            for p in reds:
                chunks = [core.partials.pop((k, p, j * d.chunks_per_core + q, box)) for q in range(d.chunks_per_core)
                          if (k, p, j * d.chunks_per_core + q, box) in core.partials]
                if not chunks:
                    continue
                merged = tuple(self.slot(core, f"partial {lk.name}@{p} core {c}", x.slot.nbytes, "none")
                               .view(x.dtype, x.sizes) for x in chunks[0])
                parts.append((p, tuple(chunks)))
                into.append((p, merged))
                core.partials[(k, p, ("merged", j), box)] = merged  # type: ignore[index]
            if parts:
                core.instrs.append(Combine(k, box, tuple(parts), (), tuple(into)))  # type: ignore[arg-type]

    def combine(self, cores: list[int], k: int, r0: int, r1: int) -> None:
        """Partials to the row group's first core, merged there; the results to
        the other cores when later kernels of the group read them."""
        d = self.d
        info = self.infos[k]
        leader = self.core(cores[0])
        lk = info.kernel
        reds = [p for p, ins in enumerate(lk.body) if ins.op == "reduction"]
        for box, _ in self.kernel_boxes(k, r0, r1, None):
            chunks_of: dict[int, list[tuple[SlotView, ...]]] = {p: [] for p in reds}
            for j, c in enumerate(cores):
                core = self.core(c)
                keys = [("merged", j)] if d.chunks_per_core > 1 else [j]
                for ch in keys:
                    for p in reds:
                        comps = core.partials.pop((k, p, ch, box), None)  # type: ignore[arg-type]
                        if comps is None:
                            continue
                        if c != cores[0]:
                            got = []
                            for x in comps:
                                tag = self.next_tag()
                                core.instrs.append(RingSend((cores[0],), x, tag))  # type: ignore[arg-type]
                                y = self.slot(leader, f"partial from core {c}", x.slot.nbytes, "none").view(x.dtype, x.sizes)
                                leader.instrs.append(RingRecv(c, y, tag))  # type: ignore[arg-type]
                                got.append(y)
                            comps = tuple(got)
                        chunks_of[p].append(comps)
            tile = Tile(lk, box, self.sizes)
            ops: dict[int, Operand] = {}
            dmas = []
            self.kernel_index = k
            for acc in accesses(lk.body):
                if acc.store:
                    op, dma, scatter = self.store_operand(leader, acc, self.geometry(info, acc, tile))
                    if scatter is not None:
                        raise DoesNotFit(f"{lk.name}: an irregular reduction store cannot follow a split")
                    ops[acc.pos] = op
                    if dma is not None:
                        dmas.append(dma)
            leader.instrs.append(Combine(k, box, tuple((p, tuple(chunks_of[p])) for p in reds),  # type: ignore[arg-type]
                                         tuple(ops[p] for p in sorted(ops))))
            self.emit_stores(leader, k, box, None, dmas, [], ops)
            self.broadcast(cores, k, box)

    def broadcast(self, cores: list[int], k: int, box: Box) -> None:
        """Windows kernel ``k`` just wrote on the row group's first core that
        later kernels of the group read: sent to the group's other cores."""
        if len(cores) < 2:
            return
        later = {a.buffer for info in self.infos[k + 1:] for a in accesses(info.kernel.body) if not a.store}
        leader = self.core(cores[0])
        for buf in sorted({a.buffer for a in accesses(self.infos[k].kernel.body) if a.store} & later):
            w = next((x for x in reversed(leader.windows) if x.buffer == buf), None)
            if w is None:
                continue
            tag = self.next_tag()
            leader.instrs.append(RingSend(tuple(cores[1:]), w.view, tag))  # type: ignore[arg-type]
            for c in cores[1:]:
                core = self.core(c)
                v = self.slot(core, f"{buf}[{w.lo}:{w.hi}] from core {cores[0]}", w.view.slot.nbytes).view(
                    w.view.dtype, w.view.sizes)
                core.instrs.append(RingRecv(cores[0], v, tag))  # type: ignore[arg-type]
                core.drop(buf, w.lo, w.hi)
                core.windows.append(_Window(buf, w.lo, w.hi, v, "tile"))

    # ---------------------------------------------------------- grid divisions
    def run_grid(self) -> None:
        """Each core one box of the (shared) iteration space, walked in tiles."""
        d = self.d
        shape = self.infos[0].ranges
        if any(info.ranges != shape or info.red for info in self.infos):
            raise DoesNotFit("a grid division needs pointwise kernels of one shape")
        per_dim = [chunk_bounds(n, g, 128 if k == len(shape) - 1 else 1) for k, (n, g) in enumerate(zip(shape, d.grid))]
        # Rows that are not whole sticks: cores cutting the innermost dim share
        # sticks at row ends, so each cut of it runs in its own phase (barriers).
        rows_padded = all(shape[-1] * itemsize(self.dtypes[a.buffer]) % self.stick == 0
                          for info in self.infos for a in accesses(info.kernel.body) if a.store)
        phases = 1 if rows_padded else d.grid[-1]
        tags = [self.next_tag() for _ in range(phases - 1)]
        for c, idx in enumerate(itertools.product(*[range(g) for g in d.grid])):
            box = tuple((b[j], b[j + 1]) for b, j in zip(per_dim, idx))
            phase = idx[-1] if phases > 1 else 0
            core = self.core(c)
            for t in tags[:phase]:
                core.instrs.append(Barrier(t))
            if all(hi > lo for lo, hi in box):
                for tile in split_box(box, max(1, d.tile_points)):
                    for k in range(len(self.infos)):
                        self.task(c, k, tile, None, "all", 0)
                    core.end("tile")
            for t in tags[phase:]:
                core.instrs.append(Barrier(t))

    # ---------------------------------------------------------- phased execution
    def run_phases(self) -> None:
        """Each kernel over every core's rows, intermediates through DRAM, a
        barrier between kernels."""
        d = self.d
        for b in self.internal:
            self.dram_name(b)
        ranges = row_ranges(self.rows, self.unit, d.row_cores)
        step = max(self.unit, d.tile_rows)
        for k in range(len(self.infos)):
            if k:
                tag = self.next_tag()
                for c, rr in enumerate(ranges):
                    if rr[0] < rr[1]:
                        self.core(c).instrs.append(Barrier(tag))
            for c, rr in enumerate(ranges):
                for r0 in range(rr[0], rr[1], step):
                    for box, red in self.kernel_boxes(k, r0, min(rr[1], r0 + step), None):
                        self.task(c, k, box, red, "all", 0)
                    self.core(c).end("tile")
            for core in self.cores.values():  # what a phase wrote may be stale for the next
                written = {a.buffer for a in accesses(self.infos[k].kernel.body) if a.store}
                core.windows = [w for w in core.windows if w.buffer not in written]

    # ---------------------------------------------------------- assembling
    def build(self, name: str, plan_fields: dict[str, Any]) -> Program:
        self.find_invariant()
        if self.d.grid:
            self.run_grid()
        elif self.d.phased:
            self.run_phases()
        else:
            self.run_tiles()
        self.share_duplicate_loads()
        cores = []
        for c in range(self.m.cores):
            core = self.cores.get(c)
            if core is None or not core.instrs:
                cores.append(CoreProgram(c, ()))
                continue
            instrs, table, _ = allocate(core.instrs, self.m.lx_usable_bytes, self.stick, self.reserved.get(c, ()))
            cores.append(CoreProgram(c, instrs, table))
        plan = LoopPlan(**plan_fields, workspace=tuple(sorted(self.workspace)))
        ws = tuple((b, dt, n) for b, (dt, n) in sorted(self.workspace.items()))
        return Program(name, "loop", self.group, tuple(info.kernel for info in self.infos), tuple(cores), plan,
                       tuple((str(k), v) for k, v in self.sizes.items()), ws, tuple(self.lx_in), tuple(self.lx_out))

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


def build(group: KernelGroup, m: Machine, sizes: Mapping[sympy.Symbol, int], name: str, rows: int, unit: int,
          mults: Sequence[int], d: LoopDivision, plan_fields: dict[str, Any],
          lx_in: Sequence[Resident] = (), keep: Mapping[str, Mapping[int, Hold]] | None = None,
          reserved: Mapping[int, Sequence[tuple[int, int]]] | None = None, carry: Sequence[Resident] = ()) -> Program:
    """The program of ``group`` under division ``d``. Raises :class:`NeedsPhases`
    (a tile-local order does not exist), :class:`~spyre_adapter.model.errors.DoesNotFit` or
    :class:`~.lx_alloc.LxFull` when that division cannot be built as asked.

    Residency across kernels: ``lx_in`` are LX windows an earlier kernel left
    (loads they cover read them in place), ``keep`` says where each core keeps
    its share of a buffer this group writes for later kernels (and whether it is
    still stored), ``reserved`` LX ranges the program must not touch (held for a
    later kernel), ``carry`` windows it keeps holding after it ends."""
    b = _Builder(group, m, sizes, rows, unit, mults, d, lx_in, keep or {}, reserved or {})
    b.lx_out.extend(carry)
    return b.build(name, plan_fields)
