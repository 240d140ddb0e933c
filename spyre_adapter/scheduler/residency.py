"""LX residency across kernels: what stays in a core's scratchpad after the
kernel that wrote it, for the kernels that read it next.

Runs once per compiled graph, over its programs in execution order. For each
buffer a kernel writes, its readers are served from LX in order, as long as:

- a loop-group reader's cores read exactly what the same core wrote (the
  partitions line up; a reader whose division does not is re-divided when that
  costs little), or a matmul reader's A-operand row block is held whole by one
  core of the producer: that core uses it in place and sends it over the ring
  to the other cores that need those rows (instead of each reading DRAM);
- every core holding a part still has room for it in every kernel until the
  last reader (its own working set plus everything kept) - otherwise the rest
  of the readers read DRAM as usual, and a kernel the planner cannot see into
  (a hand-written kernel) ends the buffer's stay.

When every reader was served and the buffer is not a graph output, the
producer's store is elided: the value never reaches DRAM. A loop producer may
be re-divided (e.g. one core instead of a split reduction) so one core holds
a matmul's whole row block, when its extra time is less than the DRAM time
that saves.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from spyre_shims.kernel_ir import ExternKernel, KernelGroup

from ..emulator.checks import EmulatorError, Extent, _addr_bounds, check_program
from ..machine import Machine
from ..program import Instr, Program
from .analysis import analyse, itemsize


@dataclasses.dataclass
class Decision:
    """One buffer kept in LX from its producer for one reader."""

    buffer: str
    producer: str
    consumer: str
    bytes_per_core: dict[int, int]  # holder core -> bytes it keeps
    store_elided: bool
    #: matmul readers: reading core -> the holder core its A rows come from
    sources: dict[int, int] = dataclasses.field(default_factory=dict)


# ------------------------------------------------------------------ extents

def _extents(p: Program, buffer: str, store: bool) -> dict[int, Extent] | None:
    """Per core, the address interval of ``buffer`` a program stores (or loads);
    None when it cannot be stated exactly as one interval per core."""
    k = p.kernel
    if isinstance(k, ExternKernel):
        # A matmul's core owns a block of output rows; it is one interval only
        # when the block spans every column (no split of N).
        if not store or k.output.name != buffer or len(k.output.size) != 2:
            return None
        n = int(k.output.size[-1])
        out: dict[int, Extent] = {}
        for s in p.cores:
            if not s.instrs:
                continue
            _, rows, cols, _ = s.ranges
            if tuple(cols) != (0, n) or (p.ksplit > 1 and tuple(s.ranges[3])[0] != 0):
                return None
            out[s.core] = Extent(rows[0] * n, rows[1] * n - 1)
        return out
    if not isinstance(k, KernelGroup) or p.rsplit > 1:
        return None
    dtypes = {b.name: b.dtype for b in k.buffers}
    infos = [analyse(lk, dtypes, {}) for lk in k.kernels]
    out = {}
    for s in p.cores:
        if not s.instrs:
            continue
        ext: Extent | None = None
        for kk, info in enumerate(infos):
            a, b = s.ranges[kk]
            for acc in info.accesses:
                if acc.buffer != buffer or acc.store != store or a >= b:
                    continue
                e = _addr_bounds(info, acc, a, b)
                if e is None:
                    return None
                ext = e if ext is None else Extent(min(ext.lo, e.lo), max(ext.hi, e.hi))
        if ext is not None:
            out[s.core] = ext
    return out


def _reads(p: Program) -> set[str]:
    k = p.kernel
    if isinstance(k, ExternKernel):
        return {b.name for b in k.inputs}
    return {b.name for b in k.buffers if b.role in ("input", "inout")} if isinstance(k, KernelGroup) else set()


def _written(p: Program) -> set[str]:
    k = p.kernel
    if isinstance(k, ExternKernel):
        return {k.output.name}
    if isinstance(k, KernelGroup):
        return {b.name for b in k.buffers if b.role in ("output", "inout")}
    return set()


def _itemsize(p: Program, buffer: str) -> int:
    k = p.kernel
    specs = k.buffers if isinstance(k, (KernelGroup, ExternKernel)) else ()
    return itemsize(next(b.dtype for b in specs if b.name == buffer))


def _peaks(p: Program) -> dict[int, int]:
    return {s.core: s.lx_peak for s in p.cores}


# ------------------------------------------------------------------ serving one reader

def _serve_loop(prod: Program, cons: Program, buffer: str, held: dict[int, Extent], m: Machine) -> Decision | None:
    """A loop-group reader whose every core reads only what it holds."""
    reads = _extents(cons, buffer, store=False)
    if not reads:
        return None
    size = _itemsize(cons, buffer)
    per_core: dict[int, int] = {}
    for core, r in reads.items():
        w = held.get(core)
        if w is None or r.lo < w.lo or r.hi > w.hi:
            return None  # this core reads data another core wrote
        per_core[core] = (w.hi - w.lo + 1) * size
    return Decision(buffer, prod.name, cons.name, per_core, False)


def _a_operand(cons: Program, buffer: str) -> tuple[int, int] | None:
    """(rows, K) when ``buffer`` is exactly a 2-D row-major A operand of a matmul reader."""
    k = cons.kernel
    if not isinstance(k, ExternKernel) or k.inputs[-2].name != buffer:
        return None
    if any(b.name == buffer for b in (*k.inputs[:-2], k.inputs[-1])):
        return None  # also read as B or bias
    a = k.inputs[-2]
    if len(a.size) != 2 or a.offset != 0:
        return None
    rows, kk = int(a.size[0]), int(a.size[1])
    if tuple(int(x) for x in a.stride) != (kk, 1):
        return None
    return rows, kk


def _serve_matmul(prod: Program, cons: Program, buffer: str, held: dict[int, Extent], m: Machine) -> Decision | None:
    """A matmul reading ``buffer`` as A: every core's row block is held whole by one core."""
    dims = _a_operand(cons, buffer)
    if dims is None:
        return None
    _, kk = dims
    size = _itemsize(cons, buffer)
    sources: dict[int, int] = {}
    for s in cons.cores:
        if not s.instrs:
            continue
        _, rows, _, _ = s.ranges
        lo, hi = rows[0] * kk, rows[1] * kk - 1
        holder = next((c for c, e in sorted(held.items()) if e.lo <= lo and hi <= e.hi), None)
        if holder is None:
            return None
        sources[s.core] = holder
    used = set(sources.values())
    per_core = {c: (held[c].hi - held[c].lo + 1) * size for c in used}
    if max(per_core.values(), default=0) > m.lx_usable_bytes:
        return None  # a holder could never keep its rows
    return Decision(buffer, prod.name, cons.name, per_core, False, sources)


