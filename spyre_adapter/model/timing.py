"""Time model of a Spyre program: a discrete-event simulation of every core
running its instruction stream.

Each core has engines that take their instructions in program order: a DMA
load channel per DRAM buffer, a store channel, the ring's send and receive
ports, the vector/SFU unit and the PE arrays. An instruction starts when it is
at the head of its engine and every earlier instruction of its core that it
conflicts with has finished: a read of LX bytes waits for their last writer, a
write waits for earlier readers and writers of those bytes (so double
buffering exists exactly where the program gave a tile two LX slots), and DRAM
accesses of one buffer keep their order. A ring transfer runs when the sender
and every receiver are ready; a barrier releases when every core holding it
arrived. DRAM bandwidth is shared: concurrent transfers split the sustained
bandwidth of their read/write mix fairly, and one core's transfers together
never exceed its DMA rate.
"""

from __future__ import annotations

import dataclasses
import functools
import heapq
import math
from collections import defaultdict
from collections.abc import Mapping
from typing import Any

from spyre_adapter.model import isa
from spyre_adapter.model.errors import EmulatorError
from spyre_adapter.model.gc_pause import gc_paused
from spyre_adapter.model.loop_steps import LoopBase, expand, fewer_trips, max_depth
from spyre_adapter.model.machine import Machine
from spyre_adapter.model.program import Instruction, Loop, Lx, Program, ProgramMemo, Region, buffer_dtypes

__all__ = ["Event", "Timeline", "simulate", "remember", "extrapolate", "lower_bound_ns", "dram_bytes_of"]

#: A transfer with less than this many bytes left has finished (float residue).
_DONE_BYTES = 1e-3
#: log2 of the LX block size the hazard tables file ranges by.
_LX_BLOCK = 16


@dataclasses.dataclass
class Event:
    """One executed instruction."""

    core: int
    engine: str
    op: str
    start: float
    end: float
    bytes: int
    index: int


@dataclasses.dataclass
class Timeline:
    """Result of simulating one program."""

    total_ns: float
    events: list[Event]
    busy: dict[int, dict[str, float]]
    dram_read_bytes: int
    dram_write_bytes: int
    ring_bytes: int
    core_end: dict[int, float]

    @property
    def dram_bytes(self) -> int:
        """DRAM bytes moved, both directions."""
        return self.dram_read_bytes + self.dram_write_bytes

    def core_time(self, core: int) -> float:
        """When the core's last instruction ended."""
        return self.core_end.get(core, 0.0)


def dram_bytes_of(ins: Instruction, buffers: Mapping[str, str], stick: int,
                  dynamic: int | None = None) -> int:
    """Bytes a DMA instruction moves through DRAM (whole sticks). Gathers and
    scatters move what their indices touched (``dynamic``, counted when they
    ran; without it a stick per element bounds it)."""
    return isa.dram_bytes(ins, buffers, stick, dynamic)


