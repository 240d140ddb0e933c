"""Dynamo's compile bookkeeping, read for :mod:`spyre_shims.compilation`.

Per frame (one Python code object entering Dynamo) Dynamo counts its compiles in
``convert_frame.FRAME_COMPILE_COUNTER``: compile 0 is the first, every later
one a recompile (a guard failed). Graph breaks and captured graphs are in
``torch._dynamo.utils.counters``. ``torch._dynamo.reset()`` clears the frame
table, so readings are differences of snapshots that tolerate a reset.
"""

from __future__ import annotations

import importlib
import logging
import re
import time
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


class BreakLog(logging.Handler):
    """Graph breaks as Dynamo logs them (its ``graph_breaks`` log artifact), by
    reason, inside a ``with`` block. Some releases log a break without counting
    it: torch 2.6 counts no data-dependent jump (``if tensor:``), so
    :func:`merge_logged` fills the counts from here when the counters are empty.

    For the block the logger is set to DEBUG and, unless the user enabled it
    (``TORCH_LOGS=graph_breaks``), kept from propagating, so nothing is printed
    that was not before; its level, propagation and handlers are restored on exit.
    """

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.reasons: dict[str, int] = {}
        self._log: logging.Logger | None = getattr(
            importlib.import_module("torch._dynamo.symbolic_convert"), "graph_break_log", None)
        self._saved: tuple[int, bool] = (logging.NOTSET, True)

    def emit(self, record: logging.LogRecord) -> None:
        found = re.search(r"Reason: (.*)", record.getMessage())
        key = found.group(1).strip()[:200] if found and found.group(1).strip() else "graph break"
        self.reasons[key] = self.reasons.get(key, 0) + 1

    def __enter__(self) -> "BreakLog":
        log = self._log
        if log is not None:
            self._saved = (log.level, log.propagate)
            if not log.isEnabledFor(logging.DEBUG):
                log.propagate = False
            log.setLevel(logging.DEBUG)
            log.addHandler(self)
        return self

    def __exit__(self, *exc: Any) -> None:
        log = self._log
        if log is not None:
            log.removeHandler(self)
            log.setLevel(self._saved[0])
            log.propagate = self._saved[1]


def merge_logged(counted: dict[str, Any], logged: BreakLog) -> dict[str, Any]:
    """``counted`` (a :func:`delta`) with graph breaks taken from the log when
    the counters saw none (a release that only logs some breaks)."""
    if counted["graph_breaks"] == 0 and logged.reasons:
        return {**counted, "graph_breaks": sum(logged.reasons.values()), "break_reasons": dict(logged.reasons)}
    return counted


class CompileTimer:
    """Wall time Dynamo spends compiling (tracing, AOTAutograd, the backend
    compiler), from its compile start/end callbacks; ``None`` where the release
    has no callback handler."""

    def __init__(self) -> None:
        self.seconds: float | None = None
        self._handler: Any = None
        self._t0 = 0.0
        try:
            self._handler = importlib.import_module("torch._dynamo.callback").callback_handler
        except (ImportError, AttributeError):
            return
        self.seconds = 0.0

    def _start(self, *args: Any) -> None:
        self._t0 = time.perf_counter()

    def _end(self, *args: Any) -> None:
        if self.seconds is not None:
            self.seconds += time.perf_counter() - self._t0

    def __enter__(self) -> "CompileTimer":
        if self._handler is not None:
            self._handler.register_start_callback(self._start)
            self._handler.register_end_callback(self._end)
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._handler is not None:
            self._handler.remove_start_callback(self._start)
            self._handler.remove_end_callback(self._end)


def mark_dynamic(t: Any, dims: Any) -> None:
    importlib.import_module("torch._dynamo").mark_dynamic(t, dims)
