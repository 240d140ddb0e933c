"""LX residency across kernels: what stays in a core's scratchpad after the
kernel that wrote it, for the kernels that read it next.

Runs once per compiled graph over its programs in execution order. For each
buffer a loop group writes, its loop-group readers are re-planned with the
producer's shares as LX windows they may read in place (a reader whose division
does not line up is re-divided like the producer when that costs little). A
reader is *served* when its re-planned program no longer loads the buffer from
DRAM at all - the builder decides, so nothing here guesses what a program
reads. The producer is re-planned to keep each core's share at a fixed LX range
(the top of the scratchpad), kernels in between are re-planned around it, and
when every reader was served and the buffer is not a graph output its store is
elided. An option is kept only when simulating the changed programs says it
saves time. The emulator checks the outcome: a reader that expects LX data no
earlier kernel left, or a kernel that overwrites held data, is an error.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from spyre_shims import index as sidx
from spyre_shims.kernel_ir import ExternKernel, KernelGroup

from spyre_adapter.model import isa
from spyre_adapter.model.errors import DoesNotFit
from spyre_adapter.model.gc_pause import gc_paused
from spyre_adapter.model.loop_steps import instructions
from spyre_adapter.model.machine import Machine
from spyre_adapter.model.program import Program, Resident, itemsize
from spyre_adapter.model.structure import positional_names
from spyre_adapter.model.timing import simulate
from spyre_adapter.scheduler.loop_program import Hold
from spyre_adapter.scheduler.loops import Division, Residency, plan_group
from spyre_adapter.scheduler.matmul import plan_matmul, replan_with_held_a

__all__ = ["Decision", "plan_residency", "summary"]

#: A reader may be re-divided like its producer when its estimate is at most this much worse.
REPLAN_SLACK = 1.10


@dataclasses.dataclass
class Decision:
    """One buffer kept in LX from its producer for one reader."""

    buffer: str
    producer: str
    consumer: str
    bytes_per_core: dict[int, int]
    store_elided: bool


@dataclasses.dataclass
class _Constraints:
    """What residency asks of one program (accumulated over decisions)."""

    lx_in: list[Resident] = dataclasses.field(default_factory=list)
    keep: dict[str, dict[int, Hold]] = dataclasses.field(default_factory=dict)
    reserved: dict[int, list[tuple[int, int]]] = dataclasses.field(default_factory=lambda: defaultdict(list))
    carry: list[Resident] = dataclasses.field(default_factory=list)
    division: Division | None = None

    def copy(self) -> _Constraints:
        return _Constraints(list(self.lx_in), {b: dict(v) for b, v in self.keep.items()},
                            defaultdict(list, {c: list(v) for c, v in self.reserved.items()}), list(self.carry),
                            self.division)

    def residency(self) -> Residency:
        return Residency(tuple(self.lx_in), tuple((b, tuple(sorted(v.items()))) for b, v in sorted(self.keep.items())),
                         tuple((c, tuple(v)) for c, v in sorted(self.reserved.items())), tuple(self.carry))


def _shares(p: Program, buffer: str) -> dict[int, tuple[int, int]] | None:
    """Per core, the one contiguous run of ``buffer`` it stores (None if not so)."""
    out: dict[int, tuple[int, int]] = {}
    for c in p.cores:
        runs = sorted(moved[0].bounds() for ins in c.steps if isa.step(ins).dma == "out"
                      and (moved := isa.transfer(ins)) is not None and moved[0].buffer == buffer)
        if not runs:
            continue
        lo, hi = runs[0][0], runs[0][1] + 1
        for a, b in runs[1:]:
            if a != hi:
                return None
            hi = b + 1
        out[c.core] = (lo, hi)
    return out or None


def _loads(p: Program, buffer: str) -> bool:
    return any(isa.step(i).dma == "in" and buffer in isa.dram_buffers(i)[0] for c in p.cores for i in instructions(c.instrs))


def _division(p: Program) -> Division:
    return Division(p.plan.row_cores, p.plan.rsplit)


class _Memo:
    """Re-planned programs by kernel *structure* (the backend's program cache, whose
    keys make buffer names positional) and the constraints with the same
    renaming: the layers of a model ask the same questions, and are answered once."""

    def __init__(self, cache: Any | None) -> None:
        self.cache = cache
        self.readers: dict[tuple, Program | None] = {}
        self.times: dict[str, float] = {}
        self.known: dict[int, tuple[Program, str]] = {}  # id -> (program, its structural key)

    def sim(self, p: Program, m: Machine) -> float:
        """Simulated time of ``p``, once per structure."""
        got = self.known.get(id(p))
        if got is not None and got[0] is p:
            key: str | None = got[1]
        elif not p.lx_in and not p.lx_out:  # a plain plan: its structure and plan determine it
            key = self._key(p, m, "plain", repr(p.plan))
        else:
            key = None
        if key is None:
            return _sim(p, m)
        if key not in self.times:
            self.times[key] = _sim(p, m)
        return self.times[key]

    def derived(self, before: Program, after: Program, carried: list[Resident]) -> None:
        """``after`` is ``before`` that also carries ``carried`` out (same steps)."""
        got = self.known.get(id(before))
        if got is None or got[0] is not before or self.cache is None:
            return
        text = _canonical(carried, positional_names(before.kernel))
        if text is not None:
            self.known[id(after)] = (after, f"{got[1]}|carry:{text}")

    def _key(self, p: Program, m: Machine, what: str, constraints: Any) -> str | None:
        if self.cache is None:
            return None
        text = _canonical(constraints, positional_names(p.kernel))
        if text is None:  # names a buffer the kernel does not have: not shareable between layers
            return None
        sizes = {sidx.index_symbol(k): v for k, v in p.sizes}
        return self.cache.key(p.kernel, m, sizes, f"residency:{what}:{text}")

    def get(self, p: Program, m: Machine, what: str, constraints: Any, make: Any) -> Program:
        key = self._key(p, m, what, constraints)
        if key is None:
            return make()
        got = self.cache.get(key, p.kernel)
        if got is None:
            got = make()
            self.cache.put(key, got, p.kernel)
        got = got if got.name == p.name else dataclasses.replace(got, name=p.name)
        self.known[id(got)] = (got, key)
        return got


def _canonical(obj: Any, canon: dict[str, str]) -> str | None:
    """``obj`` as text with the kernel's buffer names positional (None: it names another buffer)."""
    bad = False

    def enc(x: Any) -> Any:
        nonlocal bad
        if isinstance(x, Resident):
            if x.buffer not in canon:
                bad = True
            return ["R", x.core, canon.get(x.buffer, x.buffer), x.lo, x.hi, x.addr, x.dtype]
        if dataclasses.is_dataclass(x) and not isinstance(x, type):
            return [type(x).__name__] + [enc(getattr(x, f.name)) for f in dataclasses.fields(x)]
        if isinstance(x, dict):
            return [[enc(k), enc(v)] for k, v in sorted(x.items(), key=lambda kv: repr(kv[0]))]
        if isinstance(x, (list, tuple)):
            return [enc(v) for v in x]
        if isinstance(x, str):
            return canon.get(x, x)
        return x

    text = repr(enc(obj))
    return None if bad else text


