"""Time model of a Spyre program: a discrete-event simulation of every core.

Each core has engines that run their instructions in program order: a load
DMA channel per operand and a store channel (``dma_in``/``dma_out``, DRAM <->
LX), the ring port (``ring``, core <-> core) and compute (``vec`` on the
vector/SFU path, ``pe`` on the PE arrays). Dependencies:
compute of tile t waits for that tile's inputs; a tile's inputs wait until the
compute two tiles back released its LX slot (double buffering); outputs wait for
their compute; a ring transfer waits until its source core has the data; a
barrier waits for every core. DRAM bandwidth is shared: concurrent transfers
split the sustained bandwidth of their read/write mix fairly, and one core's
transfers together never exceed its DMA rate. Ring links run at 128 B/cycle per direction.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict

from ..machine import Machine
from ..program import Program

#: Engines per core: a load queue per operand and a store queue (DMA channels,
#: all drawing on the shared DRAM bandwidth), the ring port, and compute.
_ENGINE = {"dma_in": "dma_in", "dma_out": "dma_out", "ring": "ring", "vec": "compute", "pe": "compute"}


#: A transfer with less than this many bytes left has finished (float residue).
_DONE_BYTES = 1e-3


def _engine(ins) -> str:  # type: ignore[no-untyped-def]
    eng = _ENGINE[ins.op]
    return f"dma_in:{ins.buffer}" if eng == "dma_in" else eng


def _is_dma(engine: str) -> bool:
    return engine.startswith("dma_")


@dataclasses.dataclass
class Event:
    """One executed instruction."""

    core: int
    engine: str
    op: str
    buffer: str
    start: float
    end: float
    bytes: int
    tile: int


@dataclasses.dataclass
class Timeline:
    """Result of simulating one program."""

    total_ns: float
    events: list[Event]
    busy: dict[int, dict[str, float]]
    dram_bytes: int
    ring_bytes: int

    def core_time(self, core: int) -> float:
        """When the core's last instruction ended."""
        return max((e.end for e in self.events if e.core == core), default=0.0)


