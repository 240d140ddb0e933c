"""Addressed Spyre programs for the matmul family: a core grid (batch x M x N x
K) with its tiles walked in one of three loop orders.

Per output tile a core accumulates ``acc (+)= A_k @ B_k`` in an fp32 LX tile
over K steps of ``tk``; A and B slices stream through LX (a stationary panel of
one of them stays for the whole pass in orders "a" and "b"). Cores that need
the same operand slice (the same rows of A for every core of a grid row, the
same columns of B for a grid column) load one part each and exchange the rest
over the ring. A K split sends fp32 partial tiles to the first core of the K
group, which adds them. An epilogue vector step turns the accumulator into the
output dtype (alpha, beta and bias of addmm applied) before it is stored."""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Mapping, Sequence
from typing import Any

import sympy

from spyre_shims.kernel_ir import BufferSpec, ExternKernel
from spyre_shims.reference import concrete

from spyre_adapter.model import loops
from spyre_adapter.model.machine import Machine
from spyre_adapter.model.program import (CoreProgram, DmaLoad, DmaStore, MatmulPlan, Operand, Pe, Program, Region,
                                         Resident, RingRecv, RingSend, Vec, itemsize)
from spyre_adapter.scheduler.lx_alloc import Slot, SlotView, allocate
from spyre_adapter.scheduler.step_bodies import accumulate, epilogue

__all__ = ["build", "build_looped", "build_k_looped", "k_looped", "k_loop_split", "loop_unit", "loop_pays", "LOOP_MIN_UNITS", "tile_loops", "span_excess"]


class _View:
    """A matmul operand's logical view over its flat buffer (batch, rows, cols)."""

    def __init__(self, spec: BufferSpec, sizes: Mapping[sympy.Symbol, int]) -> None:
        self.name = spec.name
        self.dtype = spec.dtype
        self.size = [concrete(x, sizes) for x in spec.size]
        self.stride = [concrete(x, sizes) for x in spec.stride]
        self.offset = concrete(spec.offset, sizes)
        # Fewer dims broadcast from the left (a 0-d bias is one value for every element).
        pad = 3 - len(self.size)
        self.size, self.stride = [1] * pad + self.size, [0] * pad + self.stride

    def region(self, b: int, r0: int, r1: int, c0: int, c1: int) -> Region:
        """Rows [r0, r1) x cols [c0, c1) of batch ``b`` (a broadcast dim reads index 0)."""
        sb, sr, sc = self.stride
        b = b if self.size[0] > 1 else 0
        r0, r1 = (r0, r1) if self.size[1] > 1 else (0, 1)
        if self.size[2] == 1:  # one column read for every column of the tile
            c0, sc = 0, 0
        off = self.offset + b * sb + r0 * sr + c0 * sc
        return Region(self.name, off, (r1 - r0, c1 - c0), (sr if r1 - r0 > 1 else 0, sc if c1 - c0 > 1 else 0))


def _ext(total: int, block: int, i: int) -> tuple[int, int]:
    return min(total, i * block), min(total, (i + 1) * block)


def _core_blocks(s: Any, g: Any, m: Machine) -> list[tuple[tuple[int, ...], tuple[tuple[int, int], ...]]]:
    """Per core of grid ``g``, in core order: its grid coordinate and its block,
    [lo, hi) of batch, rows, columns and K (empty at the edge of a ragged split)."""
    bb, mb, nb, kb = per_core(s, g, m)
    return [((ib, im, in_, ik), (_ext(s.batch, bb, ib), _ext(s.m, mb, im), _ext(s.n, nb, in_), _ext(s.k, kb, ik)))
            for ib, im, in_, ik in itertools.product(range(g.gb), range(g.gm), range(g.gn), range(g.gk))]


