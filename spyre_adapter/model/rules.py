"""The hardware rules every Spyre program must respect, checked on the
program itself (its instructions, not what a planner declares): LX views inside
the usable capacity and aligned, DMA LX addresses on stick boundaries, DMA
regions inside their tensor, each core's span of each tensor, and no two cores
writing the same DRAM bytes (or parts of one stick), or one reading what
another writes, without an order between them: the happens-before order of
matched barrier tags and ring messages (:mod:`.ordering`), not a count of
barriers.

The scheduler uses them to pass over divisions that break a rule; the emulator
enforces them before it runs a program."""

from __future__ import annotations

import bisect
import heapq
from collections import defaultdict
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import torch

from spyre_adapter.model import isa
from spyre_adapter.model.checker_rules import enabled, switched_off
from spyre_adapter.model.errors import EmulatorError
from spyre_adapter.model.gc_pause import gc_paused
from spyre_adapter.model.loop_steps import advanced, as_run, by_position, leaf_labels
from spyre_adapter.model.machine import Machine
from spyre_adapter.model.ordering import Order, concurrent_sets, order_of
from spyre_adapter.model.program import (Alloc, CoreProgram, Instruction, Loop, Lx, Program, ProgramMemo, Region,
                                         buffer_dtypes, itemsize)
from spyre_adapter.model.timing import loop_counts, truncated
from spyre_adapter.model.traffic import region_stick_set

__all__ = ["EmulatorError", "static_check", "first_violation", "overlaps", "buffer_dtypes"]


#: A strided DMA's DRAM access as the race rule sees it: (core, step, kind, region),
#: kind "r" a load, "w" a store, "a" an accumulating store (adds atomically).
Access = tuple[int, int, str, Region]


class _StaticChecks:
    """The static rules of one program, step by step: what every view obeys here,
    what a step type adds through its record (:meth:`spyre_adapter.model.isa.Step.check`)."""

    def __init__(self, p: Program, m: Machine, numels: Mapping[str, int]) -> None:
        self.p, self.m, self.numels = p, m, numels
        self.dtypes = buffer_dtypes(p)
        self.core = self.step = 0
        self.spans: dict[tuple[int, str], list[int]] = {}
        self.accesses: dict[str, list[Access]] = defaultdict(list)

    def fail(self, kind: str, buffer: str, detail: str) -> EmulatorError:
        return EmulatorError(kind, self.p.name, self.core, self.step, buffer, detail)

    def views(self, ins: Instruction) -> int:
        """Every LX view of ``ins`` well formed, aligned to its dtype and inside the
        usable LX; returns the highest byte they touch."""
        peak = 0
        check = enabled("lx-view-bounds")
        for v in isa.views(ins):
            if not check:
                peak = max(peak, v.byte_range()[1])
                continue
            if any(s < 0 for s in v.strides) or len(v.sizes) != len(v.strides):
                raise self.fail("malformed LX view", isa.buffer_of(self.p, ins, v), str(v))
            lo, hi = v.byte_range()
            if lo % v.itemsize:
                raise self.fail("misaligned LX view", isa.buffer_of(self.p, ins, v), f"{v.dtype} view at byte {lo}")
            if lo < 0 or hi > self.m.lx_usable_bytes:
                raise self.fail("allocation over capacity", isa.buffer_of(self.p, ins, v),
                                f"LX bytes {lo}..{hi} beyond the {self.m.lx_usable_bytes} B usable")
            peak = max(peak, hi)
        return peak

    def dma_lx(self, lx: Lx, buffer: str) -> None:
        if lx.addr % self.m.stick_bytes and enabled("dma-stick-alignment"):
            raise self.fail("misaligned sticks", buffer,
                            f"DMA LX address {lx.addr} is not on a {self.m.stick_bytes}-byte stick")

    def dma_region(self, r: Region, lx: Lx, write: bool, accumulate: bool) -> None:
        if r.buffer not in self.numels:
            raise self.fail("unknown buffer", r.buffer, "not an argument")
        if enabled("dma-region-bounds"):
            self.region_bounds(r, lx)
        lo, hi = r.bounds()
        if r.numel:
            sp = self.spans.setdefault((self.core, r.buffer), [lo, hi])
            sp[0], sp[1] = min(sp[0], lo), max(sp[1], hi)
            self.accesses[r.buffer].append((self.core, self.step, "a" if accumulate else "w" if write else "r", r))

    def link_region(self, r: Region, write: bool) -> None:
        if r.buffer not in self.numels:
            raise self.fail("unknown buffer", r.buffer, "not an argument")
        lo, hi = r.bounds()
        if enabled("dma-region-bounds") and (any(s < 0 for s in r.strides)
                                             or (r.numel and (lo < 0 or hi >= self.numels[r.buffer]))):
            raise self.fail("link transfer outside a tensor's bytes", r.buffer,
                            f"elements {lo}..{hi} of {self.numels[r.buffer]}")
        if r.numel:
            self.accesses[r.buffer].append((self.core, self.step, "w" if write else "r", r))

    def region_bounds(self, r: Region, lx: Lx) -> None:
        """A strided DMA's region matches its LX view and lies inside its tensor."""
        if r.numel != lx.numel or lx.dtype != self.dtypes.get(r.buffer):
            raise self.fail("DMA shape mismatch", r.buffer,
                            f"{r.numel} {self.dtypes.get(r.buffer)} elements vs LX {lx.numel} {lx.dtype}")
        if any(s < 0 for s in r.strides):
            raise self.fail("malformed DMA region", r.buffer, "negative stride")
        lo, hi = r.bounds()
        if r.numel and (lo < 0 or hi >= self.numels[r.buffer]):
            raise self.fail("DMA outside a tensor's bytes", r.buffer, f"elements {lo}..{hi} of {self.numels[r.buffer]}")


