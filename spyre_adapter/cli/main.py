"""The ``spyre-adapter`` command line.

Arguments are parsed and checked before torch (or anything heavy) is imported:
each command's arguments are defined in a light module, imported only for that
command (:data:`COMMANDS`); the command's implementation is imported by name
once every check passed (:func:`spyre_adapter.cli.argcheck.dispatch`). A bad
argument is one line on stderr with exit status 2.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from typing import Any

from spyre_adapter.cli.argcheck import ArgumentParser, dispatch, output_file, run_checks

DESCRIPTION = """\
Run models on the emulated IBM Spyre device, benchmark its scheduler, check the
installed torch, upgrade vendor Inductor code across torch releases, and keep the
release matrix. `spyre-adapter COMMAND --help` describes a command and its options.
"""
EPILOG = """\
A bad argument is reported on one line (exit status 2) before any work starts.
Output files must be in an existing folder: no command creates folders.
"""

#: Command -> (module defining its arguments with ``register(subparsers)``, one-line help).
COMMANDS: dict[str, tuple[str, str]] = {
    "run": ("spyre_adapter.cli.run", "compile and run a model on the emulated Spyre device"),
    "workloads": ("spyre_adapter.cli.workloads", "run real-model operator cases (YAML) on spyre vs CPU eager"),
    "bench": ("spyre_adapter.cli.bench", "scheduler/emulator benchmark against the physical limits"),
    "calibrate": ("spyre_adapter.cli.bench", "re-run the fit of the fitted machine constants, report held-out errors"),
    "reference": ("spyre_adapter.cli.bench", "our modeled time against IBM torch-spyre's cost model"),
    "speed": ("spyre_adapter.cli.bench", "compile time and emulator speed against eager (fresh processes)"),
    "opinfo": ("spyre_adapter.cli.opinfo", "run the OpInfo sweep on the device and write its summary"),
    "models": ("spyre_adapter.cli.models", "the transformers causal-LM families; --sweep runs them all on spyre"),
    "probe": ("spyre_adapter.cli.main", "check the installed torch against the internal surface the shims use"),
    "upgrade": ("spyre_codemods.cli", "codemod: upgrade Inductor backend code across torch releases"),
    "migrate": ("spyre_codemods.cli", "codemod: move torch._inductor/_dynamo usage onto the stable API"),
    "report": ("spyre_matrix.cli", "render compat_matrix/REPORT.md and report.png from committed data"),
    "surface": ("spyre_matrix.cli", "extract per-release API-surface JSON from release sources"),
    "compat-run": ("spyre_matrix.cli", "(nox compat session) run the tests and the probe, write the result JSON"),
    "compat-table": ("spyre_matrix.cli", "print the docs compatibility table (Markdown)"),
}
#: Checks of commands whose arguments other packages define ("module:function").
CHECKS: dict[str, tuple[str, ...]] = {
    "upgrade": ("spyre_adapter.cli.codemods:check_codemod",),
    "migrate": ("spyre_adapter.cli.codemods:check_codemod",),
    "report": ("spyre_adapter.cli.matrix:check_report",),
    "surface": ("spyre_adapter.cli.matrix:check_surface",),
    "compat-run": ("spyre_adapter.cli.matrix:check_compat_run",),
}


def register(subparsers: Any) -> None:
    """Add ``probe`` (the other commands come from the modules in :data:`COMMANDS`)."""
    p = subparsers.add_parser("probe", help=COMMANDS["probe"][1],
                              description="Check every internal torch symbol and signature the shims rely on "
                                          "(present, moved, adapted, missing) and which stable-API features are "
                                          "therefore unavailable. Exit status 1 outside the supported window.")
    p.add_argument("--json", type=output_file, metavar="PATH",
                   help="write the probe result as JSON to PATH (its folder must exist; default: none)")
    p.set_defaults(func="spyre_adapter.cli.probe:command")


def build_parser(command: str | None = None, *, full: bool = False) -> ArgumentParser:
    """The parser: with the arguments of ``command`` (every command's if ``full``);
    the other commands are listed with their one-line help."""
    parser = ArgumentParser(prog="spyre-adapter", description=DESCRIPTION, epilog=EPILOG)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", title="commands")
    wanted = COMMANDS if full else {command: COMMANDS[command]} if command in COMMANDS else {}
    for module in dict.fromkeys(m for m, _ in wanted.values()):
        importlib.import_module(module).register(sub)
    for name, (_, text) in COMMANDS.items():
        if name not in sub.choices:
            sub.add_parser(name, help=text, add_help=False)
    return parser


def subparsers_of(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """Command -> its parser."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def parse(argv: Sequence[str]) -> tuple[ArgumentParser, argparse.Namespace, dict[str, argparse.ArgumentParser]]:
    """Parse ``argv`` (exit 2 with one line on a bad argument): the parser, the
    arguments and the parser of each command."""
    args_list = list(argv)
    command = next((a for a in args_list if not a.startswith("-")), None)
    parser = build_parser(command)
    args, extra = parser.parse_known_args(args_list)
    subparsers = subparsers_of(parser)
    if extra:  # reported by the command's parser, which names the command
        subparsers[args.command].error(f"unrecognized arguments: {' '.join(extra)}")
    return parser, args, subparsers


def check_args(argv: Sequence[str]) -> argparse.Namespace:
    """Parse and check ``argv`` as :func:`main` does, without running the command
    (exit 2 with one line on a bad argument); e.g. for commands quoted in docs."""
    parser, args, subparsers = parse(argv)
    run_checks(parser, args, CHECKS.get(args.command, ()), subparsers)
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Console-script entry point."""
    parser, args, subparsers = parse(sys.argv[1:] if argv is None else argv)
    return dispatch(parser, args, CHECKS.get(args.command, ()), subparsers)


if __name__ == "__main__":
    sys.exit(main())
