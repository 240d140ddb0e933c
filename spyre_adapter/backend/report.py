"""What the emulated device did: kernels launched, modeled time, traffic,
fallbacks, eager ops. One report per session (``torch.spyre.report()`` is the current session's):
``summary()`` is text for people, ``to_dict()`` the same figures for code.

Imported by the light device registration (``import torch``), so it imports
nothing heavy: the emulator and the Kernel IR appear in annotations only.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import time
from collections import Counter, defaultdict, deque
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from spyre_shims.kernel_ir import GraphIR

    from spyre_adapter.emulator.metrics import Metrics
    from spyre_adapter.model.collectives import LinkCost
    from spyre_adapter.model.timing import Timeline

#: A compiled collective's functional op -> the link model's name of it (as eager collectives are reported).
_LINK_OPS = {"all_reduce_": "all_reduce", "all_gather_into_tensor": "all_gather",
             "reduce_scatter_tensor": "reduce_scatter"}


@dataclasses.dataclass
class LaunchRecord:
    """One kernel launch as the report keeps it."""

    name: str
    start_ns: float
    metrics: Metrics
    timeline: Timeline


#: Where the backend's own host time goes: planning kernels as Inductor emits
#: them, the graph pass (LX residency) when a compiled graph loads, finding or
#: planning a program for run-time sizes a kernel meets for the first time, and
#: each program's first launch (reference run, checked execution, traffic and timing).
HOST_PHASES = ("compile", "graph", "plan_at_launch", "first_launch")

#: Individual launches remembered (totals and per-kernel figures cover all).
RECENT_LAUNCHES = 10_000


class DeviceReport:
    """Accumulates launches and compiled graphs. Totals and per-kernel figures
    cover every launch; only the most recent launches are kept one by one (with
    their timelines while ``keep_timelines`` is set, for traces)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        """Forget everything recorded so far."""
        with self._lock:
            self.launches: deque[LaunchRecord] = deque(maxlen=RECENT_LAUNCHES)
            self.graphs: list[GraphIR] = []
            self.clock_ns = 0.0
            self.launch_count = 0
            self._kernels: dict[str, dict[str, Any]] = {}
            self.keep_timelines = False
            self.keep_programs = False
            #: the program of each kernel launched while ``keep_programs`` was set
            self.programs: dict[str, Any] = {}
            self.residency: dict[str, dict[str, Any]] = {}
            self.eager_ops: Counter[str] = Counter()
            #: kernels no program fitted on the machine (they ran on the host)
            self.limits: list[Exception] = []
            #: collectives on the card-to-card link, by op: calls, bytes, modeled ns, algorithms
            self.collectives: dict[str, dict[str, Any]] = {}
            self.link_ns = 0.0
            #: the most recent collectives one by one: (op, device start ns, ns, bytes, algorithm)
            self.link_calls: deque[tuple[str, float, float, int, str]] = deque(maxlen=RECENT_LAUNCHES)
            #: host seconds the backend itself spent, by phase (see :data:`HOST_PHASES`)
            self.host_s: dict[str, float] = dict.fromkeys(HOST_PHASES, 0.0)

    def record(self, name: str, metrics: Metrics, timeline: Timeline, program: Any = None) -> None:
        """One launch: its figures, its timeline (kept while ``keep_timelines`` is
        set) and its program (kept while ``keep_programs`` is set)."""
        with self._lock:
            if self.keep_programs and program is not None:
                self.programs.setdefault(name, program)
            if getattr(program, "kind", None) == "collective":
                self._program_link(program, timeline)
            self.launches.append(LaunchRecord(name, self.clock_ns, metrics, timeline if self.keep_timelines else None))
            self.clock_ns += metrics.modeled_ns
            self.launch_count += 1
            m = metrics
            row = self._kernels.setdefault(name, {"name": name, "kind": m.kind, "launches": 0, "modeled_ns": 0.0,
                                                  "dram_bytes": 0, "compulsory_bytes": 0, "cores": m.cores_used,
                                                  "eta_sustained": m.eta_sustained, "rho": m.rho,
                                                  "core_balance": m.core_balance, "lx_peak": m.lx_peak,
                                                  "plan": m.plan})
            row["launches"] += 1
            row["modeled_ns"] += m.modeled_ns
            row["dram_bytes"] += m.dram_bytes
            row["compulsory_bytes"] += m.compulsory_bytes

    def record_collective(self, cost: LinkCost) -> None:
        """One collective on the card-to-card link: the card waits for it (eager
        collectives do not overlap the card's kernels), so it advances the clock."""
        with self._lock:
            self._count_link(cost.op, self.clock_ns, cost.ns, cost.nbytes, cost.algorithm, cost.algorithm)
            self.clock_ns += cost.ns

    def _count_link(self, op: str, start: float, ns: float, nbytes: int, shown: str, algorithm: str) -> None:
        """One collective in the link's figures and its recent calls (lock held)."""
        self.link_calls.append((op, start, ns, nbytes, shown))
        self.link_ns += ns
        row = self.collectives.setdefault(op, {"calls": 0, "bytes": 0, "modeled_ns": 0.0, "algorithms": Counter()})
        row["calls"] += 1
        row["bytes"] += nbytes
        row["modeled_ns"] += ns
        row["algorithms"][algorithm] += 1

    def _program_link(self, program: Any, timeline: Timeline) -> None:
        """A compiled collective's link time: inside its program's modeled time
        (the clock advances by the launch, not again here), counted with the
        link's figures. Called with the lock held."""
        plan = program.plan
        ns = sum(lanes.get("link", 0.0) for lanes in timeline.busy.values())
        first = min((e.start for e in timeline.events if e.engine == "link"), default=0.0)
        self._count_link(_LINK_OPS.get(plan.op, plan.op), self.clock_ns + first, ns, plan.nbytes,
                         f"{plan.algorithm}, program", f"{plan.algorithm} (program)")

    @contextlib.contextmanager
    def host_time(self, phase: str) -> Iterator[None]:
        """Add the wall time of the block to ``phase`` (one of :data:`HOST_PHASES`)."""
        if phase not in HOST_PHASES:
            raise ValueError(f"host phase {phase!r}: expected one of {', '.join(HOST_PHASES)}")
        start = time.perf_counter()
        try:
            yield
        finally:
            spent = time.perf_counter() - start
            with self._lock:
                self.host_s[phase] += spent

    def record_eager(self, op: str) -> None:
        """One aten op that ran eagerly (on the host) on device tensors (called by
        the device's eager path)."""
        with self._lock:
            self.eager_ops[op] += 1

    def record_limit(self, error: Exception) -> None:
        """A kernel that did not fit the machine (it falls back to the host)."""
        with self._lock:
            self.limits.append(error)

    def add_graph(self, graph: GraphIR) -> None:
        with self._lock:
            self.graphs.append(graph)

    def add_residency(self, graph: str, summary: dict[str, Any]) -> None:
        with self._lock:
            self.residency[graph] = summary

    # ------------------------------------------------------------ views
    @property
    def fallbacks(self) -> Counter[str]:
        """Host fallbacks of the compiled graphs, by op."""
        c: Counter[str] = Counter()
        for g in self.graphs:
            c.update(g.fallbacks)
        return c

    @property
    def kernels_generated(self) -> int:
        """Device kernels in the compiled graphs."""
        return sum(len(g.kernels) for g in self.graphs)

    def per_kernel(self) -> list[dict[str, Any]]:
        """Launch figures aggregated by kernel."""
        with self._lock:
            return [dict(r) for r in self._kernels.values()]

    def per_core_busy(self) -> dict[int, dict[str, float]]:
        """Busy ns per core and engine over all launches with a timeline."""
        out: dict[int, dict[str, float]] = defaultdict(lambda: defaultdict(float))
        for launch in self.launches:
            if launch.timeline is None:
                continue
            for core, engines in launch.timeline.busy.items():
                for eng, ns in engines.items():
                    out[core][eng] += ns
        return {c: dict(v) for c, v in out.items()}

    def to_dict(self) -> dict[str, Any]:
        """Totals for code: graphs, kernels, launches, modeled device time (ns),
        DRAM traffic (bytes), fallbacks, LX residency and eager ops by name."""
        rows = self.per_kernel()
        dram = sum(r["dram_bytes"] for r in rows)
        comp = sum(r["compulsory_bytes"] for r in rows)
        with self._lock:
            eager = dict(self.eager_ops.most_common())
        return {
            "graphs": len(self.graphs),
            "kernels_generated": self.kernels_generated,
            "launches": self.launch_count,
            "modeled_device_ns": self.clock_ns,
            "dram_bytes": dram,
            "compulsory_bytes": comp,
            "rho": dram / comp if comp else 0.0,
            "fallbacks": dict(self.fallbacks),
            "lx_residency": {k: sum(s[k] for s in self.residency.values()) for k in ("kept", "readers_served", "stores_elided", "bytes_kept")},
            "eager_ops": sum(eager.values()),
            "eager_ops_by_op": eager,
            "link_ns": self.link_ns,
            "collectives": {op: {**r, "algorithms": dict(r["algorithms"])} for op, r in self.collectives.items()},
            "host_s": dict(self.host_s),
        }

    def summary(self) -> str:
        """The report as text, with units (:meth:`to_dict` has the raw figures)."""
        d = self.to_dict()
        lx = d["lx_residency"]
        lines = [
            f"compiled graphs: {d['graphs']}, kernels generated: {d['kernels_generated']}, "
            f"kernel launches: {d['launches']}",
            f"modeled device time: {format_ns(d['modeled_device_ns'])}",
            f"DRAM traffic: {format_bytes(d['dram_bytes'])} = {d['rho']:.2f}x compulsory "
            f"({format_bytes(d['compulsory_bytes'])})",
            f"LX residency: {lx['kept']} buffer(s) kept in LX ({format_bytes(lx['bytes_kept'])}) for "
            f"{lx['readers_served']} reading kernel(s), {lx['stores_elided']} store(s) to DRAM elided",
            "host fallbacks in compiled graphs: " + (_counts(d["fallbacks"]) or "none"),
            f"eager ops on the device (run on the host): {d['eager_ops']}"
            + (f" ({_counts(d['eager_ops_by_op'], 6)})" if d["eager_ops"] else ""),
            "backend host time: " + ", ".join(f"{k.replace('_', ' ')} {v:.2f} s" for k, v in d["host_s"].items()),
        ]
        if d["collectives"]:
            lines.append(f"card-to-card link: {format_ns(d['link_ns'])} in " + ", ".join(
                f"{op} x{r['calls']} ({format_bytes(r['bytes'])}, {format_ns(r['modeled_ns'])}, "
                f"{'/'.join(sorted(r['algorithms']))})" for op, r in d["collectives"].items()))
        return "\n".join(lines)

    def write_trace(self, path: str | Path, launches: Any = None) -> None:
        """Chrome/Perfetto trace of the given (default: recent) launches recorded with
        a timeline, and of the recent collectives on the link's own track."""
        from spyre_adapter.emulator.trace import write_trace

        chosen = list(self.launches if launches is None else launches)
        write_trace(path, [(x.name, x.start_ns, x.timeline) for x in chosen if x.timeline is not None],
                    list(self.link_calls))


def format_ns(ns: float) -> str:
    """A duration with a unit: ``5.31 us``, ``2.40 ms``, ``1.25 s``."""
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("us", 1e3)):
        if ns >= scale:
            return f"{ns / scale:.2f} {unit}"
    return f"{ns:.0f} ns"


def format_bytes(n: float) -> str:
    """A size with a binary unit: ``512 B``, ``12.3 KiB``, ``7.35 MiB``."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.{2 if n / scale < 10 else 1}f} {unit}"
    return f"{n:.0f} B"


def _counts(counts: dict[str, int], limit: int | None = None) -> str:
    items = sorted(counts.items(), key=lambda kv: -kv[1])
    shown = ", ".join(f"{k} x{v}" for k, v in items[:limit])
    return shown + (f", {len(items) - limit} more" if limit is not None and len(items) > limit else "")