class _Hazards:
    """Program-order hazards of one core: per address space (LX bytes, or one
    DRAM buffer's elements) and distinct range, its last writer and the readers
    since. A write that covers a range retires it (later accesses depend on the
    write, which depended on everything the range had).

    Readers are kept per engine queue, the latest only: a queue runs its steps
    in program order, so waiting for its latest reader of a range is waiting for
    all of them (the same timing, without an edge per earlier reader).

    LX ranges are also filed by the 64 KiB blocks they touch, so an access looks
    only at the ranges sharing a block with it (a core's LX holds dozens of live
    ranges; a big GEMM's planning spent most of its simulation scanning them)."""

    def __init__(self, dram_written: set[str]) -> None:
        self.tables: dict[str, dict[Footprint, list]] = defaultdict(dict)
        self.dram_written = dram_written  # buffers the core writes: only these can conflict in DRAM
        self.blocks: dict[int, dict[Footprint, None]] = defaultdict(dict)  # LX block -> ranges touching it

    def _near(self, space: str, fp: Footprint) -> Any:
        """The ranges of ``space`` that may overlap ``fp``."""
        # (views, not copies: the caller changes the tables only after its loop)
        if space:
            return self.tables[space].keys()
        blocks = self.blocks
        lo, hi = fp[0] >> _LX_BLOCK, (fp[1] - 1) >> _LX_BLOCK
        if lo == hi:
            return blocks[lo].keys() if lo in blocks else ()
        seen: dict[Footprint, None] = {}
        for b in range(lo, hi + 1):
            if b in blocks:
                seen.update(blocks[b])
        return seen.keys()

    def _file(self, fp: Footprint, add: bool) -> None:
        for b in range(fp[0] >> _LX_BLOCK, ((fp[1] - 1) >> _LX_BLOCK) + 1):
            if add:
                self.blocks[b][fp] = None
            else:
                del self.blocks[b][fp]

    def _access(self, space: str, fp: Footprint, write: bool, i: int, eng: str, deps: set[int]) -> None:
        table = self.tables[space]
        covered = []
        lo, hi = fp[0], fp[1]
        for key in self._near(space, fp):
            if key[0] < hi and lo < key[1] and (key == fp or _overlap(key, fp)):
                w, rs = table[key]
                if w is not None:
                    deps.add(w)
                if write:
                    deps.update(rs.values())
                    if key == fp or (fp[2] == 0 and lo <= key[0] and key[1] <= hi):
                        covered.append(key)
        lx = not space
        if write:
            for k in covered:
                del table[k]
                if lx:
                    self._file(k, False)
            table[fp] = [i, {}]
            if lx:
                self._file(fp, True)
        else:
            got = table.get(fp)
            if got is None:
                got = table[fp] = [None, {}]
                if lx:
                    self._file(fp, True)
            got[1][eng] = i

    def access(self, i: int, eng: str, lx_reads: list[Lx], lx_writes: list[Lx], dram_reads: list,
               dram_writes: list) -> set[int]:
        """The earlier steps step ``i`` (on engine queue ``eng``) conflicts with."""
        deps: set[int] = set()
        for views, write in ((lx_reads, False), (lx_writes, True)):
            for v in views:
                fp = lx_footprint(v)
                if fp[1] > fp[0]:
                    self._access("", fp, write, i, eng, deps)
        for regions, write in ((dram_reads, False), (dram_writes, True)):
            for r in regions:
                name = r if isinstance(r, str) else r.buffer
                if name not in self.dram_written:
                    continue
                if isinstance(r, Region):
                    lo, hi = r.bounds()
                    hi += 1
                else:
                    lo, hi = -(1 << 62), 1 << 62
                self._access("dram:" + name, (lo, hi, 0, hi - lo), write, i, eng, deps)
        deps.discard(i)
        return deps


#: The bytes an access touches: ``(lo, hi, stride, width)`` - rows of ``width``
#: bytes every ``stride`` bytes from ``lo`` up to ``hi``, or (stride 0) all of [lo, hi).
Footprint = tuple[int, int, int, int]


@functools.lru_cache(maxsize=1 << 16)
def lx_footprint(v: Lx) -> Footprint:
    """The LX bytes view ``v`` touches: its byte range, and where the view is rows
    of one contiguous run with gaps between them (a k-slice of a stationary
    panel, a column block of a tile) those rows, so that views interleaved in
    one slot are not taken for overlapping. Anything else is its byte range."""
    lo, hi = v.byte_range()
    dims = sorted(((st, n) for st, n in zip(v.strides, v.sizes) if n > 1), reverse=True)
    if not dims or any(st == 0 for st, _ in dims):
        return lo, hi, 0, hi - lo
    run = 1  # elements of the innermost dense run
    for st, n in reversed(dims):
        if st != run:
            break
        run *= n
    outer = [(st, n) for st, n in dims if st >= run]
    inner = math.prod(n for st, n in dims if st < run)
    if inner != run or len(outer) != 1 or outer[0][0] == run:
        return lo, hi, 0, hi - lo
    return lo, hi, outer[0][0] * v.itemsize, run * v.itemsize


