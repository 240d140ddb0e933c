"""Runs a sweep in worker processes (one per core by default) with a progress
bar. A worker that crashes or stops making progress is killed, its item is
recorded as lost (the sweep says how) and a new worker takes the rest. The
OpInfo sweep (:mod:`spyre_adapter.opinfo`) and the transformers family sweep
(:mod:`spyre_adapter.zoo.sweep`) both run here; a worker is ``python -m MODULE ITEMS JOURNAL ARG``, writing a
``start`` line before each item and its record (with its ``key``) after."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn


class Item(Protocol):
    """What a sweep runs: anything with a ``key`` naming it in the journals."""

    @property
    def key(self) -> str: ...


def read_journal(path: Path) -> tuple[dict[str, dict[str, Any]], str | None]:
    """``(finished records by item key, the item started but not finished)``."""
    done: dict[str, dict[str, Any]] = {}
    started: str | None = None
    if not path.exists():
        return done, None
    for line in path.read_text().splitlines():
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue  # a line cut by a crash
        if "start" in rec:
            started = rec["start"]
        else:
            key = rec.get("key") or f"{rec['op']}:{rec['dtype']}"
            done[key] = rec
            started = None if started == key else started
    return done, started


#: What a lost item (its worker crashed or hung) is recorded as: (key, cause) -> record.
LostRecord = Callable[[str, str], dict[str, Any]]


class _Worker:
    def __init__(self, index: int, items: list[Item], workdir: Path, max_samples: int, log: Path,
                 module: str, lost: LostRecord) -> None:
        self.index, self.items, self.max_samples = index, items, max_samples
        self.module, self.lost = module, lost
        self.journal = workdir / f"worker{index}.jsonl"
        self.items_file = workdir / f"worker{index}.items"
        self.log = log
        self.proc: subprocess.Popen[bytes] | None = None
        self.last_change = time.monotonic()
        self.last_size = -1

    def remaining(self) -> list[Item]:
        done, _ = read_journal(self.journal)
        return [i for i in self.items if i.key not in done]

    def start(self) -> None:
        todo = self.remaining()
        if not todo:
            return
        self.items_file.write_text("\n".join(i.key for i in todo) + "\n")
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", self.module, str(self.items_file), str(self.journal),
                 str(self.max_samples)], stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONHASHSEED": "0"})
        self.last_change = time.monotonic()

    def record_lost(self, cause: str) -> None:
        """Journal the in-flight item as a fail (crash or timeout)."""
        _, started = read_journal(self.journal)
        if started is None:
            raise RuntimeError(f"sweep worker {self.index} failed before starting an item ({cause}); see {self.log}")
        cut = not self.journal.read_bytes().endswith(b"\n")  # the crash may have cut a line short
        with self.journal.open("a") as out:
            out.write(("\n" if cut else "") + json.dumps({"key": started, **self.lost(started, cause)}) + "\n")

    def poll(self, timeout: float) -> None:
        if self.proc is None:
            return
        size = self.journal.stat().st_size if self.journal.exists() else 0
        if size != self.last_size:
            self.last_size, self.last_change = size, time.monotonic()
        code = self.proc.poll()
        if code is None and time.monotonic() - self.last_change > timeout:
            self.proc.kill()
            self.proc.wait()
            self.record_lost(f"timeout: no result within {timeout:.0f} s (worker killed)")
            self.start()
        elif code is not None:
            self.proc = None
            if code != 0:
                self.record_lost(f"worker process died (exit code {code})")
            self.start()


#: Seconds between progress lines when the output is not a terminal.
LINE_EVERY_S = 60.0


def run_parallel(items: Sequence[Item], *, workers: int, max_samples: int, module: str, label: str, lost: LostRecord,
                 workdir: Path | None = None, timeout: float = 600.0,
                 log: Path | None = None) -> dict[str, dict[str, Any]]:
    """Records of every item, by key. ``workdir`` holds the journals: rerunning
    with the same ``workdir`` resumes where a previous run stopped. ``module``
    is the worker (its third argument is ``max_samples``), ``label`` names the
    sweep in its progress lines, ``lost`` makes the record of an item whose
    worker died."""
    workdir = workdir or Path(tempfile.mkdtemp(prefix="spyre-sweep-"))
    workdir.mkdir(parents=True, exist_ok=True)
    log = log or workdir / "workers.log"
    # Interleave so every worker gets a mix of cheap and expensive ops.
    pool = [_Worker(k, list(items[k::workers]), workdir, max_samples, log, module, lost) for k in range(workers)]
    columns = (TextColumn(label), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
               TextColumn("{task.fields[status]}"))
    start = last_line = time.perf_counter()
    with Progress(*columns, transient=False) as progress:
        task = progress.add_task("sweep", total=len(items), status="")
        for w in pool:
            w.start()
        while True:
            for w in pool:
                w.poll(timeout)
            records = _collect(pool)
            fails = sum(r["status"] == "fail" for r in records.values())
            progress.update(task, completed=len(records), status=f"fail {fails}")
            if not progress.console.is_terminal and time.perf_counter() - last_line >= LINE_EVERY_S:
                last_line = time.perf_counter()  # no live bar in a log: a line now and then
                progress.console.print(f"[{last_line - start:7.1f} s] {label}: {len(records)}/{len(items)} "
                                       f"items, {fails} fail", highlight=False)
            if all(w.proc is None for w in pool):
                break
            time.sleep(0.5)
    return _collect(pool)


def journals(workdir: Path) -> dict[str, dict[str, Any]]:
    """Finished records of every journal in ``workdir``."""
    out: dict[str, dict[str, Any]] = {}
    for path in sorted(workdir.glob("worker*.jsonl")):
        out.update(read_journal(path)[0])
    return out


def _collect(pool: Sequence[_Worker]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for w in pool:
        out.update(read_journal(w.journal)[0])
    return out
