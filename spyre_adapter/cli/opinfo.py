"""The OpInfo sweep's arguments and their checks (no torch here):
``spyre-adapter opinfo``. The sweep is
:func:`spyre_adapter.opinfo.command.run_command`, imported once they pass."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from spyre_adapter.cli.argcheck import ArgError, add_pool_arguments, existing_dir, int_range

#: dtypes the sweep covers (``corpus.DTYPES`` maps them to torch dtypes).
DTYPE_NAMES = ("fp32", "fp16", "bf16")
#: Samples per item by default, spread evenly over the op's sample list (the
#: whole list is ~50k samples, ~4 h per core; the spread keeps the variety), and
#: at most: one compiled function per item must stay under Dynamo's recompile limit.
DEFAULT_MAX_SAMPLES, MAX_SAMPLES = 6, 7
DESCRIPTION = ("Run PyTorch's OpInfo samples compiled on the spyre device against CPU eager, in worker processes, "
               "and write summary.json and SUMMARY.md. Progress goes to stderr (a line a minute when it is not a "
               "terminal). Exit status 1 if an item failed or was not run.")


def _add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--ops", nargs="*", default=[], metavar="OP",
                   help="op ids to run (a trailing * matches a prefix; default: all)")
    p.add_argument("--dtypes", nargs="*", default=list(DTYPE_NAMES), choices=DTYPE_NAMES,
                   help=f"dtypes to run (default: {' '.join(DTYPE_NAMES)})")
    p.add_argument("--max-samples", type=int_range(1, MAX_SAMPLES), default=DEFAULT_MAX_SAMPLES, metavar="N",
                   help=f"samples per op x dtype, spread over the op's sample list, 1 to {MAX_SAMPLES}")
    add_pool_arguments(p, timeout=600.0, failure="fail")
    p.add_argument("--out", type=existing_dir, default=Path("results/opinfo"), metavar="DIR",
                   help="existing folder for summary.json and SUMMARY.md")
    p.set_defaults(func="spyre_adapter.opinfo.command:run_command", checks=[check_opinfo])


def check_opinfo(args: argparse.Namespace) -> None:
    """--summarize-only reads --workdir."""
    if args.summarize_only and args.workdir is None:
        raise ArgError("--summarize-only", None, "expected --workdir DIR too (the journals to summarize)")


def register(subparsers: Any) -> None:
    """Add ``opinfo`` to the main CLI."""
    p = subparsers.add_parser("opinfo", help="run the OpInfo sweep on the device and write its summary",
                              description=DESCRIPTION)
    _add_arguments(p)


