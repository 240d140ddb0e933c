"""Workload results as a table (rich) and as JSON."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from rich.console import Console
from rich.table import Table

from spyre_adapter.harness.console import make_console
from spyre_adapter.workloads import differential as diff

_STYLE = {diff.PASS: "green", diff.PASS_NO_KERNEL: "green", diff.FALLBACK: "yellow", diff.FAIL: "bold red",
          diff.ERROR: "bold red", diff.SKIPPED: "dim"}


def summarize(records: Sequence[dict[str, Any]]) -> dict[str, int]:
    """Counts; ``passed`` are device passes (kernels ran), ``passed_no_kernel``
    cases that legitimately needed none (views, no tensor compute)."""
    c = Counter(r["status"] for r in records)
    return {"total": len(records), "passed": c[diff.PASS], "passed_no_kernel": c[diff.PASS_NO_KERNEL],
            "fallback": c[diff.FALLBACK], "failed": c[diff.FAIL], "errors": c[diff.ERROR], "skipped": c[diff.SKIPPED]}


def document(records: Sequence[dict[str, Any]], peak_rss: dict[str, int] | None = None) -> dict[str, Any]:
    """The JSON document: overall summary, per-file summaries (with the file's
    peak RSS in bytes when measured), every case."""
    files = sorted({r["file"] for r in records})
    per_file: dict[str, dict[str, Any]] = {f: dict(summarize([r for r in records if r["file"] == f])) for f in files}
    for f, peak in (peak_rss or {}).items():
        per_file.setdefault(f, {})["peak_rss_bytes"] = peak
    return {"summary": summarize(records), "files": per_file, "cases": list(records)}


def print_table(records: Sequence[dict[str, Any]], console: Console | None = None) -> None:
    console = console or make_console()
    table = Table(title="workload cases: compiled on spyre vs CPU eager")
    for col in ("file", "case", "op", "status", "launches", "max abs err", "fallbacks / detail"):
        table.add_column(col, justify="right" if col in ("launches", "max abs err") else "left", overflow="fold")
    for r in records:
        err = r.get("max_abs_err")
        info = ", ".join(r.get("fallbacks", [])) or r.get("detail", "")
        table.add_row(r["file"], r["name"], r["op"], f"[{_STYLE.get(r['status'], '')}]{r['status']}[/]",
                      str(r.get("launches", "")), "" if err is None else f"{err:.2e}", info[:160])
    console.print(table)
    s = summarize(records)
    console.print(", ".join(f"{k} {v}" for k, v in s.items()))


def print_peaks(peak_rss: dict[str, int], console: Console | None = None) -> None:
    """One line per file: its peak resident set size."""
    console = console or make_console()
    for f, peak in peak_rss.items():
        console.print(f"peak RSS {f}: {peak / 2**30:.2f} GiB")


#: Cases the slowest-cases table lists.
SLOWEST = 10


def print_slowest(records: Sequence[dict[str, Any]], console: Console | None = None, n: int = SLOWEST) -> None:
    """The ``n`` slowest cases that ran: wall seconds (eager reference, compile,
    the checked and the steady launch, comparison) and the process's CPU seconds
    over the same span (on a shared machine the two part ways)."""
    ran = sorted((r for r in records if "seconds" in r), key=lambda r: -r["seconds"])[:n]
    if not ran:
        return
    console = console or make_console()
    table = Table(title=f"slowest {len(ran)} case(s)")
    for col in ("file", "case", "op", "status", "wall s", "cpu s", "peak RSS GiB"):
        table.add_column(col, justify="right" if col.endswith(("s", "GiB")) else "left")
    for r in ran:
        cpu = r.get("cpu_seconds")
        table.add_row(r["file"], r["name"], r["op"], r["status"], f"{r['seconds']:.1f}",
                      "" if cpu is None else f"{cpu:.1f}", f"{r.get('peak_rss_bytes', 0) / 2**30:.2f}")
    console.print(table)
