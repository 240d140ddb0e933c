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
from collections import defaultdict
from collections.abc import Mapping

from spyre_adapter.model import isa
from spyre_adapter.model.errors import EmulatorError
from spyre_adapter.model.machine import Machine
from spyre_adapter.model.program import Instruction, Lx, Program, Region

__all__ = ["Event", "Timeline", "simulate", "lower_bound_ns", "dram_bytes_of"]

#: A transfer with less than this many bytes left has finished (float residue).
_DONE_BYTES = 1e-3


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
    write, which depended on everything the range had)."""

    def __init__(self, dram_written: set[str]) -> None:
        self.tables: dict[str, dict[tuple[int, int], list]] = defaultdict(dict)
        self.dram_written = dram_written  # buffers the core writes: only these can conflict in DRAM

    def _access(self, space: str, lo: int, hi: int, write: bool, i: int, deps: set[int]) -> None:
        table = self.tables[space]
        covered = []
        for (a, b), (w, rs) in table.items():
            if a < hi and lo < b:
                if w is not None:
                    deps.add(w)
                if write:
                    deps.update(rs)
                    if lo <= a and b <= hi:
                        covered.append((a, b))
        if write:
            for k in covered:
                del table[k]
            table[(lo, hi)] = [i, []]
        else:
            table.setdefault((lo, hi), [None, []])[1].append(i)

    def access(self, i: int, lx_reads: list[Lx], lx_writes: list[Lx], dram_reads: list, dram_writes: list) -> set[int]:
        deps: set[int] = set()
        for views, write in ((lx_reads, False), (lx_writes, True)):
            for v in views:
                lo, hi = v.byte_range()
                if hi > lo:
                    self._access("", lo, hi, write, i, deps)
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
                self._access("dram:" + name, lo, hi, write, i, deps)
        deps.discard(i)
        return deps


def simulate(p: Program, m: Machine, dynamic_bytes: Mapping[tuple[int, int], int] | None = None,
             keep_events: bool = True) -> Timeline:
    """Simulate program ``p`` on machine ``m``. ``dynamic_bytes``: DRAM bytes of
    gathers and scatters by (core, instruction index), as the functional pass counted them."""
    dynamic_bytes = dynamic_bytes or {}
    buffers = _buffer_dtypes(p)
    instrs = {c.core: c.instrs for c in p.cores}
    n_total = sum(len(v) for v in instrs.values())
    deps_left: dict[tuple[int, int], int] = {}
    dependents: dict[tuple[int, int], list[tuple[int, int]]] = defaultdict(list)
    queues: dict[tuple[int, str], list[int]] = defaultdict(list)
    barrier_members: dict[int, set[int]] = defaultdict(set)
    sends: dict[tuple[int, int], tuple[int, int]] = {}  # (tag, receiver) -> (sender core, index)
    recvs: dict[tuple[int, int], tuple[int, int]] = {}  # (tag, receiver) -> (receiver core, index)
    for c, stream in instrs.items():
        hz = _Hazards({r.buffer if isinstance(r, Region) else r
                       for ins in stream for r in isa.dram_accesses(ins)[1]})
        last_barrier = None
        since_barrier: list[int] = []
        for i, ins in enumerate(stream):
            rec = isa.step(ins)
            lr, lw = rec.lx_accesses(ins, p.bodies)
            dr, dw = rec.dram_accesses(ins)
            deps = hz.access(i, lr, lw, dr, dw)
            if rec.sync == "barrier":
                deps = set(since_barrier) | ({last_barrier} if last_barrier is not None else set())
                last_barrier, since_barrier = i, []
                barrier_members[ins.tag].add(c)
            else:
                if last_barrier is not None:
                    deps.add(last_barrier)
                since_barrier.append(i)
            deps_left[(c, i)] = len(deps)
            for d in deps:
                dependents[(c, d)].append((c, i))
            queues[(c, rec.engine(ins))].append(i)
            if rec.sync == "send":
                for peer in ins.peers:  # type: ignore[union-attr]
                    sends[(ins.tag, peer)] = (c, i)  # type: ignore[union-attr]
            elif rec.sync == "recv":
                recvs[(ins.tag, c)] = (c, i)  # type: ignore[union-attr]
    pos = {k: 0 for k in queues}
    head_engine = {(c, i): (c, isa.engine(instrs[c][i])) for c, s in instrs.items() for i in range(len(s))}
    dtypes: dict[int, list[str]] = {}
    active: dict[tuple[int, str], dict] = {}
    last_end: dict[tuple[int, str], float] = {}
    events: list[Event] = []
    busy: dict[int, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    core_end: dict[int, float] = defaultdict(float)
    arrived: dict[int, set[int]] = defaultdict(set)
    rd_bytes = wr_bytes = ring_bytes = 0
    now = 0.0
    n_done = 0
    dirty: set[tuple[int, str]] = set(queues)

    def head(key: tuple[int, str]) -> int | None:
        q = queues[key]
        return q[pos[key]] if pos[key] < len(q) else None

    def can_start(c: int, i: int) -> bool:
        return deps_left[(c, i)] == 0 and head(head_engine[(c, i)]) == i and head_engine[(c, i)] not in active

    def start(key: tuple[int, str], i: int, extra: dict | None = None) -> None:
        c = key[0]
        ins = instrs[c][i]
        act = {"idx": i, "start": now}
        if key[1].startswith("dma"):
            nbytes = dram_bytes_of(ins, buffers, m.stick_bytes, dynamic_bytes.get((c, i)))
            act.update(remaining=float(nbytes), bytes=nbytes, write=key[1] == "dma_out",
                       setup=now + (0.0 if last_end.get(key, -1.0) >= now - 1e-9 else m.dma_setup_ns))
        elif key[1] in ("ring_tx", "ring_rx"):
            act.update(end=now + (extra or {}).get("ns", 0.0), bytes=(extra or {}).get("bytes", 0))
        else:
            act.update(end=now + isa.duration(ins, p, m, dtypes), bytes=0)
        active[key] = act

    while n_done < n_total:
        progressed = True
        while progressed:
            progressed = False
            for key in list(dirty):
                dirty.discard(key)
                if key in active:
                    continue
                i = head(key)
                if i is None:
                    continue
                c = key[0]
                ins = instrs[c][i]
                if deps_left[(c, i)]:
                    continue
                sync = isa.step(ins).sync
                if sync == "send":
                    parts = [recvs.get((ins.tag, peer)) for peer in ins.peers]
                    if any(r is None for r in parts):
                        raise EmulatorError("deadlock", p.name, c, i, "ring",
                                            f"#{ins.tag} is sent to a core with no matching receive")
                    if not all(can_start(rc, ri) for rc, ri in parts):  # type: ignore[misc]
                        continue
                    nbytes = ins.src.numel * ins.src.itemsize
                    ns = nbytes / m.ring_gbps
                    start(key, i, {"ns": ns, "bytes": nbytes})
                    for rc, ri in parts:  # type: ignore[misc]
                        start((rc, "ring_rx"), ri, {"ns": ns, "bytes": 0})
                    ring_bytes += nbytes * len(parts)
                    progressed = True
                elif sync == "recv":
                    snd = sends.get((ins.tag, c))
                    if snd is None:
                        raise EmulatorError("deadlock", p.name, c, i, "ring", f"#{ins.tag} is received but no core sends it")
                    if (snd[0], "ring_tx") not in active:
                        dirty.add((snd[0], "ring_tx"))
                        progressed = True
                elif sync == "barrier":
                    active[key] = {"idx": i, "start": now, "end": float("inf")}
                    arrived[ins.tag].add(c)
                    if arrived[ins.tag] >= barrier_members[ins.tag]:
                        for bc in barrier_members[ins.tag]:
                            active[(bc, "sync")]["end"] = now + m.sync_ns
                    progressed = True
                else:
                    start(key, i)
                    progressed = True
        nxt = float("inf")
        dram = [(k, a) for k, a in active.items() if k[1].startswith("dma") and a["setup"] <= now]
        rates: dict[tuple[int, str], float] = {}
        if dram:
            # Fair share of the mix's sustained DRAM bandwidth; one core's
            # transfers together at most its DMA rate.
            n_rd = sum(1 for _, a in dram if not a["write"])
            bw = m.dram_gbps(n_rd, len(dram) - n_rd)
            per_core: dict[int, int] = defaultdict(int)
            for k, _ in dram:
                per_core[k[0]] += 1
            rates = {k: min(bw / len(dram), m.core_dma_gbps / per_core[k[0]]) for k, _ in dram}
        for key, a in active.items():
            if key[1].startswith("dma"):
                if a["setup"] > now:
                    nxt = min(nxt, a["setup"])
                else:
                    end = now + a["remaining"] / rates[key] if rates[key] > 0 else now
                    if end <= now:  # less than a float step of `now` left: done
                        a["remaining"] = 0.0
                    nxt = min(nxt, end)
            else:
                nxt = min(nxt, a["end"])
        if nxt == float("inf"):
            stuck = [f"core {k[0]} {k[1]} at #{head(k)}" for k in queues if head(k) is not None][:6]
            core = next((k[0] for k in queues if head(k) is not None), -1)
            raise EmulatorError("deadlock", p.name, core, -1, "-", f"the timing model stops at t={now:.0f} ns "
                                f"({n_done}/{n_total} steps done; waiting: {', '.join(stuck)})")
        dt = max(nxt - now, 0.0)
        for key, a in active.items():
            if key[1].startswith("dma") and a["setup"] <= now:
                a["remaining"] -= rates[key] * dt
        now = nxt
        for key in list(active):
            a = active[key]
            c, eng = key
            if eng.startswith("dma"):
                done = a["setup"] <= now and a["remaining"] <= _DONE_BYTES
            else:
                done = a["end"] <= now + 1e-9
            if not done:
                continue
            i = a["idx"]
            ins = instrs[c][i]
            if keep_events:
                events.append(Event(c, isa.lane(ins), type(ins).__name__, a["start"], now, a.get("bytes", 0), i))
            busy[c][isa.lane(ins)] += now - a["start"]
            core_end[c] = max(core_end[c], now)
            if eng.startswith("dma"):
                if a["write"]:
                    wr_bytes += a["bytes"]
                else:
                    rd_bytes += a["bytes"]
            del active[key]
            last_end[key] = now
            pos[key] += 1
            n_done += 1
            dirty.add(key)
            for d in dependents.get((c, i), ()):
                deps_left[d] -= 1
                if deps_left[d] == 0:
                    dirty.add(head_engine[d])
    total = now + m.kernel_launch_ns + (m.sync_ns if p.cores_used > 1 else 0.0)
    return Timeline(total, events, {c: dict(v) for c, v in busy.items()}, rd_bytes, wr_bytes, ring_bytes,
                    dict(core_end))


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
        for ins in c.instrs:
            rec = isa.step(ins)
            if rec.lane == "pe":
                pe += rec.duration(ins, p, m, dtypes)
            elif rec.lane == "vec":
                vec += rec.duration(ins, p, m, dtypes)
            elif rec.dma != "none":
                nbytes += rec.dram_bytes(ins, buffers, m.stick_bytes, None)
        n += len(c.instrs)
        engines = max(engines, pe, vec)
        dram += nbytes
        if m.core_dma_gbps > 0:
            # (a transfer ends with up to _DONE_BYTES left)
            engines = max(engines, (nbytes - _DONE_BYTES * len(c.instrs)) / m.core_dma_gbps)
    fastest = max(m.dram_read_gbps, m.dram_write_gbps)
    if m.dram_read_gbps > 0 and m.dram_write_gbps > 0:
        engines = max(engines, (dram - _DONE_BYTES * n) / fastest)
    # Margin for the simulation's float steps: an engine's step counts as done 1e-9 ns early.
    bound = engines * (1 - 1e-9) - 1e-9 * n - 1e-6
    return max(0.0, bound) + m.kernel_launch_ns + (m.sync_ns if p.cores_used > 1 else 0.0)


def _buffer_dtypes(p: Program) -> dict[str, str]:
    out = {name: dt for name, dt, _ in p.workspace}
    k = p.kernel
    if k is not None:
        for b in k.buffers:
            out[b.name] = b.dtype
    for r in p.lx_in:
        out.setdefault(r.buffer, r.dtype)
    return out