class _Allocations:
    """A core's allocation table held to its instructions: no two allocations
    live at the same step share a byte, and every LX view a step names lies
    inside one allocation live at that step (a step reaching into bytes its
    allocation does not own reads or overwrites someone else's data)."""

    def __init__(self, p: Program, c: CoreProgram) -> None:
        self.p, self.core = p, c.core
        last = c.n_steps - 1
        self.allocs = [(a, max(a.first, 0), last if a.last < 0 else a.last) for a in c.alloc_table]
        # A sweep over the steps: each allocation against those still live when it
        # starts (a slot reused by a thousand tiles is a thousand allocations at
        # one address: comparing each with every other was quadratic).
        live: list[tuple[int, int, Alloc, int]] = []  # heap of (last step, order, allocation, first step)
        for k, (a, f, l_) in enumerate(sorted(self.allocs, key=lambda t: t[1])):
            while live and live[0][0] < f:
                heapq.heappop(live)
            for l2, _, b, f2 in live:
                if b.addr < a.addr + a.nbytes and a.addr < b.addr + b.nbytes:
                    (x, fx, lx), (y, fy, ly) = sorted(((a, f, l_), (b, f2, l2)), key=lambda t: t[0].addr)
                    raise EmulatorError("overlapping allocations", p.name, c.core, max(f, f2), x.name,
                                        f"{x.name} ({x.addr:#x}+{x.nbytes} B, steps {fx}-{lx}) and {y.name} "
                                        f"({y.addr:#x}+{y.nbytes} B, steps {fy}-{ly}) are live at once on shared bytes")
            heapq.heappush(live, (l_, k, a, f))
        #: per LX byte range: the step spans of the allocations holding it, by first step
        #: (disjoint: allocations sharing bytes are never live at once)
        self._holders: dict[tuple[int, int], tuple[list[int], list[int]]] = {}

    def check(self, step: int, ins: Instruction) -> None:
        for v in isa.views(ins):
            if v.numel == 0:
                continue
            lo, hi = v.byte_range()
            spans = self._holders.get((lo, hi))
            if spans is None:
                held = sorted((f, l_) for a, f, l_ in self.allocs if a.addr <= lo and hi <= a.addr + a.nbytes)
                spans = self._holders[(lo, hi)] = ([f for f, _ in held], [l_ for _, l_ in held])
            k = bisect.bisect_right(spans[0], step) - 1
            if k < 0 or step > spans[1][k]:
                where = [a.name for a, f, l_ in self.allocs if a.addr < hi and lo < a.addr + a.nbytes and f <= step <= l_]
                raise EmulatorError("LX access outside its allocation", self.p.name, self.core, step,
                                    isa.buffer_of(self.p, ins, v),
                                    f"LX bytes {lo:#x}..{hi:#x} are not inside one allocation live at this step"
                                    + (f" (they reach into {', '.join(where)})" if where else ""))