def simulate(p: Program, m: Machine) -> Timeline:
    """Simulate program ``p`` on machine ``m``."""
    queues: dict[tuple[int, str], list[int]] = defaultdict(list)
    barriers: dict[int, list[int]] = defaultdict(list)
    for s in p.cores:
        for i, ins in enumerate(s.instrs):
            if ins.op == "barrier":
                barriers[s.core].append(i)
            elif ins.op in ("dma_in", "dma_out") and ins.resident:
                continue  # served from LX / elided: no transfer
            else:
                queues[(s.core, _engine(ins))].append(i)
    instrs = {s.core: s.instrs for s in p.cores}
    pos = {k: 0 for k in queues}
    # Per-core progress used by dependency checks.
    pending_in: dict[tuple[int, int], int] = defaultdict(int)  # (core, tile) -> inputs not yet arrived
    for s in p.cores:
        for ins in s.instrs:
            if _is_input(ins) and not ins.resident:
                pending_in[(s.core, ins.tile)] += 1
    computed: dict[int, int] = defaultdict(lambda: -1)  # core -> highest tile whose compute finished
    compute_done: dict[tuple[int, int], bool] = {}
    arrived: set[tuple[int, str, int]] = set()  # (core, buffer, tile) loaded from DRAM
    done_idx: dict[int, int] = defaultdict(int)  # core -> count of finished instructions
    barrier_pos = {c: 0 for c in barriers}
    # Instructions (other than barriers) a core must finish before each of its barriers.
    skipped = {s.core: [k for k, ins in enumerate(s.instrs) if ins.op in ("dma_in", "dma_out") and ins.resident]
               for s in p.cores}
    need = {c: [b - k - sum(1 for x in skipped.get(c, ()) if x < b) for k, b in enumerate(bl)]
            for c, bl in barriers.items()}
    active: dict[tuple[int, str], dict] = {}
    last_end: dict[tuple[int, str], float] = {}
    events: list[Event] = []
    busy: dict[int, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    now = 0.0
    dram_bytes = ring_bytes = 0

    def blocked_by_barrier(core: int, idx: int) -> bool:
        bl = barriers.get(core)
        if not bl:
            return False
        bp = barrier_pos[core]
        return bp < len(bl) and idx > bl[bp]

    def ready(core: int, idx: int) -> bool:
        ins = instrs[core][idx]
        if blocked_by_barrier(core, idx):
            return False
        if ins.op in ("vec", "pe"):
            return pending_in[(core, ins.tile)] == 0
        if ins.op == "dma_in":
            return computed[core] >= ins.tile - 2 or ins.tile < 2
        if ins.op == "dma_out":
            return compute_done.get((core, ins.tile), False)
        if ins.op == "ring":
            if ins.from_lx:
                return True
            if ins.buffer == "partials":
                return compute_done.get((core, ins.tile), False)
            if ins.peers:  # all-gather: every peer's slice must have arrived
                return all((p2, ins.buffer, ins.tile) in arrived for p2 in ins.peers)
            return (ins.peer, ins.buffer, ins.tile) in arrived or ins.peer < 0
        return True

    total_instrs = sum(len(v) for v in queues.values())  # resident transfers are not queued
    n_done = 0
    while True:
        progressed = True
        while progressed:
            progressed = False
            for key, q in queues.items():
                if key in active or pos[key] >= len(q):
                    continue
                core, eng = key
                idx = q[pos[key]]
                if not ready(core, idx):
                    continue
                ins = instrs[core][idx]
                act = {"idx": idx, "start": now}
                if eng == "compute":
                    act["end"] = now + ins.cycles / m.clock_ghz
                elif _is_dma(eng):
                    act["remaining"] = float(ins.bytes)
                    # Descriptor setup is hidden behind a transfer that was
                    # running on the same channel (queued back to back).
                    back_to_back = last_end.get(key, -1.0) >= now - 1e-9
                    act["setup"] = now + (0.0 if back_to_back else m.dma_setup_ns)
                    act["write"] = ins.op == "dma_out"
                else:
                    act["remaining"] = float(ins.bytes)
                    act["setup"] = now
                active[key] = act
                progressed = True
            # Barriers: release when every core reached its next barrier.
            if barriers and all(barrier_pos[c] >= len(barriers[c]) or done_idx[c] >= need[c][barrier_pos[c]]
                                for c in barriers):
                if any(barrier_pos[c] < len(barriers[c]) for c in barriers):
                    for c in barriers:
                        if barrier_pos[c] < len(barriers[c]):
                            events.append(Event(c, "sync", "barrier", "", now, now + m.sync_ns, 0, -1))
                            barrier_pos[c] += 1
                    now += m.sync_ns
                    progressed = True
        if not active:
            if n_done >= total_instrs:
                break
            raise RuntimeError(f"{p.name}: program deadlocked at t={now:.0f} ns ({n_done}/{total_instrs} done)")
        # Rates for transfers past their setup.
        dram = [(k, a) for k, a in active.items() if _is_dma(k[1]) and a["setup"] <= now]
        n_rd = sum(1 for _, a in dram if not a["write"])
        n_wr = len(dram) - n_rd
        bw = m.dram_gbps(n_rd, n_wr) if dram else 0.0
        per_core: dict[int, int] = defaultdict(int)
        for k, _ in dram:
            per_core[k[0]] += 1
        # Fair share of DRAM per transfer, and a core's transfers together at
        # most its DMA rate.
        rates = {k: min(bw / len(dram), m.core_dma_gbps / per_core[k[0]]) for k, _ in dram}
        # Next event.
        nxt = float("inf")
        for key, a in active.items():
            if key[1] == "compute":
                nxt = min(nxt, a["end"])
            elif a["setup"] > now:
                nxt = min(nxt, a["setup"])
            else:
                r = rates[key] if _is_dma(key[1]) else m.ring_gbps
                end = now + a["remaining"] / r if r > 0 else now
                if end <= now:  # less than a float step of `now` left: done (else no time would pass)
                    a["remaining"] = 0.0
                nxt = min(nxt, end)
        dt = max(nxt - now, 0.0)
        for key, a in active.items():
            if key[1] != "compute" and a["setup"] <= now:
                r = rates[key] if _is_dma(key[1]) else m.ring_gbps
                a["remaining"] -= r * dt
        now = nxt
        for key in list(active):
            a = active[key]
            core, eng = key
            done = a["end"] <= now + 1e-9 if eng == "compute" else (a["setup"] <= now and a["remaining"] <= _DONE_BYTES)
            if not done:
                continue
            idx = a["idx"]
            ins = instrs[core][idx]
            lane = "dma_in" if eng.startswith("dma_in") else eng
            events.append(Event(core, lane, ins.op, ins.buffer, a["start"], now, ins.bytes, ins.tile))
            busy[core][lane] += now - a["start"]
            del active[key]
            last_end[key] = now
            pos[key] += 1
            n_done += 1
            done_idx[core] += 1
            if ins.op in ("vec", "pe"):
                compute_done[(core, ins.tile)] = True
                computed[core] = max(computed[core], ins.tile)
            elif _is_input(ins):
                pending_in[(core, ins.tile)] -= 1
                if ins.op == "dma_in":
                    arrived.add((core, ins.buffer, ins.tile))
                    dram_bytes += ins.bytes
                else:
                    ring_bytes += ins.bytes
            elif ins.op == "dma_out":
                dram_bytes += ins.bytes
            else:
                ring_bytes += ins.bytes
    total = now + m.kernel_launch_ns
    return Timeline(total, events, {c: dict(v) for c, v in busy.items()}, dram_bytes, ring_bytes)


def _is_input(ins) -> bool:  # type: ignore[no-untyped-def]
    """Operands a compute step waits for (bias loads and partials are epilogue)."""
    return (ins.op == "dma_in" and ins.note != "bias") or (ins.op == "ring" and ins.buffer != "partials")
