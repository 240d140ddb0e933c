"""Scan programs: cumsum, cumprod, logcumsumexp, cummax and cummin on the card.

A scan kernel is one loop kernel whose body scans its one reduction dimension
(the Kernel IR's ``scan``) and stores every point. The program divides the
rows (the kernel's pointwise ranges) over row groups of cores and, when rows
are few, cuts each row's scan into consecutive chunks over the cores of a row
group. Every core:

1. loads its tile (a box of rows x its chunk) into LX and runs the body up to
   the scan on it: the chunk's *local* inclusive scan, kept in LX in the
   compute dtype (every component: cummax keeps values and indices);
2. receives the carry - the scan of everything before its chunk, one state
   per row - from the previous core of its row group over the ring, combines
   it with its chunk's last column and sends the result on at once (the carry
   pass: one short vector step per hop), then combines the carry with the rest
   of the chunk;
3. runs the rest of the body (dtype casts) into an output tile and stores it.

A chunk too long for LX is cut again into sub-chunks that run in order on the
core, the carry passed from one to the next in LX. The division is chosen by
simulating the candidates' programs; a candidate whose program breaks a
hardware rule (two cores writing one stick) is not taken. The vector steps'
bodies are Kernel IR: the kernel's own body up to the scan, the combine
function of the scan inlined for the carry, the body after the scan.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any

import sympy

from spyre_shims import index as sidx
from spyre_shims.kernel_ir import Instr, KernelGroup, LoopKernel, Ref
from spyre_shims.ops import POINTWISE, torch_dtype
from spyre_shims.reference import compute_dtype, concrete

from spyre_adapter.model.bodies import index_cone
from spyre_adapter.model.errors import DoesNotFit
from spyre_adapter.model.machine import Machine
from spyre_adapter.model.program import (AddrGen, Candidate, CoreProgram, DmaGather, DmaLoad, DmaStore, LoopPlan, Lx,
                                         Operand, Program, Region, RingRecv, RingSend, Vec, itemsize)
from spyre_adapter.model.rules import first_violation
from spyre_adapter.model.timing import simulate
from spyre_adapter.scheduler.loop_layout import chunk_bounds, split_box
from spyre_adapter.scheduler.lx_alloc import Slot, SlotView, allocate

__all__ = ["is_scan", "unsupported", "plan_scan", "ScanShape"]

#: Ops the part of a scan body after the scan may hold (it becomes the finish step).
_POST_OPS = frozenset({"getitem", "constant", "to_dtype", "where", "store"})
#: Share of LX one tile's operands may take (the rest lets the next tile's loads overlap).
TILE_LX_FRACTION = 0.45

Box = tuple[tuple[int, int], ...]


def is_scan(kernel: Any) -> bool:
    """Whether ``kernel`` is a loop group holding a scan."""
    return isinstance(kernel, KernelGroup) and any(i.op == "scan" for lk in kernel.kernels for i in lk.body)


@dataclasses.dataclass(frozen=True)
class ScanShape:
    """What a scan body is made of: its scan (body position), the loads before
    it, the part after it, its components' dtypes."""

    kernel: LoopKernel
    scan: int
    loads: tuple[int, ...]
    dtypes: tuple[str, ...]

    @property
    def components(self) -> int:
        return len(self.dtypes)

    @property
    def state_dtypes(self) -> tuple[str, ...]:
        """The dtype each component is kept in between steps (its compute dtype)."""
        return tuple(str(compute_dtype(torch_dtype(d))).removeprefix("torch.") for d in self.dtypes)

    @property
    def stores(self) -> tuple[int, ...]:
        return tuple(k for k, i in enumerate(self.kernel.body) if i.op == "store")