def _replan(p: Program, m: Machine, cons: _Constraints, memo: _Memo | None = None) -> Program:
    division = cons.division or _division(p)
    residency = cons.residency()
    if any(b not in {x.name for x in p.kernel.buffers} for b, _ in residency.keep):
        memo = None

    def make() -> Program:
        return plan_group(p.kernel, m, {sidx.index_symbol(k): v for k, v in p.sizes}, p.name, force=division,
                          residency=residency)
    return make() if memo is None else memo.get(p, m, "replan", (division, residency), make)


def _a_operand(kernel: Any, buf: str) -> int | None:
    """K when ``buf`` is exactly the row-major 2-D A operand of a matmul (and nothing else of it)."""
    if not isinstance(kernel, ExternKernel) or kernel.op not in ("mm", "addmm") or kernel.inputs[-2].name != buf:
        return None
    if any(b.name == buf for b in (*kernel.inputs[:-2], kernel.inputs[-1])):
        return None
    a = kernel.inputs[-2]
    if len(a.size) != 2 or a.offset != 0 or tuple(int(x) for x in a.stride) != (int(a.size[1]), 1):
        return None
    return int(a.size[1])


def _matmul_reader(q: Program, buf: str, residents: list[Resident], m: Machine,
                   memo: _Memo | None = None) -> Program | None:
    """The matmul re-planned to stream its A rows from the cores holding them,
    if that removes every DRAM read of A (``memo``: answers already found)."""
    if memo is None:
        return _matmul_reader_uncached(q, buf, residents, m)
    local = (q.name, buf, tuple(residents))
    if local in memo.readers:
        return memo.readers[local]
    none = dataclasses.replace(q, cores=())  # "not served" is cached as an empty program
    r = memo.get(q, m, "held-a", (buf, tuple(residents), repr(q.plan)),
                 lambda: _matmul_reader_uncached(q, buf, residents, m) or none)
    out = None if not r.cores else r
    memo.readers[local] = out
    return out


