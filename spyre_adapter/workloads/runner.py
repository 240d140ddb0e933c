"""Run workload files: build each case, check it compiled on spyre against CPU
eager, and collect one record per case.

Cases with the same op and the same argument signature share one compiled
function (a Llama file repeats its projections); each signature gets its own
code object, so Dynamo's per-function recompile limit is never reached (past
it Dynamo would silently run eagerly). Compiled state is dropped every
``reset_every`` cases to bound memory.

Memory: cases run one at a time and their tensors are freed before the next;
device inputs alias the freshly made host tensors (no second copy), results are
compared through host views of the device memory, large results in chunks. A
case whose estimated working set exceeds the memory available is reported
(``skipped``, with the figures) instead of run, and the run continues. The
peak RSS of each file is measured (``peak_rss`` in :func:`run_files`).
"""

from __future__ import annotations

import gc
import sys
import time
import types
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from spyre_shims.runtime import reset_compiled

from spyre_adapter.harness.memory import available_bytes, peak_rss_bytes, reset_peak_rss
from spyre_adapter.workloads import differential as diff
from spyre_adapter.workloads.builders import BuiltCase, CaseError, build
from spyre_adapter.workloads.spec import CaseSpec, WorkloadFile, load


class CompiledCache:
    """One compiled function per (op, argument signature)."""

    def __init__(self, reset_every: int) -> None:
        self.reset_every = reset_every
        self._fns: dict[str, Callable[..., Any]] = {}
        self._runs = 0

    def get(self, case: BuiltCase) -> Callable[..., Any]:
        self._runs += 1
        if self._runs % self.reset_every == 0:
            self.clear()
        fn = self._fns.get(case.signature)
        if fn is None:
            fn = torch.compile(_fresh_function(case.fn, len(self._fns)), dynamic=False)
            self._fns[case.signature] = fn
        return fn

    def clear(self) -> None:
        self._fns.clear()
        reset_compiled()
        gc.collect()


def _fresh_function(op: Callable[..., Any], n: int) -> Callable[..., Any]:
    """``op(*args, **kwargs)`` in a function with its own code object."""

    def call(*args: Any, **kwargs: Any) -> Any:
        return op(*args, **kwargs)

    code = call.__code__.replace(co_name=f"workload_case_{n}")
    return types.FunctionType(code, call.__globals__, code.co_name, None, call.__closure__)


def run_case(spec: CaseSpec, wf: WorkloadFile, cache: CompiledCache, max_numel: int | None) -> dict[str, Any]:
    """The record of one case (never raises for a bad case), with the peak RSS
    while it ran (``peak_rss_bytes``)."""
    reset_peak_rss()
    rec = _run_case(spec, wf, cache, max_numel)
    rec["peak_rss_bytes"] = peak_rss_bytes()
    return rec


def _run_case(spec: CaseSpec, wf: WorkloadFile, cache: CompiledCache, max_numel: int | None) -> dict[str, Any]:
    t0, cpu0 = time.perf_counter(), time.process_time()
    rec: dict[str, Any] = {"file": wf.path.name, "name": spec.name, "op": spec.op}
    try:
        case = build(spec, wf.defaults)
    except CaseError as exc:
        return {**rec, "status": diff.ERROR, "detail": f"cannot build case {spec.name!r}: {exc}"}
    if case.notes:
        rec["notes"] = list(case.notes)
    rec["input_bytes"] = case.input_bytes
    if max_numel is not None and case.max_numel > max_numel:
        return {**rec, "status": diff.SKIPPED,
                "detail": f"an input has {case.max_numel} elements > --max-numel {max_numel} (not run, not a pass)"}
    need, have = working_set(case), available_bytes()
    if need > have:
        return {**rec, "status": diff.SKIPPED,
                "detail": f"does not fit: needs ~{need / 2**30:.1f} GiB ({case.input_bytes / 2**30:.1f} GiB of inputs), "
                          f"{have / 2**30:.1f} GiB available (not run, not a pass)"}
    try:
        out = diff.check(case.fn, case.make_args, atol=wf.defaults.atol, rtol=wf.defaults.rtol,
                         compiled=cache.get(case))
    except MemoryError as exc:
        return {**rec, "status": diff.SKIPPED, "detail": f"does not fit: allocation failed ({exc})"[:400]}
    except Exception as exc:  # noqa: BLE001 - the eager CPU run rejected the case: it is malformed
        if "can't allocate memory" in str(exc):  # torch's CPU allocator
            return {**rec, "status": diff.SKIPPED, "detail": f"does not fit: {exc}"[:400]}
        return {**rec, "status": diff.ERROR, "detail": f"case {spec.name!r} fails on CPU eager: "
                                                       f"{type(exc).__name__}: {exc}"[:400]}
    finally:
        gc.collect()
    rec.update(out.to_dict())
    rec["seconds"] = round(time.perf_counter() - t0, 3)
    rec["cpu_seconds"] = round(time.process_time() - cpu0, 3)  # every thread of the process
    return rec