def span_excess(kernel: ExternKernel, s: Any, g: Any, m: Machine, sizes: Mapping[sympy.Symbol, int]) -> str | None:
    """Why a core of grid ``g`` would address more of an operand than the per-core
    span allows (None: every core is within it), from each core's block of each
    operand view before anything is built: the span is the grid's, whatever the
    tiling, and a program's rules check finds it only after a whole build."""
    a, b, out = (_View(x, sizes) for x in (kernel.inputs[-2], kernel.inputs[-1], kernel.output))
    for _, ((b0, b1), rows, cols, ks) in _core_blocks(s, g, m):
        if min(hi - lo for lo, hi in ((b0, b1), rows, cols, ks)) <= 0:
            continue
        for what, view, r, c in (("a", a, rows, ks), ("b", b, ks, cols), ("out", out, rows, cols)):
            ends = [view.region(batch, *r, *c).bounds() for batch in (b0, b1 - 1)]
            nbytes = (max(hi for _, hi in ends) - min(lo for lo, _ in ends) + 1) * itemsize(view.dtype)
            if nbytes > m.span_bytes_per_core:
                return f"per-core span of {view.name} ({what}): {nbytes} B > {m.span_bytes_per_core} B"
    return None


class _Emitter:
    def __init__(self, kernel: ExternKernel, s: Any, g: Any, m: Machine, sizes: Mapping[sympy.Symbol, int],
                 share: bool) -> None:
        self.k, self.s, self.g, self.m, self.share = kernel, s, g, m, share
        bias = kernel.op in ("addmm", "baddbmm")
        self.a = _View(kernel.inputs[-2], sizes)
        self.b = _View(kernel.inputs[-1], sizes)
        self.bias = _View(kernel.inputs[0], sizes) if bias else None
        self.out = _View(kernel.output, sizes)
        self.alpha = float(kernel.attr("alpha", 1)) if bias else 1.0
        self.beta = float(kernel.attr("beta", 1)) if bias else 0.0
        self.instrs: dict[int, list[Any]] = {}
        self.tag = 0
        self.bodies: list[Any] = []
        self.body_index: dict[Any, int] = {}

    def body(self, lk: Any) -> int:
        if lk not in self.body_index:
            self.body_index[lk] = len(self.bodies)
            self.bodies.append(lk)
        return self.body_index[lk]

    def next_tag(self) -> int:
        self.tag += 1
        return self.tag

    def build(self, name: str, sizes: Mapping[sympy.Symbol, int], plan: MatmulPlan) -> Program:
        s, g, m = self.s, self.g, self.m
        coords, block_list = zip(*_core_blocks(s, g, m))
        core_of = {c: n for n, c in enumerate(coords)}
        blocks = dict(enumerate(block_list))

        def shape(c: int) -> tuple[int, ...]:
            return tuple(hi - lo for lo, hi in blocks[c])

        # Cores share an operand slice only with cores that walk the same tiles.
        a_groups, b_groups = {}, {}
        for c, (ib, im, in_, ik) in enumerate(coords):
            if not min(shape(c)) > 0:
                continue
            if self.share:
                a_groups[c] = [core_of[(ib, im, j, ik)] for j in range(g.gn) if shape(core_of[(ib, im, j, ik)]) == shape(c)]
                b_groups[c] = [core_of[(ib, j, in_, ik)] for j in range(g.gm) if shape(core_of[(ib, j, in_, ik)]) == shape(c)]
            else:
                a_groups[c], b_groups[c] = [c], [c]
        streams = {c: self.core_steps(c, blocks[c], coords[c]) for c in blocks if min(shape(c)) > 0}
        for c in streams:
            self.instrs.setdefault(c, [])
        n_steps = max((len(v) for v in streams.values()), default=0)
        self.slots: dict[tuple[int, Any], Slot] = {}
        # K loops: every core walks the same steps, so the loops' iterations line up
        # across cores (their ring tags too); a core's runs, by its written steps
        marks = {tuple(v) for c, v in self.kmarks.items() if c in streams} if self.kfold else set()
        if len(marks) > 1 or (marks and len(self.kmarks) != len(streams)):
            raise _NoKLoop("cores walk K differently")
        at_mark = {t: (n, trips) for *ts, trips in (next(iter(marks)) if marks else ()) for n, t in enumerate(ts)}
        written: dict[int, list[int]] = {c: [] for c in streams}
        runs: dict[int, list[loops.Run]] = {c: [] for c in streams}
        tags: list[int] = []
        for t in range(n_steps + 1):
            if t in at_mark:
                n, trips = at_mark[t]
                tags.append(self.tag)
                for c in streams:
                    written[c].append(len(self.instrs[c]))
                if n == 3:  # three iterations written: the tags of the others are taken
                    d = tags[1] - tags[0]
                    ws = [written[c] for c in streams]
                    if tags[2] - tags[1] != d or tags[3] - tags[2] != d or any(
                            w[1] - w[0] != w[2] - w[1] or w[3] - w[2] != w[2] - w[1] for w in ws):
                        raise _NoKLoop("K loop iterations differ")
                    self.tag += (trips - 3) * d
                    for c in streams:
                        w = written[c]
                        runs[c].append(loops.Run(w[0], w[1] - w[0], trips))
                        written[c] = []
                    tags = []
            if t == n_steps:
                break
            for c in sorted(streams):
                if t < len(streams[c]):
                    self.emit(c, streams[c][t], a_groups, b_groups, coords, core_of, streams, t)
        cores = []
        for c in range(m.cores):
            instrs = self.instrs.get(c, [])
            if not instrs:
                cores.append(CoreProgram(c, ()))
                continue
            out, table, _ = allocate(instrs, m.lx_usable_bytes, m.stick_bytes, periodic=self.periodic)
            if runs.get(c):
                folded = loops.fold_runs(out, table, runs[c])
                if folded is None:
                    raise _NoKLoop("K loop iterations do not move alike")
                out, table = folded
            cores.append(CoreProgram(c, out, table))
        return Program(name, "matmul", self.k, tuple(self.bodies), tuple(cores), plan,
                       tuple((str(k), v) for k, v in sizes.items()), lx_in=tuple(self.a_held))

    # ---------------------------------------------------------- per-core step lists
    def core_steps(self, c: int, block: Any, coord: Any) -> list[tuple]:
        """The core's steps in order: ("a"|"b", batch, tile, k-step, first) loads,
        ("pe", ...) multiply-accumulates and ("done", batch, m-tile, n-tile) ends
        of output tiles. Cores of a sharing group get identical sequences."""
        g = self.g
        (b0, b1), (r0, r1), (c0, c1), (k0, k1) = block
        tm, tn, tk = min(g.tm, r1 - r0), min(g.tn, c1 - c0), min(g.tk, k1 - k0)
        mts = [(r0 + i, min(tm, r1 - r0 - i)) for i in range(0, r1 - r0, tm)]
        nts = [(c0 + i, min(tn, c1 - c0 - i)) for i in range(0, c1 - c0, tn)]
        kts = [(k0 + i, min(tk, k1 - k0 - i)) for i in range(0, k1 - k0, tk)]
        pairs = [(mt, nt) for nt in nts for mt in mts] if g.order == "b" else [(mt, nt) for mt in mts for nt in nts]
        steps: list[tuple] = []
        if self.tiles is not None:  # a prefix of the program: its first output tiles
            per_batch = max(1, len(pairs))
            b1 = min(b1, b0 + -(-self.tiles // per_batch))
        for bi in range(b0, b1):
            if self.tiles is not None:
                pairs = pairs[:self.tiles - (bi - b0) * per_batch]
            seen_a: set[int] = set()
            seen_b: set[int] = set()
            for mt, nt in pairs:
                walk = list(enumerate(kts))
                folded = k_loop_split(len(kts)) if self.kfold else None
                if folded is not None:  # the K loop's first three iterations stand for all of it
                    head, period, trips, tail = folded
                    walk = walk[:head + 3 * period] + walk[len(kts) - tail:]
                marks: list[int] = []
                for n, (ki, kt) in enumerate(walk):
                    if folded is not None and n in (head, head + period, head + 2 * period, head + 3 * period):
                        marks.append(len(steps))
                    if g.order != "a" or mt[0] not in seen_a:
                        steps.append(("a", bi, mt, kt, ki))
                    if g.order != "b" or nt[0] not in seen_b:
                        steps.append(("b", bi, kt, nt, ki))
                    steps.append(("pe", bi, mt, nt, kt, ki))
                if folded is not None:
                    self.kmarks.setdefault(c, []).append((*marks, folded[2]))
                seen_a.add(mt[0])
                seen_b.add(nt[0])
                steps.append(("done", bi, mt, nt))
        return steps

    # ---------------------------------------------------------- emitting
    def slot(self, c: int, key: Any, nbytes: int, name: str, hold: bool = False) -> Slot:
        sl = self.slots.get((c, key))
        if sl is None:
            sl = Slot(name, nbytes)
            self.slots[(c, key)] = sl
        return sl

    def operand_view(self, c: int, which: str, bi: int, tile: tuple, ktile: tuple) -> SlotView:
        """The LX view of an A (rows x k) or B (k x cols) slice; stationary panels
        keep every k slice of their tile."""
        s, g = self.s, self.g
        isz = s.isz
        dt = self.a.dtype if which == "a" else self.b.dtype
        (t0, tlen), (k0, klen) = tile, ktile
        stationary = (which == "a" and g.order == "a") or (which == "b" and g.order == "b")
        if stationary:
            blk = self.kblock(c)
            kk = blk[1] - blk[0]
            key = (which, "panel", bi, t0)
            sl = self.slot(c, key, tlen * kk * isz, f"{which.upper()} panel")
            if which == "a":
                return sl.view(dt, (tlen, klen), (kk, 1), (k0 - blk[0]) * isz)
            return sl.view(dt, (klen, tlen), (tlen, 1), (k0 - blk[0]) * tlen * isz)
        # streamed slices: two buffers alternate (the next slice loads during this step's multiply)
        n = self.counter(c, which)
        key = (which, "stream", n)
        nbytes = tlen * klen * isz
        sl = Slot(f"{which.upper()} slice", nbytes)
        self.slots[(c, key)] = sl
        return sl.view(dt, (tlen, klen) if which == "a" else (klen, tlen))

    def counter(self, c: int, which: str) -> int:
        key = (c, "n_" + which)
        n = self.slots.get(key, 0)  # type: ignore[arg-type]
        self.slots[key] = n + 1  # type: ignore[assignment]
        return n  # type: ignore[return-value]

    def kblock(self, c: int) -> tuple[int, int]:
        return self._kblocks[c]

    def emit(self, c: int, step: tuple, a_groups: dict, b_groups: dict, coords: list, core_of: dict,
             streams: dict, t: int) -> None:
        ins = self.instrs[c]
        kind = step[0]
        if kind == "a" and self.a_held:
            _, bi, tile, ktile, ki = step
            self.held_a(c, bi, tile, ktile, t, coords, core_of, streams)
            return
        if kind in ("a", "b"):
            _, bi, t1, t2, ki = step
            tile, ktile = (t1, t2) if kind == "a" else (t2, t1)
            view = self.operand_view(c, kind, bi, tile, ktile)
            self.current[(c, kind)] = view
            group = (a_groups if kind == "a" else b_groups)[c]
            if len(group) == 1:
                ins.append(DmaLoad(self.region(kind, bi, tile, ktile), view))
                return
            # This core loads its part of the slice; the group exchanges parts over the ring.
            cuts = self.part_cuts(view.sizes[0], view.strides[0] * self.s.isz, len(group))
            for j, owner in enumerate(group):
                a0, a1 = cuts[j], cuts[j + 1]
                if a1 <= a0:
                    continue
                part = view.sub(a0 * view.strides[0], (a1 - a0, view.sizes[1]), view.strides, self.s.isz)
                tag = self.group_tag(kind, group, t, j)
                if owner == c:
                    ins.append(DmaLoad(self.region(kind, bi, tile, ktile, (a0, a1)), part))
                    others = tuple(x for x in group if x != c)
                    ins.append(RingSend(others, part, tag))
                else:
                    ins.append(RingRecv(owner, part, tag))
            return
        if kind == "pe":
            _, bi, mt, nt, kt, ki = step
            acc = self.acc_view(c, bi, mt, nt)
            a = self.current[(c, "a")] if self.g.order != "a" else self.operand_view_existing(c, "a", bi, mt, kt)
            b = self.current[(c, "b")] if self.g.order != "b" else self.operand_view_existing(c, "b", bi, nt, kt)
            ins.append(Pe(a, b, acc, ki > 0))
            for view in (a, b, acc):
                self.keep_previous(c, view.slot, len(ins) - 1)
            return
        _, bi, mt, nt = step
        self.finish(c, bi, mt, nt, coords, core_of)

    def part_cuts(self, rows: int, row_bytes: int, parts: int) -> list[int]:
        """Row bounds of a group's ``parts`` of a slice: as even as they can be
        with every part starting on a stick (a DMA's LX address must; a row of
        2160 bytes puts only every 8th row on one), so some parts may be empty."""
        q = self.m.stick_bytes // math.gcd(row_bytes, self.m.stick_bytes)
        return [min(rows, -(-(rows * j // parts) // q) * q) for j in range(parts)] + [rows]

    def held_a(self, c: int, bi: int, tile: tuple, ktile: tuple, t: int, coords: list, core_of: dict,
               streams: dict) -> None:
        """A rows an earlier kernel left in the LX of the core that computed them:
        used in place there, sent over the ring to the other cores that need them
        at this step (one multicast per holder and slice)."""
        (t0, tlen), (k0, klen) = tile, ktile
        holder = next((r for r in self.a_held if r.lo <= t0 * self.kdim + k0
                       and (t0 + tlen - 1) * self.kdim + k0 + klen <= r.hi), None)
        if holder is None:
            view = self.operand_view(c, "a", bi, tile, ktile)
            self.current[(c, "a")] = view
            self.instrs[c].append(DmaLoad(self.region("a", bi, tile, ktile), view))
            return
        ib, im, _, ik = coords[c]
        group = [core_of[(ib, im, j, ik)] for j in range(self.g.gn)
                 if core_of[(ib, im, j, ik)] in streams and len(streams[core_of[(ib, im, j, ik)]]) > t
                 and streams[core_of[(ib, im, j, ik)]][t][:4] == ("a", bi, tile, ktile)]
        key = (t, tuple(group), holder.core)
        if key in self.held_done:
            return
        self.held_done.add(key)
        isz = self.s.isz
        off = (t0 * self.kdim + k0 - holder.lo) * isz
        src = SlotView(self.held_slot(holder), off, self.a.dtype, (tlen, klen), (self.kdim, 1))
        receivers = [x for x in group if x != holder.core]
        if holder.core in group:
            self.current[(holder.core, "a")] = src
        if receivers:
            tag = self.next_tag()
            self.instrs.setdefault(holder.core, []).append(RingSend(tuple(receivers), src, tag))
            for x in receivers:
                view = self.operand_view(x, "a", bi, tile, ktile)
                self.current[(x, "a")] = view
                self.instrs[x].append(RingRecv(holder.core, view, tag))

    def held_slot(self, r: Any) -> Slot:
        key = ("held", r.core)
        if key not in self.held_slots:
            self.held_slots[key] = Slot(f"{r.buffer}[{r.lo}:{r.hi}] held", (r.hi - r.lo) * itemsize(r.dtype),
                                        fixed=r.addr)
        return self.held_slots[key]

    def operand_view_existing(self, c: int, which: str, bi: int, tile: tuple, ktile: tuple) -> SlotView:
        """A slice of a stationary panel already loaded (or being loaded) this pass."""
        s = self.s
        dt = self.a.dtype if which == "a" else self.b.dtype
        blk = self.kblock(c)
        kk = blk[1] - blk[0]
        sl = self.slots[(c, (which, "panel", bi, tile[0]))]
        (_, tlen), (k0, klen) = tile, ktile
        if which == "a":
            return sl.view(dt, (tlen, klen), (kk, 1), (k0 - blk[0]) * s.isz)
        return sl.view(dt, (klen, tlen), (tlen, 1), (k0 - blk[0]) * tlen * s.isz)

    def keep_previous(self, c: int, slot: Slot, index: int) -> None:
        """Double buffering: the slot used before this one (for the same role)
        stays allocated until this one is first used, so their transfers overlap."""
        role = slot.name
        prev = self.previous.get((c, role))
        if prev is not None and prev is not slot:
            prev.hold_until = max(prev.hold_until, index)
        self.previous[(c, role)] = slot

    def group_tag(self, kind: str, group: list[int], t: int, j: int) -> int:
        key = (kind, tuple(group), t, j)
        if key not in self.tags:
            self.tags[key] = self.next_tag()
        return self.tags[key]

    def region(self, kind: str, bi: int, tile: tuple, ktile: tuple, part: tuple[int, int] | None = None) -> Region:
        (t0, tlen), (k0, klen) = tile, ktile
        if kind == "a":
            r0, r1 = (t0 + part[0], t0 + part[1]) if part else (t0, t0 + tlen)
            return self.a.region(bi, r0, r1, k0, k0 + klen)
        r0, r1 = (k0 + part[0], k0 + part[1]) if part else (k0, k0 + klen)
        return self.b.region(bi, r0, r1, t0, t0 + tlen)

    def acc_view(self, c: int, bi: int, mt: tuple, nt: tuple) -> SlotView:
        key = ("acc", bi, mt[0], nt[0])
        sl = self.slots.get((c, key))
        if sl is None:
            sl = Slot("acc", mt[1] * nt[1] * 4)
            self.slots[(c, key)] = sl
        return sl.view("float32", (mt[1], nt[1]))

    def finish(self, c: int, bi: int, mt: tuple, nt: tuple, coords: list, core_of: dict) -> None:
        """The end of an output tile: K-split partials to the first K core and
        added there; the epilogue; the store."""
        ins = self.instrs[c]
        g = self.g
        ib, im, in_, ik = coords[c]
        acc = self.acc_view(c, bi, mt, nt)
        if g.gk > 1:
            kcores = [core_of[(ib, im, in_, j)] for j in range(g.gk) if (ib, im, in_, j) in core_of]
            kcores = [x for x in kcores if x in self.instrs]
            if c != kcores[0]:
                tag = self.k_tags.setdefault((kcores[0], bi, mt[0], nt[0], c), self.next_tag())
                ins.append(RingSend((kcores[0],), acc, tag))
                return
            for other in kcores[1:]:
                tag = self.k_tags.setdefault((c, bi, mt[0], nt[0], other), self.next_tag())
                part = Slot("partial sums", mt[1] * nt[1] * 4).view("float32", (mt[1] * nt[1],))
                ins.append(RingRecv(other, part, tag))
                flat = acc.slot.view("float32", (mt[1] * nt[1],))
                body = self.body(accumulate(mt[1] * nt[1]))
                ins.append(Vec(body, ((0, mt[1] * nt[1]),), None,
                               (Operand(0, "window", flat), Operand(1, "window", part), Operand(3, "window", flat))))
        s = self.s
        out_dt = self.out.dtype
        bias_kind = s.bias if (self.bias is not None and self.beta != 0) else ""
        lk = epilogue(mt[1], nt[1], out_dt, self.alpha, self.beta, bias_kind)
        body = self.body(lk)
        operands = [Operand(0, "window", acc.slot.view("float32", (mt[1] * nt[1],)))]
        if bias_kind:
            pos = next(p for p, x in enumerate(lk.body) if x.op == "load" and x.args[0] == "bias")
            if bias_kind == "row":
                region = self.bias.region(bi, 0, 1, nt[0], nt[0] + nt[1])  # type: ignore[union-attr]
                n = nt[1]
            else:
                region = self.bias.region(bi, mt[0], mt[0] + mt[1], nt[0], nt[0] + nt[1])  # type: ignore[union-attr]
                n = mt[1] * nt[1]
            bview = Slot("bias", n * itemsize(self.bias.dtype)).view(self.bias.dtype, (n,))  # type: ignore[union-attr]
            ins.append(DmaLoad(region, bview.sub(0, region.sizes, _dense(region.sizes), itemsize(self.bias.dtype))))  # type: ignore[union-attr]
            operands.append(Operand(pos, "window", bview))
        out_slot = Slot("out tile", mt[1] * nt[1] * itemsize(out_dt))
        out_view = out_slot.view(out_dt, (mt[1] * nt[1],))
        operands.append(Operand(len(lk.body) - 1, "window", out_view))
        ins.append(Vec(body, ((0, mt[1]), (0, nt[1])), None, tuple(sorted(operands, key=lambda o: o.pos))))
        self.keep_previous(c, out_slot, len(ins) - 1)
        region = self.out.region(bi, mt[0], mt[0] + mt[1], nt[0], nt[0] + nt[1])
        ins.append(DmaStore(out_slot.view(out_dt, region.sizes), region))


def _dense(sizes: tuple[int, ...]) -> tuple[int, ...]:
    strides, acc = [], 1
    for n in reversed(sizes):
        strides.insert(0, acc if n > 1 else 0)
        acc *= n
    return tuple(strides)


def per_core(s: Any, g: Any, m: Machine) -> tuple[int, int, int, int]:
    """Per-core extents (batch, M, N, K) of matmul shape ``s`` on grid ``g``;
    N rounded up to whole sticks of the output."""
    stick = m.stick_elems(s.out_isz)
    n = -(-s.n // g.gn)
    return -(-s.batch // g.gb), -(-s.m // g.gm), -(-n // min(stick, s.n)) * min(stick, s.n), -(-s.k // g.gk)


def tile_loops(s: Any, g: Any, m: Machine) -> tuple[int, int]:
    """The busiest core's output tiles, and how many of them one pass of its
    stationary panel covers (the period its loop nest repeats with): the row
    tiles under one column panel of B in order "b", the column tiles of one row
    panel of A in order "a", 1 in order "c" (nothing stays)."""
    bb, mb, nb, _ = per_core(s, g, m)
    n_mt, n_nt = -(-mb // min(g.tm, mb)), -(-nb // min(g.tn, nb))
    return bb * n_mt * n_nt, n_mt if g.order == "b" else n_nt if g.order == "a" else 1


#: K steps of a tile's walk kept out of its K loop before and after it (the
#: first step starts the accumulator, the streamed slices' buffers settle into
#: their alternation), the loop's period in K steps (two buffers alternate), and
#: the fewest iterations a K loop is written with: a walk of 32 K steps or more.
#: Shorter walks gain too little from the loop for what folding it costs, and the
#: program is simulated and run unrolled all the same (a Llama-3.1-8B layer's
#: 16-step walks planned 13.5 s slower looped: 77.1 against 63.6 s).
K_HEAD, K_TAIL, K_PERIOD, K_MIN_TRIPS = 2, 2, 2, 14


def k_loop_split(nk: int) -> tuple[int, int, int, int] | None:
    """How a tile's walk of ``nk`` K steps is written as a loop: (K steps before
    it, K steps per iteration, iterations, K steps after it); None when the walk is
    too short to gain from a loop."""
    middle = nk - K_HEAD - K_TAIL
    trips = middle // K_PERIOD
    if trips < K_MIN_TRIPS:
        return None
    return K_HEAD, K_PERIOD, trips, K_TAIL + middle % K_PERIOD


class _NoKLoop(Exception):
    """The program's K walks do not make one loop per tile alike on every core."""


def k_looped(s: Any, g: Any, m: Machine) -> bool:
    """Whether the busiest core's tiles walk K long enough to be written as loops
    (:func:`build_k_looped`)."""
    _, _, _, kb = per_core(s, g, m)
    return k_loop_split(-(-kb // min(g.tk, kb))) is not None


def build_k_looped(kernel: ExternKernel, s: Any, g: Any, m: Machine, sizes: Mapping[sympy.Symbol, int], name: str,
                   share: bool, plan: MatmulPlan, tiles: int | None = None,
                   a_held: Sequence[Resident] = ()) -> Program | None:
    """The program of :func:`build` with each output tile's K walk written as a
    loop: the builder writes three of its iterations (and the steps around them at
    their real addresses, offsets and ring tags) and folds them
    (:func:`spyre_adapter.model.loops.fold_runs`), so building, checking and
    simulating grow with the tiles, not with K. Unrolled, it is the program
    :func:`build` writes, step for step (test_matmul.py). None when the cores'
    walks differ (edge blocks of a K split) or the iterations do not move alike.
    ``tiles``, ``a_held``: as :func:`build` has them."""
    try:
        return build(kernel, s, g, m, sizes, name, share, plan, a_held, tiles=tiles, kloop=True)
    except _NoKLoop:
        return None


def build(kernel: ExternKernel, s: Any, g: Any, m: Machine, sizes: Mapping[sympy.Symbol, int], name: str,
          share: bool, plan: MatmulPlan, a_held: Sequence[Resident] = (), tiles: int | None = None,
          periodic: bool = True, kloop: bool = False) -> Program:
    """The program of matmul ``kernel`` on grid ``g``; raises
    :class:`~.lx_alloc.LxFull` when its tiles do not fit. ``a_held``: shares of
    the A operand an earlier kernel left in LX (each a run of whole rows).
    ``tiles``: only every core's first ``tiles`` output tiles (a prefix of the
    program, for timing extrapolation; it computes part of the output).
    ``periodic``: LX addresses by role (see :func:`.lx_alloc.allocate`; the
    programs fold into loops), else first fit. ``kloop``: each tile's K walk
    written as a loop (see :func:`build_k_looped`; raises :class:`_NoKLoop`)."""
    e = _Emitter(kernel, s, g, m, sizes, share and not a_held)
    e.tiles = tiles
    e.periodic = periodic
    e.kfold = kloop
    e.kmarks = {}
    e.a_held = list(a_held)
    e.held_done = set()
    e.held_slots = {}
    e.kdim = s.k
    e.current = {}
    e.previous = {}
    e.tags = {}
    e.k_tags = {}
    bb, mb, nb, kb = per_core(s, g, m)
    coords = list(itertools.product(range(g.gb), range(g.gm), range(g.gn), range(g.gk)))
    e._kblocks = {c: _ext(s.k, kb, co[3]) for c, co in enumerate(coords)}
    return e.build(name, sizes, plan)


#: A program is built looped (:func:`build_looped`) when its cores' walks are
#: at least this many loop units long: its three prefixes (3 + 4 + 5 units) then
#: cost at most half of building it unrolled.
LOOP_MIN_UNITS = 24


def loop_unit(s: Any, g: Any, m: Machine) -> int | None:
    """Output tiles per iteration of the loop a core's tile walk on grid ``g`` folds
    into: two passes of the walk's inner loop (the stationary panel's two LX
    buffers alternate by pass, the tiles' by tile; in order "c" nothing is
    stationary: one pass), doubled when odd; two tiles when the walk is one pass.
    None for a walk with a batch loop around it, or whose tiles are not all whole:
    prefixes end on whole tiles, so they cannot show an edge tile the whole walk
    would end on (nor a core whose block is smaller)."""
    bb, mb, nb, _ = per_core(s, g, m)
    tiles, _ = tile_loops(s, g, m)
    if bb != 1 or tiles == 0 or s.m % (g.gm * min(g.tm, mb)) or s.n % (g.gn * min(g.tn, nb)):
        return None
    inner = -(-mb // min(g.tm, mb)) if g.order == "b" else -(-nb // min(g.tn, nb))
    if inner >= tiles:
        return 2
    unit = inner * (1 if g.order == "c" else 2)
    unit *= 2 if unit % 2 else 1
    return unit if tiles % unit == 0 else None


def loop_pays(s: Any, g: Any, m: Machine) -> bool:
    """Whether the program of grid ``g`` is built looped (see :data:`LOOP_MIN_UNITS`)."""
    unit = loop_unit(s, g, m)
    return unit is not None and tile_loops(s, g, m)[0] >= LOOP_MIN_UNITS * unit


def build_looped(kernel: ExternKernel, s: Any, g: Any, m: Machine, sizes: Mapping[sympy.Symbol, int], name: str,
                 share: bool, plan: MatmulPlan) -> Program | None:
    """The program of :func:`build` with each core's tile walk as one loop, from
    three prefixes of it (every core's first 3, 4 and 5 loop units of output tiles,
    :func:`loop_unit`): the loop found in the longest must reproduce the other two
    exactly (see :func:`spyre_adapter.model.loops.extrapolate`). None when the walk
    is too short for that or is not one steady loop (edge tiles, a batch loop):
    then build it unrolled. Its LX is placed by role (``periodic``)."""
    unit = loop_unit(s, g, m)
    tiles, _ = tile_loops(s, g, m)
    if unit is None or tiles < 6 * unit:
        return None
    pre = [build(kernel, s, g, m, sizes, name, share, plan, tiles=t) for t in (3 * unit, 4 * unit, 5 * unit)]
    if any(p.bodies != pre[0].bodies or p.lx_in != pre[0].lx_in for p in pre):
        return None
    extra = tiles // unit - 5
    cores = []
    for c in range(m.cores):
        streams = [p.cores[c] for p in pre]
        if not streams[2].instrs:
            cores.append(streams[2])
            continue
        code = loops.extrapolate([x.instrs for x in streams], extra)
        table = loops.extrapolate([sorted(x.allocs, key=_by_end) for x in streams], extra)
        if code is None or table is None:
            return None
        cores.append(CoreProgram(c, loops.looped(*code), loops.looped(*table)))
    return dataclasses.replace(pre[2], cores=tuple(cores))


def _by_end(a: Any) -> tuple[int, int, int]:
    # allocations ordered by their last step: one held across the whole walk comes
    # after the loop (its end moves with the trip count), not before it
    return a.last, a.first, a.addr
