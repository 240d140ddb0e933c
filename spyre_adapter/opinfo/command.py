"""The OpInfo sweep command once its arguments passed the checks in
:mod:`spyre_adapter.cli.opinfo`: run (or summarize) and write the summary."""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from spyre_adapter.harness.pool import journals, run_parallel
from spyre_adapter.opinfo.corpus import items
from spyre_adapter.opinfo.summary import build, markdown

#: The sweep's worker process (``python -m``): runs items, journals each record.
WORKER = "spyre_adapter.opinfo.worker"


def lost_record(key: str, cause: str) -> dict[str, Any]:
    """The record of an item whose worker crashed or hung: a fail naming the cause."""
    op, dtype = key.split(":", 1)
    return {"op": op, "dtype": dtype, "status": "fail", "samples": {}, "first_failure": {"error": cause}}


def run_command(args: argparse.Namespace) -> int:
    """Run the sweep (or only summarize ``--workdir``); 1 if an item failed or was not run."""
    run, not_applicable = items(args.ops, args.dtypes)
    t0 = time.perf_counter()
    if args.summarize_only:
        records = journals(args.workdir)
        wall = sum(r.get("seconds", 0.0) for r in records.values()) / max(args.workers, 1)
    else:
        records = run_parallel(run, workers=args.workers, max_samples=args.max_samples, module=WORKER,
                               label="opinfo sweep", lost=lost_record, workdir=args.workdir,
                               timeout=args.timeout)
        wall = time.perf_counter() - t0
    summary = build(records, not_applicable, max_samples=args.max_samples, wall_seconds=wall,
                    pending=[i for i in run if i.key not in records])
    (args.out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    (args.out / "SUMMARY.md").write_text(markdown(summary))
    c = summary["counts"]
    print(f"{summary['items']} items: " + ", ".join(f"{k} {v}" for k, v in c.items())
          + (f"; {len(summary['pending'])} not run yet (incomplete)" if summary["pending"] else ""))
    print(f"summary: {args.out / 'summary.json'}, {args.out / 'SUMMARY.md'}")
    return 1 if c["fail"] or summary["pending"] else 0
