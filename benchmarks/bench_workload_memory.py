"""Peak memory of the workload runner: each workload file's peak resident set
size (and each case's), the largest case, and how the cases ended.

Peaks are measured per case by resetting the kernel's high-water mark
(``/proc/self/clear_refs``) before it runs; a file's peak is its largest case.
The baseline in the same run is the process RSS after importing torch and the
backend, before any case.

    python benchmarks/bench_workload_memory.py benchmarks/workloads/moe-20b-large.yaml \
        ../shared/workloads/*.yaml --json results/workloads/memory.json
"""

from __future__ import annotations

import argparse
import json
import logging
import platform
import time
import warnings
from pathlib import Path

import torch

import spyre_adapter  # noqa: F401
from spyre_adapter.cli.argcheck import ArgumentParser, existing_file, output_file
from spyre_adapter.harness.memory import available_bytes, peak_rss_bytes, reset_peak_rss
from spyre_adapter.workloads.output import summarize
from spyre_adapter.workloads.runner import run_files

GIB = 2**30


def main() -> int:
    p = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("files", nargs="+", type=existing_file)
    p.add_argument("--json", type=output_file, help="write the results here (its folder must exist)")
    args = p.parse_args()
    torch._logging.set_logs(dynamo=logging.ERROR, inductor=logging.ERROR)
    warnings.filterwarnings("ignore")
    reset_peak_rss()
    baseline = peak_rss_bytes()
    files = []
    for f in args.files:
        peaks: dict[str, int] = {}
        t0 = time.perf_counter()
        records = run_files([f], progress=False, peak_rss=peaks)
        largest = max(records, key=lambda r: r.get("input_bytes", 0))
        files.append({"file": Path(f).name, "peak_rss_bytes": peaks.get(Path(f).name, 0), "summary": summarize(records),
                      "seconds": round(time.perf_counter() - t0, 1),
                      "largest_case": {k: largest.get(k) for k in ("name", "op", "input_bytes", "peak_rss_bytes",
                                                                   "status")},
                      "cases": [{k: r.get(k) for k in ("name", "op", "status", "input_bytes", "peak_rss_bytes",
                                                        "detail")} for r in records]})
        s = files[-1]
        lc = s["largest_case"]
        print(f"{s['file']}: peak RSS {s['peak_rss_bytes'] / GIB:.2f} GiB; largest case {lc['name']} "
              f"({(lc['input_bytes'] or 0) / GIB:.2f} GiB of inputs, {lc['status']}); {s['summary']}; "
              f"{s['seconds']} s", flush=True)
    doc = {"baseline_rss_bytes": baseline, "available_bytes_at_start": available_bytes(), "torch": torch.__version__,
           "python": platform.python_version(), "files": files}
    print(f"baseline RSS (torch + backend imported): {baseline / GIB:.2f} GiB")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