def _overlap(f: Footprint, g: Footprint) -> bool:
    """Whether two footprints whose byte ranges overlap share a byte (exact for
    rows against an interval and for rows of one stride; otherwise assumed)."""
    if f[2] == 0 and g[2] == 0:
        return True
    if f[2] == 0:
        f, g = g, f
    a, b, stride, width = f
    rows = (b - a - width) // stride + 1
    if g[2] == 0:  # rows of f against the interval [x, y) of g
        x, y = g[0], g[1]
        r_min = max(0, (x - width - a) // stride + 1)
        r_max = min(rows - 1, -((a - y) // stride) - 1)
        return r_min <= r_max
    if g[2] != stride:
        return True
    a2, width2 = g[0], g[3]
    rows2 = (g[1] - a2 - width2) // stride + 1
    d = a2 - a
    # rows r of f and r2 of g meet when -width2 < d + (r2 - r) * stride < width
    t_min = max(-(rows - 1), (-width2 - d) // stride + 1)
    t_max = min(rows2 - 1, -((d - width) // stride) - 1)
    return t_min <= t_max


def _latest_per_queue(deps: set[int], engines: list[tuple[int, str]]) -> list[int]:
    """``deps`` reduced to the latest step of each engine queue (the queue runs in
    program order: the latest one retires after the others)."""
    if len(deps) <= 1:
        return list(deps)
    latest: dict[str, int] = {}
    for d in deps:
        e = engines[d][1]
        if latest.get(e, -1) < d:
            latest[e] = d
    return list(latest.values())


class _Simulation:
    """One run of :func:`simulate`: the program's order (per core, each step's
    dependences and engine queue; ring partners; barrier members), then events
    until every step retired: issue what can start, share DRAM bandwidth among
    the transfers in flight, advance to the next completion, retire it.

    Steps of fixed duration wait in a heap by end time and only DRAM transfers
    (whose rates change with the mix in flight) are revisited at every event:
    a program of a million steps on 32 cores has hundreds of engines busy."""

    def __init__(self, p: Program, m: Machine, dynamic_bytes: Mapping[tuple[int, int], int],
                 keep_events: bool) -> None:
        self.p, self.m, self.dynamic_bytes, self.keep_events = p, m, dynamic_bytes, keep_events
        self.buffers = _buffer_dtypes(p)
        # A looped stream is unrolled here, not kept on the program (the big form),
        # unless the program holds it unrolled already.
        self.instrs = {c.core: tuple(expand(c.instrs)) if c.looped and "steps" not in vars(c) else c.steps
                       for c in p.cores}
        self.n_total = sum(len(v) for v in self.instrs.values())
        # per core, by step index: dependences not yet retired, same-core dependents, engine queue key
        self.deps_left: dict[int, list[int]] = {}
        self.dependents: dict[int, list[list[int]]] = {}
        self.head_engine: dict[int, list[tuple[int, str]]] = {}
        self.queues: dict[tuple[int, str], list[int]] = defaultdict(list)
        self.barrier_members: dict[int, set[int]] = defaultdict(set)
        self.sends: dict[tuple[int, int], tuple[int, int]] = {}  # (tag, receiver) -> (sender core, index)
        self.recvs: dict[tuple[int, int], tuple[int, int]] = {}  # (tag, receiver) -> (receiver core, index)
        self._order()
        self.pos = {k: 0 for k in self.queues}
        self.dtypes: dict[int, list[str]] = {}
        self.active: dict[tuple[int, str], dict] = {}
        self.dma_active: dict[tuple[int, str], dict] = {}  # the DRAM transfers among them
        self.ends: list[tuple[float, int, tuple[int, str], dict]] = []  # heap of fixed-duration steps in flight
        self.seq = 0
        self.last_end: dict[tuple[int, str], float] = {}
        self.events: list[Event] = []
        self.busy: dict[int, dict[str, float]] = defaultdict(lambda: defaultdict(float))
        self.core_end: dict[int, float] = defaultdict(float)
        self.arrived: dict[int, set[int]] = defaultdict(set)
        self.rd_bytes = self.wr_bytes = self.ring_bytes = 0
        self.now = 0.0
        self.n_done = 0
        self.dirty: set[tuple[int, str]] = set(self.queues)

    def _order(self) -> None:
        """Each core's steps: what each waits for (hazards on LX and DRAM, barriers),
        its engine queue, and who pairs with whom on the ring and at barriers."""
        bodies = self.p.bodies
        for c, stream in self.instrs.items():
            hz = _Hazards({r.buffer if isinstance(r, Region) else r
                           for ins in stream for r in isa.dram_accesses(ins)[1]})
            last_barrier = None
            since_barrier: dict[str, int] = {}  # engine queue -> its latest step since the last barrier
            n = len(stream)
            deps_left = [0] * n
            dependents: list[list[int]] = [[] for _ in range(n)]
            engines: list[tuple[int, str]] = [(c, "")] * n
            queues: dict[str, list[int]] = {}
            for i, ins in enumerate(stream):
                rec = isa.step(ins)
                eng = rec.engine(ins)
                engines[i] = (c, eng)
                lr, lw = rec.lx_accesses(ins, bodies)
                dr, dw = rec.dram_accesses(ins)
                deps = hz.access(i, eng, lr, lw, dr, dw)
                sync = rec.sync
                if sync == "barrier":
                    deps = set(since_barrier.values()) | ({last_barrier} if last_barrier is not None else set())
                    last_barrier, since_barrier = i, {}
                    self.barrier_members[ins.tag].add(c)
                else:
                    if last_barrier is not None:
                        deps.add(last_barrier)
                    since_barrier[eng] = i
                reduced = _latest_per_queue(deps, engines)
                deps_left[i] = len(reduced)
                for d in reduced:
                    dependents[d].append(i)
                queues.setdefault(eng, []).append(i)
                if sync == "send":
                    for peer in ins.peers:  # type: ignore[union-attr]
                        self.sends[(ins.tag, peer)] = (c, i)  # type: ignore[union-attr]
                elif sync == "recv":
                    self.recvs[(ins.tag, c)] = (c, i)  # type: ignore[union-attr]
            self.deps_left[c], self.dependents[c], self.head_engine[c] = deps_left, dependents, engines
            for eng, q in queues.items():
                self.queues[(c, eng)] = q

    def head(self, key: tuple[int, str]) -> int | None:
        """The step at the head of an engine queue (None: the queue is done)."""
        q = self.queues[key]
        return q[self.pos[key]] if self.pos[key] < len(q) else None

    def can_start(self, c: int, i: int) -> bool:
        eng = self.head_engine[c][i]
        return self.deps_left[c][i] == 0 and self.head(eng) == i and eng not in self.active

    def _ends_at(self, key: tuple[int, str], act: dict) -> None:
        self.seq += 1
        heapq.heappush(self.ends, (act["end"], self.seq, key, act))

    def start(self, key: tuple[int, str], i: int, extra: dict | None = None) -> None:
        c = key[0]
        ins = self.instrs[c][i]
        act = {"idx": i, "start": self.now}
        if key[1].startswith("dma"):
            nbytes = dram_bytes_of(ins, self.buffers, self.m.stick_bytes, self.dynamic_bytes.get((c, i)))
            act.update(remaining=float(nbytes), bytes=nbytes, write=key[1] == "dma_out",
                       setup=self.now + (0.0 if self.last_end.get(key, -1.0) >= self.now - 1e-9
                                         else self.m.dma_setup_ns))
            self.dma_active[key] = act
        else:
            if key[1] in ("ring_tx", "ring_rx"):
                act.update(end=self.now + (extra or {}).get("ns", 0.0), bytes=(extra or {}).get("bytes", 0))
            else:
                act.update(end=self.now + isa.duration(ins, self.p, self.m, self.dtypes), bytes=0)
            self._ends_at(key, act)
        self.active[key] = act

    def issue(self) -> None:
        """Start every step that can start now (a ring transfer when its sender and
        every receiver can; a barrier holds its cores until all of them arrived)."""
        progressed = True
        while progressed:
            progressed = False
            for key in list(self.dirty):
                self.dirty.discard(key)
                if key in self.active:
                    continue
                i = self.head(key)
                if i is None:
                    continue
                c = key[0]
                ins = self.instrs[c][i]
                if self.deps_left[c][i]:
                    continue
                sync = isa.step(ins).sync
                if sync == "send":
                    progressed |= self._send(key, c, i, ins)
                elif sync == "recv":
                    snd = self.sends.get((ins.tag, c))
                    if snd is None:
                        raise EmulatorError("deadlock", self.p.name, c, i, "ring",
                                            f"#{ins.tag} is received but no core sends it")
                    if (snd[0], "ring_tx") not in self.active:
                        self.dirty.add((snd[0], "ring_tx"))
                        progressed = True
                elif sync == "barrier":
                    self.active[key] = {"idx": i, "start": self.now, "end": float("inf")}
                    self.arrived[ins.tag].add(c)
                    if self.arrived[ins.tag] >= self.barrier_members[ins.tag]:
                        for bc in self.barrier_members[ins.tag]:
                            act = self.active[(bc, "sync")]
                            act["end"] = self.now + self.m.sync_ns
                            self._ends_at((bc, "sync"), act)
                    progressed = True
                else:
                    self.start(key, i)
                    progressed = True

    def _send(self, key: tuple[int, str], c: int, i: int, ins: Any) -> bool:
        """Start a ring send with all its receives, if they can start (True: started)."""
        parts = [self.recvs.get((ins.tag, peer)) for peer in ins.peers]
        if any(r is None for r in parts):
            raise EmulatorError("deadlock", self.p.name, c, i, "ring",
                                f"#{ins.tag} is sent to a core with no matching receive")
        if not all(self.can_start(rc, ri) for rc, ri in parts):  # type: ignore[misc]
            return False
        nbytes = ins.src.numel * ins.src.itemsize
        ns = nbytes / self.m.ring_gbps
        self.start(key, i, {"ns": ns, "bytes": nbytes})
        for rc, ri in parts:  # type: ignore[misc]
            self.start((rc, "ring_rx"), ri, {"ns": ns, "bytes": 0})
        self.ring_bytes += nbytes * len(parts)
        return True

    def rates(self) -> dict[tuple[int, str], float]:
        """Each DRAM transfer's rate now: a fair share of the mix's sustained
        bandwidth, one core's transfers together at most its DMA rate."""
        dram = [(k, a) for k, a in self.dma_active.items() if a["setup"] <= self.now]
        if not dram:
            return {}
        n_rd = sum(1 for _, a in dram if not a["write"])
        bw = self.m.dram_gbps(n_rd, len(dram) - n_rd)
        per_core: dict[int, int] = defaultdict(int)
        for k, _ in dram:
            per_core[k[0]] += 1
        return {k: min(bw / len(dram), self.m.core_dma_gbps / per_core[k[0]]) for k, _ in dram}

    def next_event(self, rates: Mapping[tuple[int, str], float]) -> float:
        """When the next step in flight ends (or a DMA's setup does)."""
        nxt = self.ends[0][0] if self.ends else float("inf")
        for key, a in self.dma_active.items():
            if a["setup"] > self.now:
                nxt = min(nxt, a["setup"])
            else:
                end = self.now + a["remaining"] / rates[key] if rates[key] > 0 else self.now
                if end <= self.now:  # less than a float step of `now` left: done
                    a["remaining"] = 0.0
                nxt = min(nxt, end)
        if nxt == float("inf"):
            stuck = [f"core {k[0]} {k[1]} at #{self.head(k)}" for k in self.queues if self.head(k) is not None][:6]
            core = next((k[0] for k in self.queues if self.head(k) is not None), -1)
            raise EmulatorError("deadlock", self.p.name, core, -1, "-",
                                f"the timing model stops at t={self.now:.0f} ns ({self.n_done}/{self.n_total} steps "
                                f"done; waiting: {', '.join(stuck)})")
        return nxt

    def advance(self, rates: Mapping[tuple[int, str], float], nxt: float) -> None:
        """Move the transfers in flight on to ``nxt``."""
        dt = max(nxt - self.now, 0.0)
        for key, a in self.dma_active.items():
            if a["setup"] <= self.now:
                a["remaining"] -= rates[key] * dt
        self.now = nxt

    def retire(self) -> None:
        """Finish every step that ended by now, and release what waited for it."""
        done = [key for key, a in self.dma_active.items()
                if a["setup"] <= self.now and a["remaining"] <= _DONE_BYTES]
        for key in done:
            del self.dma_active[key]
        ends = self.ends
        while ends and ends[0][0] <= self.now + 1e-9:
            done.append(heapq.heappop(ends)[2])
        for key in done:
            a = self.active.pop(key)
            c, eng = key
            i = a["idx"]
            ins = self.instrs[c][i]
            if self.keep_events:
                self.events.append(Event(c, isa.lane(ins), type(ins).__name__, a["start"], self.now,
                                         a.get("bytes", 0), i))
            self.busy[c][isa.lane(ins)] += self.now - a["start"]
            self.core_end[c] = max(self.core_end[c], self.now)
            if eng.startswith("dma"):
                if a["write"]:
                    self.wr_bytes += a["bytes"]
                else:
                    self.rd_bytes += a["bytes"]
            self.last_end[key] = self.now
            self.pos[key] += 1
            self.n_done += 1
            self.dirty.add(key)
            deps_left, engines = self.deps_left[c], self.head_engine[c]
            for d in self.dependents[c][i]:
                deps_left[d] -= 1
                if deps_left[d] == 0:
                    self.dirty.add(engines[d])

    def run(self) -> Timeline:
        while self.n_done < self.n_total:
            self.issue()
            rates = self.rates()
            self.advance(rates, self.next_event(rates))
            self.retire()
        m = self.m
        total = self.now + m.kernel_launch_ns + (m.sync_ns if self.p.cores_used > 1 else 0.0)
        return Timeline(total, self.events, {c: dict(v) for c, v in self.busy.items()}, self.rd_bytes, self.wr_bytes,
                        self.ring_bytes, dict(self.core_end))


#: Event-free timelines by program (identity) and machine: the planner, the
#: residency pass and the first launch ask for the same program's time.
_TIMES = ProgramMemo()


@gc_paused
def simulate(p: Program, m: Machine, dynamic_bytes: Mapping[tuple[int, int], int] | None = None,
             keep_events: bool = True) -> Timeline:
    """Simulate program ``p`` on machine ``m``. ``dynamic_bytes``: DRAM bytes of
    gathers and scatters by (core, instruction index), as the functional pass
    counted them. Without events (``keep_events`` False) and without dynamic
    bytes, a program simulated before on the same machine is not simulated
    again (programs are immutable; the timeline is shared, read it only)."""
    if keep_events or dynamic_bytes:
        return _Simulation(p, m, dynamic_bytes or {}, keep_events).run()
    known = _TIMES.get(p)
    if known is not None and known[0] == m:
        return known[1]
    tl = _looped(p, m) or _Simulation(p, m, {}, False).run()
    _TIMES.put(p, (m, tl))
    return tl


def remember(p: Program, m: Machine, tl: Timeline) -> None:
    """Record ``tl`` as program ``p``'s event-free timeline on ``m``, found
    without simulating ``p`` itself (a big matmul timed from simulated prefixes
    of its program, see :func:`extrapolate`): :func:`simulate` then answers with
    it instead of simulating every step again."""
    if tl.events:
        raise ValueError("only an event-free timeline stands in for a simulation")
    _TIMES.put(p, (m, tl))


def extrapolate(a: Timeline, b: Timeline, times: float) -> Timeline:
    """``b`` continued by ``times`` more of what ``a`` to ``b`` added: the total,
    every engine's busy time, each core's end and the bytes moved grow by the
    same multiple of their difference (``a`` and ``b`` are runs of one program
    cut to fewer and more iterations of its steady state)."""
    def on(x: float, y: float) -> float:
        return y + times * (y - x)

    busy = {c: {e: on(a.busy.get(c, {}).get(e, 0.0), v) for e, v in per.items()} for c, per in b.busy.items()}
    return Timeline(on(a.total_ns, b.total_ns), [], busy, round(on(a.dram_read_bytes, b.dram_read_bytes)),
                    round(on(a.dram_write_bytes, b.dram_write_bytes)), round(on(a.ring_bytes, b.ring_bytes)),
                    {c: on(a.core_end.get(c, 0.0), v) for c, v in b.core_end.items()})


#: Most the last two of three truncations' per-iteration times may differ
#: (relative) for a loop's time to be extrapolated from them.
STEADY_TOLERANCE = 0.005
#: Iterations below which a looped program is simulated unrolled.
EXTRAPOLATE_MIN_TRIPS = 5
#: Most iterations a loop is cut to while looking for its steady state.
STEADY_MAX_KEPT = 8


def truncated(p: Program, fewer: int) -> Program:
    """``p`` with every core's top-level loops (of instructions and of
    allocations) run ``fewer`` times less: what the program is with that much
    less work, ring tags and offsets after the loops moved back to match."""
    return dataclasses.replace(p, cores=tuple(
        dataclasses.replace(c, instrs=fewer_trips(c.instrs, fewer), allocs=fewer_trips(c.allocs, fewer))
        if c.looped or c.allocs is not c.alloc_table else c for c in p.cores))


def loop_counts(p: Program) -> list[int] | None:
    """The trip counts of every top-level loop of every core (of instructions, of
    allocations); None when there is none, or a looped stream nests them."""
    trips = [x.trips for c in p.cores if c.looped or c.allocs is not c.alloc_table
             for seq in (c.instrs, c.allocs) for x in seq if isinstance(x, LoopBase)]
    if not trips or any(max_depth(seq) > 1 for c in p.cores for seq in (c.instrs, c.allocs)):
        return None
    return trips


def _looped(p: Program, m: Machine) -> Timeline | None:
    """The timeline of a looped program (one top-level loop per stream), from its
    runs with the fewest-trip loop cut to 1, 2 and 3 iterations (every
    loop cut by as many; 4, 5, ... more while the loops are not steady yet): the
    last two differ by one iteration of every loop, which times each iteration
    left. The two before must differ by as much (the loops are steady), else
    None: simulate it unrolled. (Validated against
    unrolled simulation in tests/adapter/model/test_loops.py.)"""
    if not any(c.looped for c in p.cores):
        return None
    if any(sum(isinstance(x, LoopBase) for x in c.instrs) > 1 for c in p.cores):
        # Several loops a stream (a matmul's K loop per output tile): cutting them all
        # can look steady for a few iterations and change pace later (a 1024^3 GEMM's
        # 6-trip K loops: 3.5 us an iteration up to 4 kept, 6.4 us after), and their
        # cut runs cost most of the unrolled simulation anyway.
        return None
    trips = loop_counts(p)
    if trips is None or min(trips) < EXTRAPOLATE_MIN_TRIPS:
        return None
    least = min(trips)
    # Iterations kept: 1, 2, 3, ... until the last three runs differ alike (a
    # pipeline may take a few iterations to fill), at most STEADY_MAX_KEPT.
    runs: list[Timeline] = []
    for kept in range(1, min(least, STEADY_MAX_KEPT) + 1):
        runs.append(_Simulation(truncated(p, least - kept), m, {}, False).run())
        if len(runs) >= 3:
            t1, t2, t3 = runs[-3:]
            step = t3.total_ns - t2.total_ns
            if step > 0 and abs(step - (t2.total_ns - t1.total_ns)) <= STEADY_TOLERANCE * step:
                break
    else:
        return None
    return extrapolate(t2, t3, least - kept)


def lower_bound_ns(p: Program, m: Machine) -> float:
    """A time :func:`simulate` never reports below for ``p`` (static gathers and
    scatters): each core's PE and vector engines run their steps one at a time,
    one core's transfers together never exceed its DMA rate, and all of them
    never exceed the faster DRAM direction. A planner skips simulating a program
    this already shows is no faster than one it has. A linear pass, no events."""
    buffers = _buffer_dtypes(p)
    dtypes: dict[int, list[str]] = {}
    engines = dram = 0.0
    n = 0
    for c in p.cores:
        pe = vec = 0.0
        nbytes = 0
        if c.looped:  # engine time only (a region's sticks may differ per iteration): still a bound
            for ins, times in _weighted(c.instrs):
                rec = isa.step(ins)
                if rec.lane in ("pe", "vec"):
                    d = rec.duration(ins, p, m, dtypes) * times
                    pe, vec = (pe + d, vec) if rec.lane == "pe" else (pe, vec + d)
            n += c.n_steps
            engines = max(engines, pe, vec)
            continue
        for ins in c.steps:
            rec = isa.step(ins)
            if rec.lane == "pe":
                pe += rec.duration(ins, p, m, dtypes)
            elif rec.lane == "vec":
                vec += rec.duration(ins, p, m, dtypes)
            elif rec.dma != "none":
                nbytes += rec.dram_bytes(ins, buffers, m.stick_bytes, None)
        n += c.n_steps
        engines = max(engines, pe, vec)
        dram += nbytes
        if m.core_dma_gbps > 0:
            # (a transfer ends with up to _DONE_BYTES left)
            engines = max(engines, (nbytes - _DONE_BYTES * c.n_steps) / m.core_dma_gbps)
    fastest = max(m.dram_read_gbps, m.dram_write_gbps)
    if m.dram_read_gbps > 0 and m.dram_write_gbps > 0:
        engines = max(engines, (dram - _DONE_BYTES * n) / fastest)
    # Margin for the simulation's float steps: an engine's step counts as done 1e-9 ns early.
    bound = engines * (1 - 1e-9) - 1e-9 * n - 1e-6
    return max(0.0, bound) + m.kernel_launch_ns + (m.sync_ns if p.cores_used > 1 else 0.0)


def _weighted(code: Any, times: int = 1) -> Any:
    """(instruction, how many times it runs) over a stream, loops not unrolled."""
    for x in code:
        if isinstance(x, Loop):
            yield from _weighted(x.body, times * x.trips)
        else:
            yield x, times


def _buffer_dtypes(p: Program) -> dict[str, str]:
    out = buffer_dtypes(p)
    for r in p.lx_in:
        out.setdefault(r.buffer, r.dtype)
    return out
