"""What the emulated device did: kernels launched, modeled time, traffic,
fallbacks. The device context holds one (``torch.spyre.report()``)."""

from __future__ import annotations

import dataclasses
import threading
from collections import Counter, defaultdict, deque
from pathlib import Path
from typing import Any

from spyre_shims.kernel_ir import GraphIR

from .emulator.metrics import Metrics
from .model.timing import Timeline


@dataclasses.dataclass
class LaunchRecord:
    """One kernel launch as the report keeps it."""

    name: str
    start_ns: float
    metrics: Metrics
    timeline: Timeline


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
            self.residency: dict[str, dict[str, Any]] = {}

    def record(self, name: str, metrics: Metrics, timeline: Timeline) -> None:
        with self._lock:
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

    def summary(self) -> dict[str, Any]:
        """Totals: launches, modeled device time, DRAM traffic, fallbacks."""
        rows = self.per_kernel()
        dram = sum(r["dram_bytes"] for r in rows)
        comp = sum(r["compulsory_bytes"] for r in rows)
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
        }

    def write_trace(self, path: str | Path, launches: Any = None) -> None:
        """Chrome/Perfetto trace of the given (default: recent) launches recorded with a timeline."""
        from .emulator.trace import write_trace

        chosen = list(self.launches if launches is None else launches)
        write_trace(path, [(x.name, x.start_ns, x.timeline) for x in chosen if x.timeline is not None])