#: Working set of a case as a multiple of its inputs: the CPU inputs while the
#: reference runs, the reference result, the device inputs and the device
#: result (each at most input-sized for the ops of real models), plus room for
#: the compiler and the emulator's chunked evaluation.
WORKING_SET_FACTOR = 3
WORKING_SET_EXTRA = 512 * 2**20


def working_set(case: BuiltCase) -> int:
    """Estimated peak bytes of running ``case``."""
    return WORKING_SET_FACTOR * case.input_bytes + WORKING_SET_EXTRA


@contextmanager
def _progress(todo: Sequence[tuple[WorkloadFile, CaseSpec]], enabled: bool) -> Iterator[Callable[[str, str], None]]:
    """``advance(case, status)`` after each case: a bar on a terminal; otherwise
    a line per file and one at least every LINE_EVERY_S seconds (a CI log is
    never silent for long)."""
    if not enabled:
        yield lambda name, status: None
        return
    if sys.stderr.isatty():
        columns = (TextColumn("workloads"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                   TextColumn("{task.fields[case]}"))
        with Progress(*columns, transient=True) as progress:
            task = progress.add_task("run", total=len(todo), case="")
            yield lambda name, status: progress.update(task, advance=1, case=name)
        return
    per_file = Counter(wf.path for wf, _ in todo)
    state = {"done": 0, "file": None, "in_file": 0, "statuses": Counter(), "last": time.perf_counter()}
    start = time.perf_counter()

    def line(text: str) -> None:
        print(f"[{time.perf_counter() - start:7.1f} s] {text}", file=sys.stderr, flush=True)
        state["last"] = time.perf_counter()

    def advance(name: str, status: str) -> None:
        wf = todo[state["done"]][0]
        if state["file"] != wf.path:
            state.update(file=wf.path, in_file=0, statuses=Counter())
            line(f"{wf.path.name}: {per_file[wf.path]} case(s)")
        state["done"] += 1
        state["in_file"] += 1
        state["statuses"][status] += 1
        counts = ", ".join(f"{k} {v}" for k, v in sorted(state["statuses"].items()))
        if state["in_file"] == per_file[wf.path]:
            line(f"{wf.path.name}: done ({counts})")
        elif time.perf_counter() - state["last"] >= LINE_EVERY_S:
            line(f"{wf.path.name}: {state['in_file']}/{per_file[wf.path]} cases ({counts}), at {name}")

    yield advance


#: Seconds between progress lines within a file when stderr is not a terminal.
LINE_EVERY_S = 30.0


def run_files(paths: Sequence[str | Path | WorkloadFile], *, max_numel: int | None = None, reset_every: int = 40,
              progress: bool = True, cases: Sequence[str] = (),
              peak_rss: dict[str, int] | None = None) -> list[dict[str, Any]]:
    """Records of every case of every file (a path, or a file already loaded), in
    file order. ``cases`` filters by name. A file that cannot be loaded at all
    yields one ``error`` record. ``progress`` goes to stderr (see ``_progress``).
    ``peak_rss``, if given, receives each file's peak resident set size in bytes."""
    files: list[WorkloadFile] = []
    records: list[dict[str, Any]] = []
    for p in paths:
        if isinstance(p, WorkloadFile):
            files.append(p)
            continue
        try:
            files.append(load(p))
        except (OSError, ValueError) as exc:
            records.append({"file": Path(p).name, "name": "<file>", "op": "", "status": diff.ERROR,
                            "detail": f"cannot load {p}: {exc}"})
    todo = [(wf, c) for wf in files for c in wf.cases if not cases or c.name in cases]
    cache = CompiledCache(reset_every)
    with _progress(todo, progress) as advance:
        for wf, spec in todo:
            rec = run_case(spec, wf, cache, max_numel)
            records.append(rec)
            if peak_rss is not None:
                peak_rss[wf.path.name] = max(peak_rss.get(wf.path.name, 0), rec["peak_rss_bytes"])
            advance(spec.name, rec["status"])
    cache.clear()
    return records
