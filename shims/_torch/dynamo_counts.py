"""Dynamo's compile bookkeeping, read for :mod:`spyre_shims.compilation`.

Per frame (one Python code object entering Dynamo) Dynamo counts its compiles in
``convert_frame.FRAME_COMPILE_COUNTER``: compile 0 is the first, every later
one a recompile (a guard failed). Graph breaks and captured graphs are in
``torch._dynamo.utils.counters``. ``torch._dynamo.reset()`` clears the frame
table, so readings are differences of snapshots that tolerate a reset.
"""

from __future__ import annotations

import importlib
from typing import Any


def _frame_table() -> dict[Any, int]:
    table = getattr(importlib.import_module("torch._dynamo.convert_frame"), "FRAME_COMPILE_COUNTER", None)
    return dict(table) if table is not None else {}


def _counters() -> Any:
    return importlib.import_module("torch._dynamo.utils").counters


def snapshot() -> dict[str, Any]:
    """The current readings. A graph break is an unsupported construct Dynamo
    met: counted under ``graph_break`` or, when the frame resumed after it,
    under ``unimplemented`` (by message; the first line names it)."""
    c = _counters()
    reasons: dict[str, int] = {}
    for category in ("graph_break", "unimplemented"):
        for msg, n in c[category].items():
            key = str(msg).strip().splitlines()[0][:200] if str(msg).strip() else category
            reasons[key] = reasons.get(key, 0) + n
    return {"frames": _frame_table(), "graph_breaks": sum(reasons.values()),
            "graphs": int(c["stats"]["unique_graphs"]), "break_reasons": reasons}


def delta(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """Compiles, recompiles, graph breaks and graphs between two snapshots."""
    compiles = recompiles = 0
    for frame, n in after["frames"].items():
        start = before["frames"].get(frame, 0)
        if n < start:  # the table was reset in between
            start = 0
        compiles += n - start
        recompiles += max(0, n - max(start, 1))
    reasons = {k: v - before["break_reasons"].get(k, 0) for k, v in after["break_reasons"].items()
               if v > before["break_reasons"].get(k, 0)}
    return {"compiles": compiles, "recompiles": recompiles,
            "graph_breaks": max(0, after["graph_breaks"] - before["graph_breaks"]),
            "graphs": max(0, after["graphs"] - before["graphs"]), "break_reasons": reasons}


def mark_dynamic(t: Any, dims: Any) -> None:
    importlib.import_module("torch._dynamo").mark_dynamic(t, dims)
