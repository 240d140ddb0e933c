"""spyre-adapter workloads FILE.yaml... [--json PATH]: run real-model operator
cases compiled on the spyre device against CPU eager.

Arguments and their checks only (no torch here): every file is loaded and every
--case name looked up before anything runs; the run is
:func:`spyre_adapter.workloads.command.run_command`.
"""

from __future__ import annotations

import argparse

from spyre_adapter.cli.argcheck import ArgError, existing_file, int_range, output_file
from spyre_adapter.workloads.spec import WorkloadFile, load

DESCRIPTION = ("Run real-model operator cases (the YAML format of shared/workloads/template.yaml) compiled on the "
               "spyre device and compare each with CPU eager. Progress goes to stderr: a bar on a terminal, "
               "a line per file and every 30 s otherwise. Exit status 1 if a case failed or could not be built.")


def workload_file(text: str) -> WorkloadFile:
    """argparse type: an existing, loadable workload file (loaded once, here)."""
    existing_file(text)
    try:
        return load(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{text!r} is not accepted: {str(exc).removeprefix(text + ': ')}") from None


def _add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("files", nargs="+", type=workload_file, metavar="FILE",
                   help="workload YAML files (format: shared/workloads/template.yaml)")
    p.add_argument("--json", type=output_file, metavar="PATH",
                   help="write {summary, files, cases} as JSON to PATH (its folder must exist; default: none)")
    p.add_argument("--max-numel", type=int_range(1), metavar="N",
                   help="skip (and report) cases with an input larger than N elements (default: no limit)")
    p.add_argument("--case", action="append", default=[], metavar="NAME",
                   help="run only the named case (repeatable; default: every case)")
    p.add_argument("--reset-every", type=int_range(1), default=40, metavar="N",
                   help="drop compiled state every N cases (bounds memory)")
    p.add_argument("--no-progress", action="store_true", help="no progress on stderr")
    p.set_defaults(func="spyre_adapter.workloads.command:run_command", checks=[check_cases])


def check_cases(args: argparse.Namespace) -> None:
    """Every --case names a case of the given files."""
    names = {c.name for wf in args.files for c in wf.cases}
    for name in args.case:
        if name not in names:
            sample = ", ".join(sorted(names)[:5])
            raise ArgError("--case", name, f"expected the name of a case in the given files ({len(names)} "
                                           f"cases, e.g. {sample})")


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``workloads`` subcommand to the main CLI."""
    p = subparsers.add_parser("workloads", help="run real-model operator cases (YAML) on spyre vs CPU eager",
                              description=DESCRIPTION)
    _add_arguments(p)

