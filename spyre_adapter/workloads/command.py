"""The ``workloads`` command once its arguments passed the checks in
:mod:`spyre_adapter.cli.workloads`: run, print the table, write the JSON."""

from __future__ import annotations

import argparse
import json
import logging
import warnings
from pathlib import Path

import torch

import spyre_adapter
from spyre_adapter.workloads.output import document, print_peaks, print_slowest, print_table
from spyre_adapter.workloads.runner import run_files


def run_command(args: argparse.Namespace) -> int:
    """Run, print the table, write JSON; 1 if any case failed or could not be built."""
    spyre_adapter.register()  # when autoload is off
    torch._logging.set_logs(dynamo=logging.ERROR, inductor=logging.ERROR)  # graph-break chatter
    warnings.filterwarnings("ignore", module=r"torch\.")
    peaks: dict[str, int] = {}
    records = run_files(args.files, max_numel=args.max_numel, reset_every=args.reset_every,
                        progress=not args.no_progress, cases=args.case, peak_rss=peaks)
    print_table(records)
    print_slowest(records)
    print_peaks(peaks)
    doc = document(records, peaks)
    if args.json:
        Path(args.json).write_text(json.dumps(doc, indent=1) + "\n")
    s = doc["summary"]
    return 1 if s["failed"] or s["errors"] else 0