#: Programs that passed the static check: (machine, buffer sizes, rules switched
#: off) and the LX peaks. A program planned with a check and then launched checked
#: is checked once (a full-size layer's big programs took seconds each, twice).
_PASSED = ProgramMemo()


@gc_paused
def static_check(p: Program, m: Machine, numels: Mapping[str, int], order: Order | None = None) -> dict[int, int]:
    """The data-independent rules of a program; returns each core's LX peak
    (the highest byte its instructions touch). ``numels``: elements of every
    DRAM buffer the program addresses; ``order``: the program's happens-before
    order, when the caller has it already. A program that passed for the same
    machine, buffer sizes and rules is not checked again (programs are immutable)."""
    key = (m, tuple(sorted(numels.items())), switched_off())
    known = _PASSED.get(p)
    if known is not None and known[0] == key:
        return dict(known[1])
    peaks = _static_check(p, m, numels, order)
    _PASSED.put(p, (key, dict(peaks)))
    return peaks


def _static_check(p: Program, m: Machine, numels: Mapping[str, int], order: Order | None) -> dict[int, int]:
    if any(c.looped for c in p.cores):
        peaks = _looped_check(p, m, numels)
        if peaks is not None:
            return peaks
    order = order_of(p) if order is None else order
    c_ = _StaticChecks(p, m, numels)
    peaks: dict[int, int] = {}
    held = {(r.core, r.addr, r.addr + (r.hi - r.lo) * itemsize(r.dtype)) for r in p.lx_in}
    for c in p.cores:
        c_.core = c.core
        peak = max((hi for core, lo, hi in held if core == c.core), default=0)
        live = _Allocations(p, c) if c.allocs and enabled("allocations") else None
        for step, ins in enumerate(c.steps):
            c_.step = step
            rec = isa.step(ins)
            if rec.sync == "barrier":
                continue
            peak = max(peak, c_.views(ins))
            rec.check(ins, c_)
            if live is not None:
                live.check(step, ins)
        peaks[c.core] = peak
    for (core, buf), (lo, hi) in c_.spans.items():
        nbytes = (hi - lo + 1) * itemsize(c_.dtypes[buf])
        if nbytes > m.span_bytes_per_core:
            raise EmulatorError("per-core span exceeded", p.name, core, -1, buf,
                                f"{nbytes} B > {m.span_bytes_per_core} B")
    if enabled("dram-races"):
        _check_dram_races(p, m, order, c_.accesses, c_.dtypes)
    return peaks


#: Iterations of every loop the full rules run over when a looped program is
#: checked without unrolling it (see :func:`_looped_check`).
LOOP_WINDOW = 3


def _looped_check(p: Program, m: Machine, numels: Mapping[str, int]) -> dict[int, int] | None:
    """The static rules of a looped program without unrolling it, or None when
    this shortcut does not apply (then every step is checked unrolled).

    It applies when each looped core runs one top-level loop (and its allocation
    table one loop), and no loop moves an LX address:
    then iteration ``i >= 1`` sees the same LX and allocations as iteration 1,
    and every rule over LX, allocations, barriers and the ring holds for all
    iterations if it holds for the first :data:`LOOP_WINDOW` (checked unrolled).
    DRAM offsets move by constant steps, so a region's bounds over the loop are
    those of its first and last iteration (checked, with the steps after the
    loop at its real trip count, and each core's span). Races: each core's DRAM
    footprint over all iterations (a region with one more dimension) must be
    apart from every other core's - no shared stick between stores, no load of a
    stored byte - which rules out a race whatever the order; else None."""
    trips = loop_counts(p)
    if trips is None or min(trips) <= LOOP_WINDOW + 1:
        return None
    labels: dict[int, list[str]] = {}  # by item: a loop's ``after`` names many of those after it
    for c in p.cores:
        for seq in (c.instrs, c.allocs):
            for pos, x in enumerate(seq):
                if isinstance(x, Loop) and not _lx_still(x, seq[pos + 1:], labels):
                    return None
    try:
        peaks = _static_check(truncated(p, min(trips) - LOOP_WINDOW), m, numels, None)
    except EmulatorError:
        return None  # the unrolled check names the step
    c_ = _StaticChecks(p, m, numels)
    accesses: dict[str, list[Access]] = defaultdict(list)
    for c in p.cores:
        c_.core = c.core
        for step, ins, times, moved in _ends(c.instrs):
            c_.step = step
            rec = isa.step(ins)
            if rec.sync == "barrier":
                continue
            c_.views(ins)
            rec.check(ins, c_)
            moved_ = isa.transfer(ins)
            if moved_ is not None and times:
                r = moved_[0]
                if moved:
                    r = _swept(r, moved, times)
                accesses[r.buffer].append((c.core, step, "r" if rec.dma == "in" else
                                           "a" if getattr(ins, "accumulate", False) else "w", r))
    for (core, buf), (lo, hi) in c_.spans.items():
        nbytes = (hi - lo + 1) * itemsize(c_.dtypes[buf])
        if nbytes > m.span_bytes_per_core:
            return None
    if enabled("dram-races"):
        for buf, accs in accesses.items():
            if any(a[2] != "r" for a in accs) and len({a[0] for a in accs}) > 1:
                if not _Races(p, m, None, buf, itemsize(c_.dtypes[buf])).apart(accs):  # type: ignore[arg-type]
                    return None
    return peaks