def _matmul_reader_uncached(q: Program, buf: str, residents: list[Resident], m: Machine) -> Program | None:
    k = _a_operand(q.kernel, buf)
    if k is None or any(r.lo % k or r.hi % k for r in residents):
        return None
    # Its own grid first (cheap, keeps the tiles the planner chose); when those
    # tiles straddle holders, search the grids whose row blocks line up.
    try:
        r = replan_with_held_a(q, m, residents)
        if not _loads(r, buf):
            return r
    except DoesNotFit:
        pass
    try:
        r = plan_matmul(q.kernel, m, {sidx.index_symbol(n): v for n, v in q.sizes}, q.name, a_held=residents)
    except DoesNotFit:
        return None
    return None if _loads(r, buf) else r


def _sim(p: Program, m: Machine) -> float:
    return simulate(p, m, keep_events=False).total_ns


@gc_paused
def plan_residency(programs: Sequence[Program | None], outputs: set[str], m: Machine,
                   reads: Sequence[set[str]], writes: Sequence[set[str]],
                   cache: Any | None = None) -> tuple[list[Program | None], list[Decision]]:
    """The graph's programs with LX residency applied, and what was kept.

    ``programs``: per kernel in order, its static program (None: a kernel whose
    program the planner cannot see, e.g. one with run-time sizes: nothing stays
    in LX across it); ``reads`` / ``writes``: per kernel, the buffers it reads
    and writes; ``cache``: a program cache by kernel structure (the backend's),
    so identical layers are re-planned once."""
    progs = list(programs)
    cons = [_Constraints() for _ in progs]
    memo = _Memo(cache)
    base = {k: memo.sim(p, m) for k, p in enumerate(progs) if p is not None}
    decisions: list[Decision] = []
    for i, p in enumerate(list(progs)):
        if p is None or p.kind != "loop" or not isinstance(p.kernel, KernelGroup):
            continue
        written = sorted(b.name for b in p.kernel.buffers if b.role in ("output", "inout"))
        for buf in written:
            best = None
            for division in _producer_options(progs[i], cons[i]):  # type: ignore[arg-type]
                got = _keep(progs, cons, base, i, buf, outputs, m, reads, writes, division, memo)
                if got is not None and (best is None or got[3] > best[3]):
                    best = got
            if best is not None:
                progs, cons, made, _, times = best
                base.update(times)
                decisions += made
    return progs, decisions


#: Divisions of a producer tried per kept buffer (each is re-planned and simulated).
MAX_PRODUCER_OPTIONS = 2


def _producer_options(p: Program, cons: _Constraints) -> list[Division]:
    """The producer's own division when it holds whole rows (no reduction split),
    and the cheapest few divisions that do (so one core holds each row block)."""
    own = cons.division or _division(p)
    out = [own] if own.rsplit == 1 else []
    if cons.keep or cons.lx_in:
        return out  # already shaped by an earlier decision: keep it
    seen = {next((c.estimate_ns for c in p.plan.candidates if Division(c.row_cores, c.rsplit) == own), None)}
    for cand in sorted(p.plan.candidates, key=lambda c: (c.estimate_ns, c.row_cores)):
        d = Division(cand.row_cores, cand.rsplit)
        # Divisions the estimate ties (a DRAM-bound group on 4 or 32 cores) are one option: its fewest cores.
        if d.rsplit == 1 and d not in out and cand.estimate_ns not in seen:
            out.append(d)
            seen.add(cand.estimate_ns)
        if len(out) > MAX_PRODUCER_OPTIONS:
            break
    return out


