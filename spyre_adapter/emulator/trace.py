"""Chrome trace / Perfetto JSON of emulated device time."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from spyre_adapter.model.timing import Timeline

_TID = {"dma_in": 0, "dma_out": 1, "ring_tx": 2, "ring_rx": 3, "vec": 4, "pe": 5, "sync": 6, "link": 7}


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


#: The process id of the card-to-card link's track (cores are 1..32, kernels 0).
LINK_PID = 1000


def link_events(collectives: Iterable[tuple[str, float, float, int, str]]) -> list[dict[str, Any]]:
    """Trace events for (op, device start ns, ns, bytes, algorithm) collectives: one link track."""
    out = [{"name": op, "ph": "X", "pid": LINK_PID, "tid": 0, "ts": start / 1e3, "dur": max(ns, 1e-3) / 1e3,
            "cat": "link", "args": {"bytes": nbytes, "algorithm": algorithm}}
           for op, start, ns, nbytes, algorithm in collectives]
    if out:
        out.append({"name": "process_name", "ph": "M", "pid": LINK_PID, "args": {"name": "card-to-card link"}})
    return out


def write_trace(path: str | Path, launches: Iterable[tuple[str, float, Timeline]],
                collectives: Iterable[tuple[str, float, float, int, str]] = ()) -> None:
    """Write a trace loadable by chrome://tracing and ui.perfetto.dev: the launches'
    cores and engines, and the collectives on the link's track."""
    events = trace_events(launches) + link_events(collectives)
    Path(path).write_text(json.dumps({"traceEvents": events, "displayTimeUnit": "ns"}))