def _fits(programs: Sequence[Program], lo: int, hi: int, d: Decision, m: Machine) -> bool:
    """Room for ``d``'s kept bytes on its holder cores in programs[lo..hi], on top
    of each program's LX peak (its working set plus what is already kept there)."""
    for j in range(lo, hi + 1):
        peaks = _peaks(programs[j])
        for core, nbytes in d.bytes_per_core.items():
            if peaks.get(core, 0) + nbytes > m.lx_usable_bytes:
                return False
    return True


# ------------------------------------------------------------------ re-dividing

#: A loop group may be re-divided to line up with its neighbour when that costs
#: at most this much more (in its own closed-form estimate).
REPLAN_SLACK = 1.10


def _replan(p: Program, cores: int, m: Machine, note: str) -> Program | None:
    from .loops import Division, plan_group

    candidates = p.division.get("candidates", {})
    if f"{cores}x1" not in candidates:
        return None
    q = plan_group(p.kernel, m, {}, p.name, force=Division(cores))
    try:
        check_program(q, m, {})
    except EmulatorError:
        return None  # that division breaks a hardware rule for this group
    q.division["candidates"] = candidates
    q.division["aligned_with"] = note
    return q


def _replan_like(prod: Program, cons: Program, m: Machine) -> Program | None:
    """The loop reader re-divided like its loop producer, if (nearly) as cheap."""
    if not (isinstance(prod.kernel, KernelGroup) and isinstance(cons.kernel, KernelGroup) and prod.rsplit == 1
            and prod.division.get("rows") == cons.division.get("rows")
            and prod.division.get("row_cores") != cons.division.get("row_cores")):
        return None
    candidates = cons.division.get("candidates", {})
    best = min(candidates.values(), default=None)
    mine = candidates.get(f"{prod.division['row_cores']}x1")
    if best is None or mine is None or mine > REPLAN_SLACK * best:
        return None
    return _replan(cons, int(prod.division["row_cores"]), m, prod.name)


# ------------------------------------------------------------------ planner

def plan_residency(programs: list[Program], graph_outputs: set[str], m: Machine,
                   reads: Sequence[set[str]] | None = None) -> list[Decision]:
    """Mark LX-served loads, LX-sourced ring transfers and elided stores in the
    graph's programs, in place (re-divided programs replace their entries).

    ``reads``: per program, the buffers its kernel reads, including kernels whose
    program the planner cannot see into (default: from the programs)."""
    reads = list(reads) if reads is not None else [_reads(p) for p in programs]
    # program index -> core -> bytes kept there for later kernels (already in its LX peak)
    extra: dict[int, dict[int, int]] = {}
    decisions: list[Decision] = []
    for i in range(len(programs)):
        if programs[i].kernel is None:
            continue
        for buffer in sorted(_written(programs[i])):
            decisions += _keep_buffer(programs, i, buffer, graph_outputs, m, reads, extra)
    return decisions


