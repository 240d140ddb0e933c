"""``spyre-adapter probe`` (arguments checked by :mod:`spyre_adapter.cli.main`)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from spyre_shims.probe import print_probe, run_probe


def command(args: argparse.Namespace) -> int:
    """Probe, print (tables at their natural width when piped), write JSON; 1 outside the window."""
    result = run_probe()
    print_probe(result)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    return 0 if result["window_ok"] else 1