def _keep(progs: list[Program | None], cons: list[_Constraints], base: dict[int, float], i: int, buf: str,
          outputs: set[str], m: Machine, reads: Sequence[set[str]], writes: Sequence[set[str]],
          division: Division, memo: _Memo | None = None) -> tuple[list, list, list[Decision], float, dict[int, float]] | None:
    p = progs[i]
    assert p is not None
    if division != _division(p):
        c0 = cons[i].copy()
        c0.division = division
        try:
            p = _replan(p, m, c0, memo)
        except DoesNotFit:
            return None
    # A later kernel that writes the buffer ends the held copy's validity (and
    # the first store is then still needed for what that kernel does not write).
    rewritten = next((j for j in range(i + 1, len(progs)) if buf in writes[j]), len(progs))
    readers = [j for j in range(i + 1, rewritten) if buf in reads[j]]
    later = [j for j in range(rewritten, len(progs)) if buf in reads[j]]
    shares = _shares(p, buf)
    if not readers or not shares:
        return None
    dt = next(b.dtype for b in p.kernel.buffers if b.name == buf)
    isz = itemsize(dt)
    trial_cons = list(cons)  # copied where changed: a deep copy per trial is quadratic in the graph's kernels
    # Each core keeps its share at the top of the usable LX, below what it already holds there.
    holds: dict[int, Hold] = {}
    for core, (lo, hi) in shares.items():
        top = min([m.lx_usable_bytes] + [a for x in trial_cons[i:readers[-1] + 1] for a, _ in x.reserved.get(core, ())]
                  + [r.addr for x in trial_cons[i:readers[-1] + 1] for r in x.lx_in if r.core == core])
        addr = (top - (hi - lo) * isz) // m.stick_bytes * m.stick_bytes
        if addr < m.lx_usable_bytes // 4:
            return None  # a share this large would starve the kernels in between
        holds[core] = Hold(addr, lo, hi)
    residents = [Resident(c, buf, h.lo, h.hi, h.addr, dt) for c, h in sorted(holds.items())]
    trial = list(progs)
    served: list[int] = []
    for j in readers:
        q = progs[j]
        if q is None or any(progs[x] is None for x in range(i + 1, j)):
            break
        if q.kind == "matmul":
            r = _matmul_reader(q, buf, residents, m, memo)
            if r is None:
                break
            trial[j] = r
            trial_cons[j] = trial_cons[j].copy()
            trial_cons[j].lx_in += residents  # later decisions must place their holds elsewhere
            served.append(j)
            continue
        if q.kind != "loop":
            break
        c = trial_cons[j].copy()
        c.lx_in += residents
        options = [c]
        if q.plan.row_cores != p.plan.row_cores or q.plan.rsplit != 1:
            alt = c.copy()
            best = min(x.estimate_ns for x in q.plan.candidates) if q.plan.candidates else None
            mine = next((x.estimate_ns for x in q.plan.candidates if (x.row_cores, x.rsplit) == (p.plan.row_cores, 1)),
                        None)
            if best is not None and mine is not None and mine <= REPLAN_SLACK * best:
                alt.division = Division(p.plan.row_cores, 1)
                options.append(alt)
        done = False
        for opt in options:
            try:
                r = _replan(q, m, opt, memo)
            except DoesNotFit:
                continue
            if not _loads(r, buf):
                trial[j], trial_cons[j] = r, opt
                served.append(j)
                done = True
                break
        if not done:
            break
    if not served:
        return None
    last = served[-1]
    # A producer that reads the buffer back from DRAM itself (a phased group: a
    # later phase loads what an earlier one stored) needs the store.
    elide = (len(served) == len(readers) and not later and rewritten == len(progs) and buf not in outputs
             and not _loads(p, buf))
    keep_c = trial_cons[i].copy()
    keep_c.keep[buf] = {c: dataclasses.replace(h, store=not elide) for c, h in holds.items()}
    keep_c.division = division
    try:
        trial[i] = _replan(p, m, keep_c, memo)
        trial_cons[i] = keep_c
        for x in range(i + 1, last + 1):
            if x in served:
                if x != last:
                    trial_cons[x] = trial_cons[x].copy()
                    trial_cons[x].carry += residents
                    before = trial[x]
                    trial[x] = dataclasses.replace(before, lx_out=before.lx_out + tuple(residents))  # type: ignore[arg-type]
                    if memo is not None:
                        memo.derived(before, trial[x], residents)
                continue
            if progs[x] is None or progs[x].kind != "loop":  # type: ignore[union-attr]
                return None  # a matmul or hand-written kernel in between would need re-planning around the hold
            rc = trial_cons[x].copy()
            for c, h in holds.items():
                rc.reserved[c].append((h.addr, h.addr + (h.hi - h.lo) * isz))
            trial[x] = _replan(progs[x], m, rc, memo)  # type: ignore[arg-type]
            trial_cons[x] = rc
    except DoesNotFit:
        return None
    changed = [x for x in range(i, last + 1) if trial[x] is not progs[x]]
    new_times = {x: (memo.sim(trial[x], m) if memo else _sim(trial[x], m)) for x in changed}  # type: ignore[arg-type]
    gain = sum(base[x] - new_times[x] for x in changed)
    if gain <= 0:
        return None
    per_core = {c: (h.hi - h.lo) * isz for c, h in holds.items()}
    made = [Decision(buf, p.name, trial[j].name, per_core, elide) for j in served]  # type: ignore[union-attr]
    return trial, trial_cons, made, gain, new_times


def summary(decisions: Sequence[Decision]) -> dict[str, Any]:
    """Counts for the report: buffers kept, readers served, stores elided, bytes kept."""
    buffers = {(d.producer, d.buffer) for d in decisions}
    first = {(d.producer, d.buffer): d for d in decisions}
    return {"kept": len(buffers), "readers_served": len(decisions),
            "stores_elided": len({(d.producer, d.buffer) for d in decisions if d.store_elided}),
            "bytes_kept": sum(sum(d.bytes_per_core.values()) for d in first.values())}
