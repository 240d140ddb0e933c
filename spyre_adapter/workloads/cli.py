"""``spyre-adapter workloads FILE.yaml... [--json PATH]``: run real-model
operator cases compiled on the spyre device against CPU eager."""

from __future__ import annotations

import argparse
import json
import logging
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path


def _add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("files", nargs="+", help="workload YAML files (format: shared/workloads/template.yaml)")
    p.add_argument("--json", help="write {summary, files, cases} as JSON to this path")
    p.add_argument("--max-numel", type=int, help="skip (and report) cases with an input larger than this many elements")
    p.add_argument("--case", action="append", default=[], help="run only the named case(s)")
    p.add_argument("--reset-every", type=int, default=40, help="drop compiled state every N cases (bounds memory)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``workloads`` subcommand to the main CLI."""
    p = subparsers.add_parser("workloads", help="run real-model operator cases (YAML) on spyre vs CPU eager",
                              description=__doc__)
    _add_arguments(p)
    p.set_defaults(func=run_command)


def run_command(args: argparse.Namespace) -> int:
    """Run, print the table, write JSON; 1 if any case failed or could not be built."""
    import torch

    import spyre_adapter  # noqa: F401 - registers the device when autoload is off

    from .output import document, print_peaks, print_table
    from .runner import run_files

    torch._logging.set_logs(dynamo=logging.ERROR, inductor=logging.ERROR)  # graph-break chatter
    warnings.filterwarnings("ignore", module=r"torch\.")
    peaks: dict[str, int] = {}
    records = run_files(args.files, max_numel=args.max_numel, reset_every=args.reset_every,
                        progress=not args.no_progress and sys.stderr.isatty(), cases=args.case, peak_rss=peaks)
    print_table(records)
    print_peaks(peaks)
    doc = document(records, peaks)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(doc, indent=1) + "\n")
    s = doc["summary"]
    return 1 if s["failed"] or s["errors"] else 0


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="spyre-adapter workloads", description=__doc__)
    _add_arguments(p)
    return run_command(p.parse_args(argv))
