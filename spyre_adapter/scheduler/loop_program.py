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

import itertools
import math
from collections.abc import Mapping, Sequence
from typing import Any

import sympy

from spyre_shims.kernel_ir import KernelGroup
from spyre_shims.reference import Tile, partial_dtypes

from spyre_adapter.model.bodies import Access, accesses, index_cone, indirect_levels
from spyre_adapter.model.errors import DoesNotFit
from spyre_adapter.model.machine import Machine
from spyre_adapter.model.program import (AddrGen, Barrier, Box, Combine, CoreProgram, DmaScatter, DmaStore, LoopPlan,
                                         Operand, Program, Region, Resident, RingRecv, RingSend, Vec, itemsize)
from spyre_adapter.scheduler.analysis import boxes
from spyre_adapter.scheduler.loop_layout import (CoreState, Hold, LoopDivision, NeedsPhases, Placement, Window,
                                                 chunk_bounds, row_ranges, sparse, split_box)
from spyre_adapter.scheduler.lx_alloc import SlotView, allocate

__all__ = ["LoopDivision", "Hold", "build", "split_box", "chunk_bounds", "row_ranges", "NeedsPhases"]


class _Builder(Placement):
    """The walk over a division: every core's tiles, the chunks of a split
    reduction and how they combine, the phases of a group no tile-local order
    serves, a grid of pointwise tiles; then the program."""

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
            if g.kind == "indirect" or sparse(g):
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

    def emit_stores(self, core: CoreState, k: int, box: Box, red: Box | None, dmas: list[tuple[SlotView, Region]],
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
                core.windows.append(Window(buf, w.lo, w.hi, v, "tile"))

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