def _lx_still(loop: Loop, after: Sequence[Any], labels: dict[int, list[str]]) -> bool:
    """No LX address moves with the loop (in its body or after it), and loops of
    allocations move only their step ranges. ``labels``: :func:`leaf_labels` by
    item id, filled as they are asked for."""
    for j, k, _ in loop.advance:
        label = leaf_labels(loop.body[j])[k]
        if label in ("Lx.addr", "Alloc.addr") or label.endswith(".base"):
            return False
    for q, k, _ in loop.after:
        item = after[q]
        named = labels.get(id(item))
        if named is None:
            named = labels[id(item)] = leaf_labels(item)
        label = named[k]
        if label in ("Lx.addr", "Alloc.addr") or label.endswith(".base"):
            return False
    return not any(isinstance(x, Loop) for x in loop.body)


def _ends(code: Sequence[Any]) -> Iterator[tuple[int, Any, int, int]]:
    """(unrolled step, instruction, iterations it stands for, its region's offset
    step per iteration) over a core's stream: what precedes the loop and what
    follows it at the real trip count once each; each body step at its first
    iteration, standing for all of them (with its offset step), and at its last."""
    step = 0
    for x in as_run(code):
        if not isinstance(x, Loop):
            yield step, x, 1, 0
            step += 1
            continue
        moves = by_position(x.advance)
        for j, ins in enumerate(x.body):
            offset_step = sum(st for k, st in moves.get(j, ()) if leaf_labels(ins)[k] == "Region.offset")
            yield step + j, ins, x.trips, offset_step
            yield step + (x.trips - 1) * len(x.body) + j, advanced(ins, moves.get(j, ()), x.trips - 1), 0, 0
        step += x.trips * len(x.body)


def _swept(r: Region, step: int, times: int) -> Region:
    """The elements ``r`` covers moved ``times`` times by ``step``: one more dimension."""
    if step < 0:
        return Region(r.buffer, r.offset + step * (times - 1), (times, *r.sizes), (-step, *r.strides))
    return Region(r.buffer, r.offset, (times, *r.sizes), (step, *r.strides))


def first_violation(p: Program, m: Machine, numels: Mapping[str, int]) -> EmulatorError | None:
    """The first hardware rule ``p`` breaks (None: it obeys them all): how a planner
    passes over a division whose program it built."""
    try:
        static_check(p, m, numels)
    except EmulatorError as exc:
        return exc
    return None


def _byte_intervals(r: Region, isz: int) -> tuple[torch.Tensor, torch.Tensor]:
    first, last = region_stick_set(r, isz, isz)  # "sticks" of one element: element intervals
    return first * isz, (last + 1) * isz - 1


def overlaps(items: list[tuple[int, torch.Tensor, torch.Tensor]]) -> tuple[int, int, int] | None:
    """First overlap between intervals of different owners: (owner a, owner b, byte)."""
    if len(items) < 2:
        return None
    own = torch.cat([torch.full_like(f, o) for o, f, _ in items])
    first = torch.cat([f for _, f, _ in items])
    last = torch.cat([l_ for _, _, l_ in items])
    order = first.argsort()
    own, first, last = own[order], first[order], last[order]
    reach, arg = torch.cummax(last, 0)
    hit = (first[1:] <= reach[:-1]) & (own[1:] != own[arg[:-1]])
    if bool(hit.any()):
        k = int(hit.nonzero()[0]) + 1
        return int(own[arg[k - 1]]), int(own[k]), int(first[k])
    return None


