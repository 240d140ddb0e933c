"""``python -m spyre_adapter.opinfo``: run the OpInfo sweep and write its summary."""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Sequence
from pathlib import Path

from .corpus import DEFAULT_MAX_SAMPLES, DTYPES, items
from .parallel import journals, run_parallel
from .summary import build, markdown


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m spyre_adapter.opinfo", description=__doc__)
    p.add_argument("--ops", nargs="*", default=[], help="op ids to run (a trailing * matches a prefix); default all")
    p.add_argument("--dtypes", nargs="*", default=list(DTYPES), choices=list(DTYPES))
    p.add_argument("--max-samples", type=int, default=DEFAULT_MAX_SAMPLES,
                   help="samples per op x dtype, spread over the op's sample list (at most 7: one compiled "
                        "function per item must stay under Dynamo's recompile limit)")
    p.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    p.add_argument("--timeout", type=float, default=600.0, help="seconds an item may run before it counts as a fail")
    p.add_argument("--workdir", type=Path, help="journals; rerun with the same folder to resume")
    p.add_argument("--out", type=Path, default=Path("results/opinfo"), help="folder for summary.json and SUMMARY.md")
    p.add_argument("--summarize-only", action="store_true",
                   help="write the summary from the journals in --workdir without running (a partial sweep "
                        "is marked incomplete, its missing items listed)")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if not 1 <= args.max_samples <= 7:
        raise SystemExit("--max-samples must be 1..7")
    run, not_applicable = items(args.ops, args.dtypes)
    t0 = time.perf_counter()
    if args.summarize_only:
        if args.workdir is None:
            raise SystemExit("--summarize-only needs --workdir")
        records = journals(args.workdir)
        wall = sum(r.get("seconds", 0.0) for r in records.values()) / max(args.workers, 1)
    else:
        records = run_parallel(run, workers=args.workers, max_samples=args.max_samples, workdir=args.workdir,
                               timeout=args.timeout)
        wall = time.perf_counter() - t0
    summary = build(records, not_applicable, max_samples=args.max_samples, wall_seconds=wall,
                    pending=[i for i in run if i.key not in records])
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    (args.out / "SUMMARY.md").write_text(markdown(summary))
    c = summary["counts"]
    print(f"{summary['items']} items: " + ", ".join(f"{k} {v}" for k, v in c.items())
          + (f"; {len(summary['pending'])} not run yet (incomplete)" if summary["pending"] else ""))
    print(f"summary: {args.out / 'summary.json'}, {args.out / 'SUMMARY.md'}")
    return 1 if c["fail"] or summary["pending"] else 0