def _keep_buffer(programs: list[Program], i: int, buffer: str, graph_outputs: set[str], m: Machine,
                 reads: Sequence[set[str]], extra: dict[int, dict[int, int]]) -> list[Decision]:
    """Keep ``buffer`` for as many of its readers as possible, if the simulated time
    of the programs that change says it pays (it can cost: a producer re-divided
    to hold whole row blocks runs on fewer cores)."""
    readers = [j for j in range(i + 1, len(programs)) if buffer in reads[j]]
    if not readers:
        return []
    best: tuple[float, list[Program], dict[int, dict[int, int]], list[Decision]] | None = None
    baseline: dict[int, float] = {}  # simulated ns of the current programs, shared by every option
    for prod in [programs[i], *_producer_options(programs, i, buffer, readers, m, extra)]:
        trial = list(programs)
        trial[i] = _clone(prod)
        for j in range(i + 1, readers[-1] + 1):
            if trial[j].kernel is not None:
                trial[j] = _clone(trial[j])
        trial_extra = {k: dict(v) for k, v in extra.items()}
        decisions = _keep_for_readers(trial, i, buffer, readers, graph_outputs, m, trial_extra)
        if not decisions:
            continue
        changed = [i, *(j for j in range(i + 1, readers[-1] + 1) if trial[j] is not programs[j]
                        and any(d.consumer == trial[j].name for d in decisions))]
        for x in changed:
            if x not in baseline:
                baseline[x] = _sim_ns(programs[x], m)
        gain = sum(baseline[x] - _sim_ns(trial[x], m) for x in changed)
        if gain > 0 and (best is None or gain > best[0]):
            best = (gain, trial, trial_extra, decisions)
    if best is None:
        return []
    _, trial, trial_extra, decisions = best
    programs[:] = trial
    extra.clear()
    extra.update(trial_extra)
    return decisions


def _sim_ns(p: Program, m: Machine) -> float:
    from ..emulator.timing import simulate

    return simulate(p, m).total_ns


def _clone(p: Program) -> Program:
    """A copy whose streams and division can be marked without touching ``p``."""
    cores = [dataclasses.replace(s, instrs=[dataclasses.replace(x) for x in s.instrs], ranges=list(s.ranges))
             for s in p.cores]
    division = {k: list(v) if isinstance(v, list) else v for k, v in p.division.items()}
    return dataclasses.replace(p, cores=cores, division=division)


def _keep_for_readers(programs: list[Program], i: int, buffer: str, readers: list[int], graph_outputs: set[str],
                      m: Machine, extra: dict[int, dict[int, int]]) -> list[Decision]:
    served: list[tuple[int, Decision]] = []
    for j in readers:
        if any(programs[x].kernel is None for x in range(i + 1, j + 1)):
            break  # an opaque kernel: its LX use is unknown
        d = _serve(programs, i, j, buffer, m)
        if d is None or not _fits(programs, i, j, d, m):
            break
        if served and d.bytes_per_core != served[0][1].bytes_per_core:
            break  # the holders kept what the first reader needed; another layout would need another copy
        served.append((j, d))
    if not served:
        return []
    elide = len(served) == len(readers) and buffer not in graph_outputs and _all_stored_cores_hold(
        programs[i], buffer, served[0][1])
    last = served[-1][0]
    for x in range(i, last + 1):
        for core, nbytes in served[0][1].bytes_per_core.items():
            extra.setdefault(x, {})[core] = extra.get(x, {}).get(core, 0) + nbytes
            _add_peak(programs[x], core, nbytes)
    for j, d in served:
        d.store_elided = elide
        _apply_reader(programs[j], d)
    if elide:
        _elide_store(programs[i], buffer)
    return [d for _, d in served]


def _serve(programs: list[Program], i: int, j: int, buffer: str, m: Machine) -> Decision | None:
    prod, cons = programs[i], programs[j]
    held = _extents(prod, buffer, store=True)
    if not held:
        return None
    if isinstance(cons.kernel, KernelGroup):
        d = _serve_loop(prod, cons, buffer, held, m)
        if d is None and not cons.division.get("lx_resident_inputs"):
            aligned = _replan_like(prod, cons, m)
            if aligned is not None and (d := _serve_loop(prod, aligned, buffer, held, m)) is not None:
                programs[j] = aligned
        return d
    return _serve_matmul(prod, cons, buffer, held, m)


def _matmul_readers_served(prod: Program, programs: list[Program], buffer: str, readers: list[int],
                           m: Machine) -> int:
    """How many of the leading readers (matmuls reading ``buffer`` as A) ``prod``'s
    partition can serve from LX."""
    held = _extents(prod, buffer, store=True)
    n = 0
    for j in readers:
        if not held or programs[j].kernel is None or _serve_matmul(prod, programs[j], buffer, held, m) is None:
            break
        n += 1
    return n