def _bound(r: Region, isz: int, unit: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The one interval of ``unit``-sized pieces (bytes, sticks) spanning ``r``."""
    lo, hi = r.bounds()
    return torch.tensor([lo * isz // unit]), torch.tensor([((hi + 1) * isz - 1) // unit])


class _Races:
    """The DRAM race rule over one buffer's strided accesses: two accesses of
    different cores that overlap, at least one a write (two atomic adds excepted),
    and that the program's synchronisation leaves unordered.

    Accesses are grouped by (core, segment). Segments with the same vector
    clock are pairwise concurrent (a barrier every core holds gives such
    classes), so one interval sweep per class finds their conflicts; segments
    of different classes are compared pair by pair where the order leaves them
    concurrent and their bounds meet."""

    def __init__(self, p: Program, m: Machine, order: Order, buf: str, isz: int) -> None:
        self.p, self.m, self.order, self.buf, self.isz = p, m, order, buf, isz
        self._exact: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}

    def exact(self, r: Region) -> tuple[torch.Tensor, torch.Tensor]:
        if id(r) not in self._exact:
            self._exact[id(r)] = _byte_intervals(r, self.isz)
        return self._exact[id(r)]

    def bound(self, rs: list[Access]) -> tuple[int, int]:
        lo = min(r.bounds()[0] for *_, r in rs)
        hi = max(r.bounds()[1] for *_, r in rs)
        return lo * self.isz, (hi + 1) * self.isz - 1

    def sweep(self, xs: list[Access], ys: list[Access]) -> tuple[Access, Access, int] | None:
        """The first byte an access of ``xs`` and one of ``ys`` both touch (None: none)."""
        if not xs or not ys:
            return None
        (xl, xh), (yl, yh) = self.bound(xs), self.bound(ys)
        if xh < yl or yh < xl:
            return None
        hit = overlaps([(0, *self.exact(a[3])) for a in xs] + [(1, *self.exact(a[3])) for a in ys])
        if hit is None:
            return None
        byte = hit[2]
        return self.holding(xs, byte), self.holding(ys, byte), byte

    def holding(self, accs: list[Access], byte: int) -> Access:
        """The access of ``accs`` that touches ``byte``."""
        for a in accs:
            f, l_ = self.exact(a[3])
            if bool(((f <= byte) & (l_ >= byte)).any()):
                return a
        return accs[0]

    def fail(self, kind: str, a: Access, b: Access, byte: int, what: str) -> EmulatorError:
        o = self.order
        return EmulatorError(kind, self.p.name, b[0], b[1], self.buf,
                             f"{what} byte {byte}: {o.describe(a[0], a[1])} and {o.describe(b[0], b[1])} "
                             "are not ordered by any barrier or ring message")

    def pair(self, x: list[Access], y: list[Access]) -> None:
        """Conflicts between the accesses of two concurrent segments of different cores."""
        by = {k: [a for a in x if a[2] == k] for k in "rwa"}, {k: [a for a in y if a[2] == k] for k in "rwa"}
        for (xs, ys, kind, what) in (
                (by[0]["w"], by[1]["w"] + by[1]["a"], "cross-core write conflict", "both write"),
                (by[0]["a"], by[1]["w"], "cross-core write conflict", "both write"),
                (by[0]["r"], by[1]["w"] + by[1]["a"], "unordered DRAM access", "one reads what the other writes at"),
                (by[0]["w"] + by[0]["a"], by[1]["r"], "unordered DRAM access", "one writes what the other reads at")):
            hit = self.sweep(xs, ys)
            if hit:
                raise self.fail(kind, hit[0], hit[1], hit[2], what)
        self.sticks(by[0]["w"], by[1]["w"])

    def sticks(self, xs: list[Access], ys: list[Access]) -> None:
        """Two concurrent stores of different cores must not share a stick: the DMA writes whole sticks."""
        if not xs or not ys:
            return
        st = self.m.stick_bytes
        (xl, xh), (yl, yh) = self.bound(xs), self.bound(ys)
        if xh // st < yl // st or yh // st < xl // st:
            return
        hit = overlaps([(0, f // st, l_ // st) for f, l_ in (self.exact(a[3]) for a in xs)]
                       + [(1, f // st, l_ // st) for f, l_ in (self.exact(a[3]) for a in ys)])
        if hit:
            raise self.shared_stick(xs[0][0], ys[0][0], ys[0][1], hit[2])

    def shared_stick(self, a: int, b: int, step: int, stick: int) -> EmulatorError:
        """Cores ``a`` and ``b`` write parts of ``stick`` without an order between them."""
        return EmulatorError("misaligned sticks", self.p.name, b, step, self.buf,
                             f"cores {a} and {b} write parts of stick {stick} without an order "
                             "between them: a core's share must be whole sticks")

    def apart(self, accesses: list[Access]) -> bool:
        """True when no two cores' stores share a stick and no load touches a
        stored byte: then no pair can conflict, whatever the order (one sweep
        over the buffer instead of one per concurrent pair of segments)."""
        st = self.m.stick_bytes
        stores = [a for a in accesses if a[2] != "r"]
        if len({a[0] for a in stores}) > 1 and overlaps(
                [(a[0], *(x // st for x in self.exact(a[3]))) for a in stores]) is not None:
            return False
        loads = [a for a in accesses if a[2] == "r"]
        # (a core reading its own stores also lands here: the full check decides)
        return not loads or overlaps([(0, *self.exact(a[3])) for a in loads]
                                     + [(1, *self.exact(a[3])) for a in stores]) is None

    def check(self, accesses: list[Access]) -> None:
        if self.apart(accesses):
            return
        blocks: dict[tuple[int, int], list[Access]] = defaultdict(list)
        for a in accesses:
            blocks[(a[0], self.order.segment_of(a[0], a[1]))].append(a)
        keys = list(blocks)
        groups, pairs = concurrent_sets(self.order, keys, [any(a[2] != "r" for a in blocks[k]) for k in keys])
        for members in groups:
            if len(members) > 1:
                self.within([blocks[keys[k]] for k in members])
        for i, j in pairs:
            self.pair(blocks[keys[i]], blocks[keys[j]])

    def within(self, segs: list[list[Access]]) -> None:
        """Conflicts among concurrent segments of different cores (one per core)."""
        stores = [a for s in segs for a in s if a[2] == "w"]
        if len({a[0] for a in stores}) > 1:
            items = [(a[0], *self.exact(a[3])) for a in stores]
            if overlaps([(a[0], *_bound(a[3], self.isz, self.m.stick_bytes)) for a in stores]) is not None:
                hit = overlaps(items)
                if hit:
                    byte = hit[2]
                    a = self.holding([s for s in stores if s[0] == hit[0]], byte)
                    b = self.holding([s for s in stores if s[0] == hit[1]], byte)
                    raise self.fail("cross-core write conflict", a, b, byte, "both write")
                sticks = overlaps([(c, f // self.m.stick_bytes, l_ // self.m.stick_bytes) for c, f, l_ in items])
                if sticks:
                    raise self.shared_stick(sticks[0], sticks[1], -1, sticks[2])
        for k, seg in enumerate(segs):
            if any(a[2] != "w" for a in seg):
                others = [a for s2 in segs[:k] + segs[k + 1:] for a in s2]
                self.pair_one_sided(seg, others)

    def pair_one_sided(self, x: list[Access], others: list[Access]) -> None:
        """Conflicts of one segment's loads and atomic adds with the other cores' accesses."""
        xr, xa = [a for a in x if a[2] == "r"], [a for a in x if a[2] == "a"]
        ow = [a for a in others if a[2] == "w"]
        owa = ow + [a for a in others if a[2] == "a"]
        for xs, ys, kind, what in ((xr, owa, "unordered DRAM access", "one reads what the other writes at"),
                                   (xa, ow, "cross-core write conflict", "both write")):
            hit = self.sweep(xs, ys)
            if hit:
                raise self.fail(kind, hit[1], hit[0], hit[2], what)


def _check_dram_races(p: Program, m: Machine, order: Order, accesses: dict[str, list[Access]],
                      dtypes: Mapping[str, str]) -> None:
    for buf, accs in accesses.items():
        if any(a[2] != "r" for a in accs) and len({a[0] for a in accs}) > 1:
            _Races(p, m, order, buf, itemsize(dtypes[buf])).check(accs)
