"""Chrome trace / Perfetto JSON of emulated device time."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from spyre_adapter.model.timing import Timeline

_TID = {"dma_in": 0, "dma_out": 1, "ring_tx": 2, "ring_rx": 3, "vec": 4, "pe": 5, "sync": 6}


def trace_events(launches: Iterable[tuple[str, float, Timeline]]) -> list[dict[str, Any]]:
    """Trace events for (kernel name, device start ns, timeline) launches: one
    process per core, one thread per engine, plus a kernel track."""
    out: list[dict[str, Any]] = []
    cores: set[int] = set()
    for name, start, tl in launches:
        out.append({"name": name, "ph": "X", "pid": 0, "tid": 0, "ts": start / 1e3, "dur": tl.total_ns / 1e3,
                    "cat": "kernel"})
        for e in tl.events:
            cores.add(e.core)
            args = {"bytes": e.bytes, "step": e.index} if e.bytes else {"step": e.index}
            out.append({"name": e.op, "ph": "X", "pid": e.core + 1,
                        "tid": _TID.get(e.engine, 6), "ts": (start + e.start) / 1e3,
                        "dur": max(e.end - e.start, 1e-3) / 1e3, "cat": e.engine, "args": args})
    out.append({"name": "process_name", "ph": "M", "pid": 0, "args": {"name": "kernels"}})
    for c in sorted(cores):
        out.append({"name": "process_name", "ph": "M", "pid": c + 1, "args": {"name": f"core {c}"}})
        for eng, tid in _TID.items():
            out.append({"name": "thread_name", "ph": "M", "pid": c + 1, "tid": tid, "args": {"name": eng}})
    return out


def write_trace(path: str | Path, launches: Iterable[tuple[str, float, Timeline]]) -> None:
    """Write a trace loadable by chrome://tracing and ui.perfetto.dev."""
    Path(path).write_text(json.dumps({"traceEvents": trace_events(launches), "displayTimeUnit": "ns"}))
