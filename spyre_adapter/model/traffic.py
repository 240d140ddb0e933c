"""DRAM traffic in 128-byte sticks: what one DMA descriptor moves, and the
compulsory traffic of a kernel.

DRAM moves whole sticks, so a descriptor costs the distinct sticks its region
touches (a strided region whose elements sit in different sticks costs a stick
per element). Compulsory traffic is what any implementation of the kernel must
move: every stick of an input it reads, once, and every stick of an output it
writes, once. It is computed here from the kernel's reference semantics (which
elements the Kernel IR touches when run by :mod:`spyre_shims.reference`), never
from a program or a planner's estimates, so a program's traffic ratio against
it is a measurement.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, MutableMapping

import sympy
import torch

from spyre_shims import kernel_ir as kir
from spyre_shims.ops import torch_dtype
from spyre_shims.reference import FlatMemory, Tile, concrete, evaluate, full_box

from spyre_adapter.model.program import Region, itemsize

__all__ = ["region_sticks", "region_stick_set", "merge_intervals", "index_sticks", "StickMarks", "compulsory_bytes"]

#: Runs enumerated per chunk when marking sticks (bounds temporary memory).
_CHUNK = 1 << 22


def _runs(offset: int, sizes: tuple[int, ...], strides: tuple[int, ...]) -> tuple[int, list[tuple[int, int]]]:
    """(elements per contiguous run, the remaining (size, stride) dims) of a region."""
    dims = sorted(((abs(s), n) for s, n in zip(strides, sizes) if n > 1 and s != 0), key=lambda t: t[0])
    run, k = 1, 0
    while k < len(dims) and dims[k][0] == run:
        run *= dims[k][1]
        k += 1
    return run, [(n, s) for s, n in dims[k:]]


def _chunked_starts(offset: int, rest: list[tuple[int, int]]) -> list[torch.Tensor]:
    """Run start indices, in chunks of at most _CHUNK (outermost dim split)."""
    rest = sorted(rest, key=lambda t: -t[1])  # outermost (largest stride) first
    inner = math.prod(n for n, _ in rest[1:]) if rest else 1
    if not rest:
        return [torch.tensor([offset], dtype=torch.int64)]
    tail = torch.zeros(1, dtype=torch.int64)
    for n, s in reversed(rest[1:]):
        tail = (s * torch.arange(n, dtype=torch.int64)[:, None] + tail[None, :]).reshape(-1)
    n0, s0 = rest[0]
    step = max(1, _CHUNK // max(inner, 1))
    return [offset + (s0 * torch.arange(a, min(n0, a + step), dtype=torch.int64)[:, None] + tail[None, :]).reshape(-1)
            for a in range(0, n0, step)]


def _span(offset: int, sizes: tuple[int, ...], strides: tuple[int, ...]) -> tuple[int, int]:
    lo = offset + sum(s * (n - 1) for s, n in zip(strides, sizes) if s < 0)
    hi = offset + sum(s * (n - 1) for s, n in zip(strides, sizes) if s > 0)
    return lo, hi


class StickMarks:
    """A set of sticks of one buffer, as a bitmap over the buffer's sticks."""

    def __init__(self, nbytes: int, stick: int = 128) -> None:
        self.stick = stick
        self.marks = torch.zeros(max(1, -(-nbytes // stick)), dtype=torch.bool)

    def add_intervals(self, first: torch.Tensor, last: torch.Tensor) -> None:
        """Mark sticks ``[first_i, last_i]`` (clipped to the buffer)."""
        if first.numel() == 0:
            return
        n = self.marks.numel()
        first, last = first.clamp(0, n - 1), last.clamp(0, n - 1)
        diff = torch.zeros(n + 1, dtype=torch.int32)
        diff.index_add_(0, first, torch.ones_like(first, dtype=torch.int32))
        diff.index_add_(0, last + 1, -torch.ones_like(last, dtype=torch.int32))
        self.marks |= diff.cumsum(0)[:-1] > 0

    def add_region(self, offset: int, sizes: tuple[int, ...], strides: tuple[int, ...], isz: int) -> None:
        """Mark the sticks of a strided element region."""
        if math.prod(sizes) == 0:
            return
        run, rest = _runs(offset, sizes, strides)
        lo, _ = _span(offset, sizes, strides)
        if not rest:
            self.add_intervals(torch.tensor([lo * isz // self.stick]), torch.tensor([(lo + run - 1) * isz // self.stick]))
            return
        # Run starts: the region's lowest address plus the outer dims' offsets.
        base = lo
        for starts in _chunked_starts(base, [(n, abs(s)) for n, s in rest]):
            self.add_intervals(starts * isz // self.stick, (starts + run - 1) * isz // self.stick)

    def add_indices(self, idx: torch.Tensor, isz: int) -> None:
        """Mark the sticks of individual element indices (clipped to the buffer).
        Set directly, in chunks: a traced gather of 66 M indices through interval
        differences took 3 GB of temporaries."""
        idx = idx.reshape(-1)
        n = self.marks.numel()
        for a in range(0, idx.numel(), _CHUNK):
            self.marks[(idx[a:a + _CHUNK] * isz // self.stick).clamp_(0, n - 1)] = True

    def count(self) -> int:
        """Sticks marked."""
        return int(self.marks.sum())


def index_sticks(idx: torch.Tensor, isz: int, stick: int = 128) -> int:
    """Distinct sticks the element indices ``idx`` touch (what a gather or scatter
    of them moves). Costs the indices, not the buffer: a bitmap over a GB table
    per descriptor made every gather of it take a tenth of a second."""
    if idx.numel() == 0:
        return 0
    s = idx.reshape(-1) * isz // stick
    if not bool((s[1:] >= s[:-1]).all()):  # rows of a table come in order: no sort needed
        s = s.sort().values
    return int((s[1:] != s[:-1]).sum()) + 1


def _union_len(first: torch.Tensor, last: torch.Tensor) -> int:
    """Integers covered by the union of intervals [first_i, last_i]."""
    order = first.argsort()
    f, lst = first[order], last[order]
    prev = torch.cat([torch.tensor([-(1 << 62)]), torch.cummax(lst, 0).values[:-1]])
    return int((lst - torch.maximum(f - 1, prev)).clamp(min=0).sum())


def region_sticks(region: Region, isz: int, stick: int = 128) -> int:
    """Distinct sticks a region touches (what a DMA of it moves)."""
    if region.numel == 0:
        return 0
    if stick % isz == 0:
        # Moving a region by whole sticks moves every stick it touches by the same
        # amount: the count depends on its shape and where it starts within a stick
        # only (a planner's tiles differ mostly in their offsets: far fewer to count).
        lo, _ = region.bounds()
        q = stick // isz
        return _offset_region_sticks(region.offset - lo + lo % q, region.sizes, region.strides, isz, stick)
    return _offset_region_sticks(region.offset, region.sizes, region.strides, isz, stick)


@functools.lru_cache(maxsize=65536)
def _offset_region_sticks(offset: int, sizes: tuple[int, ...], strides: tuple[int, ...], isz: int, stick: int) -> int:
    region = Region("", offset, sizes, strides)
    run, rest = _runs(region.offset, region.sizes, region.strides)
    lo, hi = region.bounds()
    if not rest:
        return (lo + run - 1) * isz // stick - lo * isz // stick + 1
    nruns = math.prod(n for n, _ in rest)
    if nruns <= _CHUNK:
        starts = torch.cat(_chunked_starts(lo, [(n, abs(s)) for n, s in rest]))
        return _union_len(starts * isz // stick, (starts + run - 1) * isz // stick)
    marks = StickMarks((hi - lo + 1) * isz + stick, stick)
    shift = lo * isz // stick * stick // isz
    marks.add_region(region.offset - shift, region.sizes, region.strides, isz)
    return marks.count()


def region_stick_set(region: Region, isz: int, stick: int = 128) -> tuple[torch.Tensor, torch.Tensor]:
    """The sticks of a region as sorted, merged intervals ``(first, last)`` (inclusive)."""
    if region.numel == 0:
        e = torch.empty(0, dtype=torch.int64)
        return e, e
    shift, start = 0, region.offset
    if stick % isz == 0:
        # As for region_sticks: the same shape a whole number of sticks further
        # has the same intervals that many sticks further.
        lo, _ = region.bounds()
        shift, phase = divmod(lo, stick // isz)
        start = region.offset - lo + phase
    _, rest = _runs(start, region.sizes, region.strides)
    # (cached for regions of few runs only: the intervals of a large one are large)
    fn = _cached_stick_set if math.prod(n for n, _ in rest) <= _CACHED_RUNS else _stick_set
    f, last = fn(start, region.sizes, region.strides, isz, stick)
    return f + shift, last + shift  # new tensors: the cache's are never handed out


#: Regions and boxes of at most this many contiguous runs have their stick intervals cached.
_CACHED_RUNS = 1024


def _stick_set(offset: int, sizes: tuple[int, ...], strides: tuple[int, ...], isz: int,
               stick: int) -> tuple[torch.Tensor, torch.Tensor]:
    region = Region("", offset, sizes, strides)
    run, rest = _runs(region.offset, region.sizes, region.strides)
    lo, _ = region.bounds()
    starts = torch.cat(_chunked_starts(lo, [(n, abs(s)) for n, s in rest])) if rest else torch.tensor([lo])
    return merge_intervals(starts * isz // stick, (starts + run - 1) * isz // stick)


def merge_intervals(first: torch.Tensor, last: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Integer intervals ``[first_i, last_i]`` as sorted, disjoint ones: overlapping
    and adjacent intervals joined (equal sets give equal tensors)."""
    if first.numel() == 0:
        return first, last
    order = first.argsort()
    f, l_ = first[order], last[order]
    reach = torch.cummax(l_, 0).values
    new = torch.ones_like(f, dtype=torch.bool)
    new[1:] = f[1:] > reach[:-1] + 1
    idx = new.nonzero().flatten()
    ends = torch.cat([idx[1:] - 1, torch.tensor([f.numel() - 1])])
    return f[idx], reach[ends]


_cached_stick_set = functools.lru_cache(maxsize=4096)(_stick_set)


# ------------------------------------------------------------------ compulsory traffic

class _TracingMemory(FlatMemory):
    """The reference memory, marking the sticks each load and store touches.
    Reads of sticks the kernel wrote before are not compulsory (the value can
    stay on the core): those in ``before`` (earlier kernels of the group) and
    those this tile has written (``writes``)."""

    def __init__(self, buffers: MutableMapping[str, torch.Tensor], written: frozenset[str],
                 reads: dict[str, StickMarks], writes: dict[str, StickMarks], stick: int,
                 before: Mapping[str, StickMarks] | None = None, sink: frozenset[str] = frozenset()) -> None:
        super().__init__(buffers, written)
        self.reads, self.writes, self.stick, self.before = reads, writes, stick, before or {}
        #: buffers no load reads: their stores are marked, not written
        self.sink = sink

    def _written(self, name: str) -> torch.Tensor | None:
        parts = [t[name].marks for t in (self.before, self.writes) if name in t]
        return None if not parts else parts[0] if len(parts) == 1 else parts[0] | parts[1]

    def _marks(self, table: dict[str, StickMarks], name: str) -> StickMarks:
        if name not in table:
            flat = self.buffers[name]
            table[name] = StickMarks(flat.numel() * flat.element_size() + self.stick, self.stick)
        return table[name]

    def _touch(self, table: dict[str, StickMarks], name: str, index: sympy.Expr, tile: Tile,
               mask: torch.Tensor | None, reduced: bool) -> None:
        flat = self.buffers[name]
        isz = flat.element_size()
        marks = self._marks(table, name)
        shape = tile.keep_shape() if reduced else tile.shape
        aff = tile.affine(index)
        if aff is not None and mask is None:
            start, coeffs = aff
            sizes = tuple(n for n, c in zip(shape, coeffs) if c != 0 and n > 1)
            strides = tuple(c for n, c in zip(shape, coeffs) if c != 0 and n > 1)
            marks.add_region(int(start), sizes, strides, isz)
            return
        idx = tile.indices(index, keep=reduced).expand(tuple(shape))
        if mask is not None:
            idx = idx[mask.bool().expand(tuple(shape))]
        marks.add_indices(idx[(idx >= 0) & (idx < flat.numel())], isz)

    def load(self, pos: int, name: str, index: sympy.Expr, tile: Tile, mask: torch.Tensor | None) -> torch.Tensor:
        written = self._written(name)
        if written is not None:
            fresh = StickMarks(written.numel() * self.stick, self.stick)
            self._touch({name: fresh}, name, index, tile, mask, False)
            self._marks(self.reads, name).marks |= fresh.marks & ~written
        else:
            self._touch(self.reads, name, index, tile, mask, False)
        return super().load(pos, name, index, tile, mask)

    def store(self, pos: int, name: str, index: sympy.Expr, value: torch.Tensor, tile: Tile, reduced: bool,
              mode: str | None) -> None:
        self._touch(self.writes, name, index, tile, None, reduced)
        if name not in self.sink:
            super().store(pos, name, index, value, tile, reduced, mode)


#: Points (iteration x reduction) of one traced tile at most: a GB table traced
#: as one tile held its values in fp32 several times over (10 GB for 1.16 GB).
_TRACE_POINTS = 1 << 24


def _trace_boxes(lk: kir.LoopKernel, sizes: Mapping[sympy.Symbol, int]) -> list[tuple[tuple[int, int], ...]]:
    """A kernel's iteration space in boxes of at most _TRACE_POINTS points, cut
    along its longest iteration dimension (points are independent; a reduction
    or scan stays whole in every box)."""
    box = full_box(lk, sizes)
    ext = [hi - lo for lo, hi in box]
    points = math.prod(ext) * math.prod(concrete(r, sizes) for r in lk.reduction_ranges)
    if not box or points <= _TRACE_POINTS:
        return [box]
    d = max(range(len(ext)), key=lambda i: ext[i])
    step = max(1, _TRACE_POINTS // max(1, points // ext[d]))
    return [box[:d] + ((a, min(ext[d], a + step)),) + box[d + 1:] for a in range(0, ext[d], step)]


def _merge(into: dict[str, StickMarks], marks: Mapping[str, StickMarks]) -> None:
    for name, m in marks.items():
        if name in into:
            into[name].marks |= m.marks
        else:
            into[name] = m


def _view_sticks(spec: kir.BufferSpec, sizes: Mapping[sympy.Symbol, int], stick: int) -> int:
    isz = itemsize(spec.dtype)
    shape = tuple(concrete(s, sizes) for s in spec.size)
    strides = tuple(concrete(s, sizes) for s in spec.stride)
    region = Region(spec.name, concrete(spec.offset, sizes), shape, strides)
    return region_sticks(region, isz, stick)


def compulsory_bytes(kernel: kir.Kernel, buffers: Mapping[str, torch.Tensor] | None,
                     sizes: Mapping[sympy.Symbol, int], stick: int = 128, views_only: bool = False) -> int:
    """Each input stick read once and each output stick written once.

    Matmul-family kernels: the sticks of their operand and output views (a
    bias broadcast over rows counts once). Loop kernels: the sticks their
    reference semantics touch, traced by running the kernel on copies of the
    buffers it writes (so data-dependent indices count what they really read);
    ``buffers`` are the launch's flat arguments (None: zero-filled stand-ins,
    for kernels without data-dependent indices)."""
    if isinstance(kernel, kir.ExternKernel):
        seen: set[str] = set()
        total = 0
        for spec in kernel.inputs:
            key = f"{spec.name}/{spec.size}/{spec.stride}/{spec.offset}"
            if key not in seen:
                seen.add(key)
                total += _view_sticks(spec, sizes, stick)
        return (total + _view_sticks(kernel.output, sizes, stick)) * stick
    if views_only:
        return sum(-(-concrete(b.storage_numel, sizes) * itemsize(b.dtype) // stick) for b in kernel.buffers
                   if b.role != "internal") * stick
    bufs: dict[str, torch.Tensor] = {}
    written = {b.name for b in kernel.buffers if b.role in ("output", "inout", "internal")}
    # Stores into a buffer no load reads only mark sticks: no copy to write into
    # (a 2 GB output cloned for that was the peak of a whole workload run).
    sink = written - {i.args[0] for lk in kernel.kernels for i in lk.body if i.op == "load"}
    for spec in kernel.buffers:
        numel = concrete(spec.storage_numel, sizes)
        src = buffers.get(spec.name) if buffers is not None else None
        if src is None:  # (a sink's stand-in is never touched: empty, not resident)
            bufs[spec.name] = (torch.empty if spec.name in sink else torch.zeros)(numel, dtype=torch_dtype(spec.dtype))
        else:
            bufs[spec.name] = src.clone() if spec.name in written - sink else src
    reads: dict[str, StickMarks] = {}
    writes: dict[str, StickMarks] = {}
    internal = {b.name for b in kernel.buffers if b.role == "internal"}
    for lk in kernel.kernels:
        done: dict[str, StickMarks] = {}  # this kernel's writes, every chunk's
        for box in _trace_boxes(lk, sizes):
            now: dict[str, StickMarks] = {}
            mem = _TracingMemory(bufs, frozenset(lk.writes()), reads, now, stick, writes, frozenset(sink))
            evaluate(lk, mem, Tile(lk, box, sizes))
            _merge(done, now)
        _merge(writes, done)
    total = sum(m.count() for name, m in reads.items() if name not in internal)
    total += sum(m.count() for name, m in writes.items() if name not in internal)
    return total * stick