def unsupported(kernel: KernelGroup) -> str | None:
    """Why no scan program can run ``kernel`` (None: one can). Structural only:
    sizes may still be symbols."""
    if len(kernel.kernels) != 1:
        return "a scan fused with other loop kernels"
    lk = kernel.kernels[0]
    if len(lk.reduction_ranges) != 1:
        return f"a scan over {len(lk.reduction_ranges)} dimensions"
    scans = [k for k, i in enumerate(lk.body) if i.op == "scan"]
    if len(scans) != 1:
        return "more than one scan in a body"
    s = scans[0]
    probe = {sym: sympy.Integer(7919 + 2 * k) for k, sym in enumerate(sorted(
        {x for i in lk.body for a in i.args if isinstance(a, sympy.Basic) for x in a.free_symbols}, key=str))}
    ivars, rvars = lk.index_vars()
    for k, ins in enumerate(lk.body):
        if ins.op in ("reduction", "store_reduction"):
            return f"{ins.op} in a scan body"
        if k > s and (ins.mask is not None or (ins.op not in _POST_OPS and ins.op not in POINTWISE)):
            return f"{ins.op} after the scan"
        if ins.op == "store" and (len(ins.args) > 3 and ins.args[3] is not None):
            return f"a {ins.args[3]} store in a scan body"
        if ins.op == "store" and k < s:
            return "a store before the scan"
        if ins.op == "load" and k > s:
            return "a load after the scan"
        if ins.op == "store":  # stores are DMAs of the output tile: affine, in order
            expr = sidx.as_expr(ins.args[1]).xreplace({x: v for x, v in probe.items() if x not in (*ivars, *rvars)})
            aff = sidx.affine(expr, (*ivars, *rvars))
            if aff is None or any(c < 0 for c in aff[1]):
                return f"a store of {ins.args[0]} at a non-affine or reversed index"
        if ins.op == "load" and k < s:
            cone = index_cone(lk.body, (k,)) - {k}
            if any(lk.body[p].op == "load" and _irregular(lk, p, probe) for p in cone):
                return f"a load of {ins.args[0]} indexed through another irregular load"
        if ins.op == "getitem" and not (isinstance(ins.args[0], Ref) and ins.args[0].id == s):
            return "getitem of a value other than the scan"
    if not any(i.op == "store" for i in lk.body[s + 1:]):
        return "a scan whose result is not stored"
    return None


def _irregular(lk: LoopKernel, pos: int, sizes: Mapping[sympy.Symbol, Any]) -> bool:
    """Whether load ``pos`` is gathered (masked, not affine in the tile, or
    reversed) rather than one DMA of a strided region."""
    ins = lk.body[pos]
    if ins.mask is not None:
        return True
    ivars, rvars = lk.index_vars()
    variables = (*ivars, *rvars)
    expr = sidx.as_expr(ins.args[1])
    expr = expr.xreplace({x: sympy.Integer(v) for x, v in sizes.items() if x not in variables and x in expr.free_symbols})
    aff = sidx.affine(expr, variables)
    return aff is None or any(c < 0 for c in aff[1])


def _shape(kernel: KernelGroup) -> ScanShape:
    lk = kernel.kernels[0]
    s = next(k for k, i in enumerate(lk.body) if i.op == "scan")
    loads = tuple(k for k, i in enumerate(lk.body[:s]) if i.op == "load")
    return ScanShape(lk, s, loads, tuple(lk.body[s].args[0]))


# ------------------------------------------------------------------ the vector steps' bodies

def _state(k: int) -> str:
    return f"state{k}"


def _local_body(sh: ScanShape) -> LoopKernel:
    """The body up to its scan, each component stored to the LX state tile."""
    body = list(sh.kernel.body[:sh.scan + 1])
    for k, dt in enumerate(sh.dtypes):
        body.append(Instr("getitem", (Ref(sh.scan), k), dt))
        body.append(Instr("store", (_state(k), sympy.Integer(0), Ref(len(body) - 1), None)))
    return dataclasses.replace(sh.kernel, name=f"{sh.kernel.name}_local", body=tuple(body))


def _flat_ranges(sh: ScanShape) -> tuple[sympy.Expr, ...]:
    return (*sh.kernel.ranges, *sh.kernel.reduction_ranges)