#: Re-divisions of a producer tried per kept buffer (each is simulated).
MAX_PRODUCER_OPTIONS = 3


def _producer_options(programs: list[Program], i: int, buffer: str, readers: list[int], m: Machine,
                      extra: dict[int, dict[int, int]]) -> list[Program]:
    """A loop producer re-divided (no reduction split, other row-core counts) so
    that one core holds each row block its matmul readers need - only divisions
    that serve more readers than the current one, cheapest estimate first."""
    prod = programs[i]
    if (extra.get(i) or prod.division.get("lx_resident_inputs") or not isinstance(prod.kernel, KernelGroup)
            or _a_operand(programs[readers[0]], buffer) is None):
        return []  # the producer already holds or receives data in LX: keep its plan
    now = _matmul_readers_served(prod, programs, buffer, readers, m)
    candidates: dict[str, float] = prod.division.get("candidates", {})
    out = []
    for key, _ in sorted(candidates.items(), key=lambda kv: kv[1]):
        cores, rsplit = (int(x) for x in key.split("x"))
        if rsplit != 1 or (cores, rsplit) == (prod.division.get("row_cores"), prod.rsplit):
            continue
        q = _replan(prod, cores, m, programs[readers[0]].name)
        if q is not None and _matmul_readers_served(q, programs, buffer, readers, m) > now:
            out.append(q)
        if len(out) == MAX_PRODUCER_OPTIONS:
            break
    return out


def _all_stored_cores_hold(prod: Program, buffer: str, d: Decision) -> bool:
    stored = {s.core for s in prod.cores if any(i.op == "dma_out" and i.buffer == buffer for i in s.instrs)}
    return stored <= set(d.bytes_per_core)


def _add_peak(p: Program, core: int, nbytes: int) -> None:
    for s in p.cores:
        if s.core == core:
            s.lx_peak += nbytes


def _apply_reader(cons: Program, d: Decision) -> None:
    saved = 0
    if d.sources:
        saved = _a_from_lx(cons, d)
    else:
        for s in cons.cores:
            if s.core not in d.bytes_per_core:
                continue
            for ins in s.instrs:
                if ins.op == "dma_in" and ins.buffer == d.buffer and not ins.resident:
                    ins.resident = True
                    saved += ins.bytes
    cons.compulsory_bytes = max(cons.compulsory_bytes - saved, 0)
    cons.division.setdefault("lx_resident_inputs", []).append(d.buffer)


def _a_from_lx(cons: Program, d: Decision) -> int:
    """A tiles of a matmul: used in place on the holder, sent over the ring from
    the holder's LX to every other core; returns the DRAM bytes no longer read."""
    saved = 0
    for s in cons.cores:
        holder = d.sources.get(s.core)
        if holder is None:
            continue
        out: list[Instr] = []
        k = 0
        while k < len(s.instrs):
            ins = s.instrs[k]
            if ins.op == "dma_in" and ins.buffer == d.buffer:
                total = ins.bytes
                nxt = s.instrs[k + 1] if k + 1 < len(s.instrs) else None
                if nxt is not None and nxt.op == "ring" and nxt.buffer == d.buffer and nxt.peers:
                    total += nxt.bytes  # the all-gather of the rest of the tile: not needed now
                    k += 1
                saved += ins.bytes
                if holder == s.core:
                    out.append(Instr("dma_in", d.buffer, total, tile=ins.tile, resident=True,
                                     note="A rows kept in this core's LX"))
                else:
                    out.append(Instr("ring", d.buffer, total, tile=ins.tile, peer=holder, from_lx=True,
                                     note=f"A rows from core {holder}'s LX"))
            else:
                out.append(ins)
            k += 1
        s.instrs = out
    return saved


def _elide_store(prod: Program, buffer: str) -> None:
    written = 0
    for s in prod.cores:
        for ins in s.instrs:
            if ins.op == "dma_out" and ins.buffer == buffer:
                ins.resident = True
                written += ins.bytes
    prod.division.setdefault("lx_elided_outputs", []).append(buffer)
    prod.compulsory_bytes = max(prod.compulsory_bytes - written, 0)


def summary(decisions: Sequence[Decision]) -> dict[str, Any]:
    """Counts for the report: buffers kept, stores elided, bytes kept (per reader)."""
    buffers = {(d.producer, d.buffer) for d in decisions}
    return {"kept": len(buffers), "readers_served": len(decisions),
            "stores_elided": len({(d.producer, d.buffer) for d in decisions if d.store_elided}),
            "bytes_kept": sum(sum(d.bytes_per_core.values()) for d in {(d.producer, d.buffer): d
                                                                       for d in decisions}.values())}