def _carry_body(sh: ScanShape) -> LoopKernel:
    """``applied = combine(carry, state)`` at every point: the scan's combine
    function inlined (the carry broadcast along the scanned dimension)."""
    n = sh.components
    combine = sh.kernel.body[sh.scan].args[2]
    body: list[Instr] = []
    for k in range(n):
        body.append(Instr("load", (f"carry{k}", sympy.Integer(0)), sh.state_dtypes[k]))
    for k in range(n):
        body.append(Instr("load", (_state(k), sympy.Integer(0)), sh.state_dtypes[k]))
    shift = 2 * n  # combine position j >= 2n lands at j here (arguments are the 2n loads)

    def ref(r: Any) -> Any:
        if isinstance(r, Ref):
            return r if r.id < 2 * n else Ref(r.id - 2 * n + shift)
        if isinstance(r, tuple):
            return tuple(ref(x) for x in r)
        return r
    for ins in combine[2 * n:-1]:
        body.append(dataclasses.replace(ins, args=ref(ins.args), mask=None))
    for k, r in enumerate(combine[-1].args):
        value = ref(r)
        if value.id < 2 * n:  # a component passed through unchanged: copied, not aliased
            body.append(Instr("to_dtype", (value, sh.state_dtypes[k]), sh.state_dtypes[k]))
            value = Ref(len(body) - 1)
        body.append(Instr("store", (f"applied{k}", sympy.Integer(0), value, None)))
    return LoopKernel(f"{sh.kernel.name}_carry", _flat_ranges(sh), (), tuple(body))


def _finish_body(sh: ScanShape) -> LoopKernel:
    """The body after the scan over the (applied) state tiles: casts, and the
    stores of the outputs into their LX tiles."""
    body: list[Instr] = []
    moved: dict[int, int] = {}
    ivars, _ = LoopKernel("x", _flat_ranges(sh), (), ()).index_vars()
    old_i, old_r = sh.kernel.index_vars()
    rename = {**dict(zip(old_i, ivars)), old_r[0]: ivars[-1]}

    def ref(a: Any) -> Any:
        if isinstance(a, Ref):
            return Ref(moved[a.id])
        if isinstance(a, tuple):
            return tuple(ref(x) for x in a)
        if isinstance(a, sympy.Basic):
            return a.xreplace(rename)
        return a
    for pos in range(sh.scan + 1, len(sh.kernel.body)):
        ins = sh.kernel.body[pos]
        if ins.op == "getitem":
            k = ins.args[1]
            ins = Instr("load", (_state(k), sympy.Integer(0)), sh.state_dtypes[k])
        else:
            ins = dataclasses.replace(ins, args=ref(ins.args))
        moved[pos] = len(body)
        body.append(ins)
    return LoopKernel(f"{sh.kernel.name}_finish", _flat_ranges(sh), (), tuple(body))


# ------------------------------------------------------------------ geometry

@dataclasses.dataclass(frozen=True)
class _Division:
    groups: int  # row groups
    split: int  # cores along the scan of each row group
    row_unit: int  # rows of the split dimension a row group takes at a time
    col_align: int  # chunk boundaries along the scan fall on multiples of this



def _affine(expr: Any, variables: Sequence[sympy.Symbol], sizes: Mapping[sympy.Symbol, int]) -> tuple[int, list[int]]:
    e = sidx.as_expr(expr)
    if e.free_symbols - set(variables):
        e = e.xreplace({s: sympy.Integer(sizes[s]) for s in e.free_symbols - set(variables) if s in sizes})
    aff = sidx.affine(e, variables)
    if aff is None:
        raise _NotPlannable(f"index {expr} is not affine at these sizes")
    return aff


class _NotPlannable(DoesNotFit):
    """A scan whose indices or stores no scan program of this shape expresses."""


def _row_split_dim(ranges: Sequence[int], groups: int) -> int | None:
    """The pointwise dimension row groups split: the outermost with at least
    ``groups`` rows, else the largest."""
    if not ranges:
        return None
    for d, n in enumerate(ranges):
        if n >= groups:
            return d
    return max(range(len(ranges)), key=lambda d: ranges[d])


def _stick_unit(coeffs: Sequence[int], isz: int, stick: int) -> int:
    """Smallest step along a dimension (of store coefficient ``c``) that moves a
    whole number of sticks for every store."""
    unit = 1
    for c in coeffs:
        need = stick // math.gcd(stick, abs(c) * isz) if c else 1
        unit = unit * need // math.gcd(unit, need)
    return unit


class _Builder:
    """Builds the scan program of one division (see the module docstring)."""

    def __init__(self, group: KernelGroup, sh: ScanShape, m: Machine, sizes: Mapping[sympy.Symbol, int],
                 name: str) -> None:
        self.group, self.sh, self.m, self.sizes, self.name = group, sh, m, sizes, name
        lk = sh.kernel
        self.ranges = [concrete(r, sizes) for r in lk.ranges]
        self.n = concrete(lk.reduction_ranges[0], sizes)
        self.rows = math.prod(self.ranges)
        ivars, rvars = lk.index_vars()
        variables = (*ivars, *rvars)
        self.dtypes = {b.name: b.dtype for b in group.buffers}
        #: loads gathered through addresses the core computes (masked, irregular, reversed)
        self.gathered = tuple(k for k in sh.loads if _irregular(lk, k, sizes))
        #: body position -> (buffer, dtype, (offset, coefficient per dim)) of the other loads and the stores
        self.accesses = {k: (lk.body[k].args[0], self.dtypes[lk.body[k].args[0]],
                             _affine(lk.body[k].args[1], variables, sizes))
                         for k in (*sh.loads, *sh.stores) if k not in self.gathered}
        self.local, self.carry, self.finish = _local_body(sh), _carry_body(sh), _finish_body(sh)
        #: LX bytes of one tile point: its loads (and their addresses), two state tiles, its outputs
        self.point_bytes = (sum(itemsize(dt) for _, dt, _ in self.accesses.values())
                            + sum(itemsize(self.dtypes[lk.body[k].args[0]]) + 8 for k in self.gathered)
                            + 2 * sum(itemsize(d) for d in sh.state_dtypes))

    # -- candidate divisions
    def divisions(self) -> list[_Division]:
        """Every split of the scan over 1, 2, 4... cores of a row group (row
        groups taking the other cores), and one core alone; boundaries on whole
        sticks of every output."""
        stick = self.m.stick_bytes
        stores = [self.accesses[k] for k in self.sh.stores]
        col_align = max(_stick_unit([c[-1]], itemsize(dt), stick) for _, dt, (_, c) in stores)
        out: list[_Division] = []
        split = 1
        while split <= min(self.m.cores, max(self.n, 1)):
            groups = max(1, min(self.m.cores // split, self.rows))
            dim = _row_split_dim(self.ranges, groups)
            row_unit = 1 if dim is None else max(1, min(self.ranges[dim], max(
                _stick_unit([c[dim]], itemsize(dt), stick) for _, dt, (_, c) in stores)))
            out.append(_Division(groups, split, row_unit, col_align))
            split *= 2
        out.append(_Division(1, 1, 1, 1))
        return list(dict.fromkeys(out))

    def group_boxes(self, d: _Division) -> list[Box]:
        """The rows of each row group, as boxes of the pointwise ranges."""
        full = tuple((0, n) for n in self.ranges)
        dim = _row_split_dim(self.ranges, d.groups)
        if dim is None or d.groups == 1:
            return [full]
        n = self.ranges[dim]
        units = -(-n // d.row_unit)
        cuts = sorted({min(n, (g * units // d.groups) * d.row_unit) for g in range(d.groups + 1)} | {n})
        return [full[:dim] + ((a, b),) + full[dim + 1:] for a, b in zip(cuts, cuts[1:]) if b > a]

    # -- the program
    def build(self, d: _Division) -> Program:
        budget = int(self.m.lx_usable_bytes * TILE_LX_FRACTION)
        bounds = chunk_bounds(self.n, d.split, d.col_align)
        spans = [(a, b) for a, b in zip(bounds, bounds[1:]) if b > a]
        streams: dict[int, list[Any]] = {}
        tags = iter(range(1, 1 << 30))
        tiles_per_core: dict[int, int] = {}
        boxes = self.group_boxes(d) if spans and self.rows else []
        for g, gbox in enumerate(boxes):
            cores = [g * d.split + p for p in range(len(spans))]
            longest = max(b - a for a, b in spans)
            for box in (split_box(gbox, max(1, budget // (longest * self.point_bytes))) if gbox else [()]):
                points = math.prod(hi - lo for lo, hi in box)
                sub = max(1, budget // (points * self.point_bytes))
                if sub < longest:  # sub-chunks of whole sticks, run in order on the core
                    sub = max(d.col_align, sub // d.col_align * d.col_align)
                handoff: tuple[int, list[int]] | None = None  # (sender, tags) of the carry into core p
                for p, (a, b) in enumerate(spans):
                    ins = streams.setdefault(cores[p], [])
                    tiles_per_core[cores[p]] = tiles_per_core.get(cores[p], 0) + 1
                    send = cores[p + 1] if p + 1 < len(spans) else None
                    carry = None
                    for s0 in range(a, b, sub):
                        s1 = min(b, s0 + sub)
                        carry = self.chunk(ins, box, s0, s1, carry, handoff if s0 == a else None,
                                           s1 < b or send is not None)
                    if send is not None:
                        assert carry is not None
                        sent = [next(tags) for _ in carry]
                        ins += [RingSend((send,), view, tag) for view, tag in zip(carry, sent)]
                        handoff = (cores[p], sent)
        cores_out = []
        for c in range(self.m.cores):
            instrs = streams.get(c)
            if not instrs:
                cores_out.append(CoreProgram(c, ()))
                continue
            out, table, _ = allocate(instrs, self.m.lx_usable_bytes, self.m.stick_bytes)
            cores_out.append(CoreProgram(c, out, table))
        plan = LoopPlan(row_cores=len(boxes), rsplit=len(spans), rows=self.rows, unit_rows=d.row_unit,
                        tiles=max(tiles_per_core.values(), default=0))
        return Program(self.name, "scan", self.group, (self.sh.kernel, self.local, self.carry, self.finish),
                       tuple(cores_out), plan, tuple((str(k), v) for k, v in self.sizes.items()))

    def _region(self, pos: int, box: Box) -> tuple[Region, tuple[int, ...], tuple[int, ...]]:
        """The DRAM region access ``pos`` touches over tile ``box`` (broadcast
        dims dropped), and per tile dim: kept (its index in the region) or -1."""
        name, _, (off, coeffs) = self.accesses[pos]
        start = off + sum(c * lo for c, (lo, _) in zip(coeffs, box))
        ext = [hi - lo for lo, hi in box]
        keep = tuple(k for k, (n, c) in enumerate(zip(ext, coeffs)) if c != 0 and n > 1)
        sizes = tuple(ext[k] for k in keep) or (1,)
        strides = tuple(coeffs[k] for k in keep) or (1,)
        where = [-1] * len(ext)
        for j, k in enumerate(keep):
            where[k] = j
        return Region(name, start, sizes, strides), sizes, tuple(where)

    def chunk(self, ins: list[Any], box: Box, s0: int, s1: int, carry: list[SlotView] | None,
              recv: tuple[int, list[int]] | None, out_needed: bool) -> list[SlotView] | None:
        """One tile (rows ``box`` x scan positions ``[s0, s1)``): load, local
        scan, carry in (from LX, or received), carry out, finish, store.
        Returns the carry out (per component, one state per row) when asked."""
        sh = self.sh
        tile = (*box, (s0, s1))
        shape = tuple(hi - lo for lo, hi in tile)
        rows = shape[:-1] or (1,)
        nrows = math.prod(rows)
        length = s1 - s0
        ops: list[Operand] = []
        for pos in sh.loads:
            if pos in self.gathered:
                continue
            region, sizes, where = self._region(pos, tile)
            dt = self.accesses[pos][1]
            slot = Slot(f"{region.buffer} in", math.prod(sizes) * itemsize(dt))
            dense = slot.view(dt, sizes)
            ins.append(DmaLoad(region, dense))
            strides = tuple(dense.strides[w] if w >= 0 else 0 for w in where)
            ops.append(Operand(pos, "tile", SlotView(slot, 0, dt, shape, strides)))
        ops += self._gather(ins, box, (s0, s1), shape, ops)
        states = [Slot(f"scan state {k}", math.prod(shape) * itemsize(dt)).view(dt, shape)
                  for k, dt in enumerate(sh.state_dtypes)]
        base = sh.scan + 1
        ops += [Operand(base + 2 * k + 1, "tile", v) for k, v in enumerate(states)]
        ins.append(Vec(1, box, ((s0, s1),), tuple(ops)))
        if recv is not None:
            peer, tags = recv
            carry = [Slot(f"carry in {k}", nrows * itemsize(dt)).view(dt, rows) for k, dt in enumerate(sh.state_dtypes)]
            ins += [RingRecv(peer, view, tag) for view, tag in zip(carry, tags)]
        last = [SlotView(v.slot, v.offset + (length - 1) * v.strides[-1] * itemsize(v.dtype), v.dtype, rows,
                         v.strides[:-1] or (0,)) for v in states]
        if carry is None:
            self._finish(ins, box, s0, s1, states)
            return last if out_needed else None
        n = sh.components

        def carry_ops(cols: int, state_views: list[SlotView], outs: list[SlotView]) -> tuple[Operand, ...]:
            full = (*rows[:len(shape) - 1], cols) if len(shape) > 1 else (cols,)
            o = [Operand(k, "tile", SlotView(c.slot, c.offset, c.dtype, full,
                                             (*(c.strides[:len(shape) - 1]), 0) if len(shape) > 1 else (0,)))
                 for k, c in enumerate(carry)]
            o += [Operand(n + k, "tile", v) for k, v in enumerate(state_views)]
            stores = [p for p, i in enumerate(self.carry.body) if i.op == "store"]
            o += [Operand(p, "tile", v) for p, v in zip(stores, outs)]
            return tuple(o)
        out: list[SlotView] | None = None
        if out_needed:  # the carry out first, so the next core starts while this one applies
            col = (*shape[:-1], 1)
            cols = [SlotView(v.slot, v.offset + (length - 1) * v.strides[-1] * itemsize(v.dtype), v.dtype, col,
                             (*v.strides[:-1], 0)) for v in states]
            outs = [Slot(f"carry out {k}", nrows * itemsize(dt)).view(dt, col) for k, dt in enumerate(sh.state_dtypes)]
            ins.append(Vec(2, (*box, (s1 - 1, s1)), None, carry_ops(1, cols, outs)))
            out = [SlotView(v.slot, v.offset, v.dtype, rows, v.strides[:-1] or (0,)) for v in outs]
        applied = [Slot(f"scan applied {k}", math.prod(shape) * itemsize(dt)).view(dt, shape)
                   for k, dt in enumerate(sh.state_dtypes)]
        ins.append(Vec(2, tile, None, carry_ops(length, states, applied)))
        self._finish(ins, box, s0, s1, applied)
        return out

    def _gather(self, ins: list[Any], box: Box, red: tuple[int, int], shape: tuple[int, ...],
                loaded: list[Operand]) -> list[Operand]:
        """The gathered loads of a tile: their DRAM element indices computed on
        the core (masked-off points -1, never fetched), then one gather each."""
        if not self.gathered:
            return []
        numel = math.prod(shape)
        body = self.sh.kernel.body
        targets = [(pos, Slot(f"addrs {body[pos].args[0]}@{pos}", numel * 8).view("int64", (numel,)))
                   for pos in self.gathered]
        cone = index_cone(self.local.body, self.gathered)
        ins.append(AddrGen(1, box, (red,), tuple(o for o in loaded if o.pos in cone), tuple(targets)))
        out = []
        for pos, addrs in targets:
            dt = self.dtypes[body[pos].args[0]]
            slot = Slot(f"{body[pos].args[0]} gathered", numel * itemsize(dt))
            ins.append(DmaGather(body[pos].args[0], addrs, slot.view(dt, (numel,))))
            out.append(Operand(pos, "tile", slot.view(dt, shape)))
        return out

    def _finish(self, ins: list[Any], box: Box, s0: int, s1: int, states: list[SlotView]) -> None:
        """The body after the scan into output tiles, and their stores."""
        tile = (*box, (s0, s1))
        shape = tuple(hi - lo for lo, hi in tile)
        ops: list[Operand] = []
        stores: list[tuple[int, SlotView]] = []
        for p, i in enumerate(self.finish.body):
            if i.op == "load":
                ops.append(Operand(p, "tile", states[int(i.args[0].removeprefix("state"))]))
            elif i.op == "store":
                orig = self.sh.scan + 1 + p
                dt = self.accesses[orig][1]
                view = Slot(f"{i.args[0]} out", math.prod(shape) * itemsize(dt)).view(dt, shape)
                ops.append(Operand(p, "tile", view))
                stores.append((orig, view))
        ins.append(Vec(3, tile, None, tuple(ops)))
        for orig, view in stores:
            region, sizes, where = self._region(orig, tile)
            if any(w < 0 and n > 1 for w, n in zip(where, shape)):
                raise _NotPlannable("a store that writes one element for several points")
            ins.append(DmaStore(SlotView(view.slot, 0, view.dtype, sizes, Lx.dense(0, view.dtype, sizes).strides), region))


def plan_scan(group: KernelGroup, m: Machine, sizes: Mapping[sympy.Symbol, int], name: str) -> Program:
    """The cheapest scan program of ``group`` (by simulating each division's
    program) among those that obey every hardware rule. Raises
    :class:`~spyre_adapter.model.errors.DoesNotFit` when none does."""
    why = unsupported(group)
    if why is not None:
        raise DoesNotFit(f"no scan program: {why}", "scan programs", name)
    sh = _shape(group)
    try:
        b = _Builder(group, sh, m, sizes, name)
    except _NotPlannable as exc:
        raise DoesNotFit(f"no scan program: {exc}", "scan programs", name) from None
    numels = {x.name: concrete(x.storage_numel, sizes) for x in group.buffers}
    best: tuple[float, Program] | None = None
    tried: list[Candidate] = []
    errors: list[str] = []
    for d in b.divisions():
        try:
            p = b.build(d)
        except DoesNotFit as exc:
            errors.append(f"{d.groups}x{d.split}: {exc}")
            continue
        bad = first_violation(p, m, numels)
        if bad is not None:
            errors.append(f"{d.groups}x{d.split}: {bad}")
            continue
        ns = simulate(p, m, keep_events=False).total_ns
        if any((c.row_cores, c.rsplit) == (p.plan.row_cores, p.plan.rsplit) for c in tried):
            continue  # the same division reached from another candidate
        tried.append(Candidate(p.plan.row_cores, p.plan.rsplit, ns))
        if best is None or ns < best[0]:
            best = (ns, p)
    if best is None:
        raise DoesNotFit("no division of the scan fits", f"lx_usable_bytes={m.lx_usable_bytes} per core", name,
                         errors[-3:] or ["none tried"])
    ns, p = best
    plan = dataclasses.replace(p.plan, estimate_ns=ns, candidates=tuple(sorted(tried, key=lambda c: c.estimate_ns)))
    return dataclasses.replace(p, plan=plan)
