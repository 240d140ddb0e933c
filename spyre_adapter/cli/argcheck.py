"""Command-line arguments checked before any work: one line naming the argument,
the value and what is accepted; exit status 2; no traceback; nothing written.

Imports no torch (the command line parses before torch loads). The pieces:
:class:`ArgumentParser` (one-line errors, defaults shown in ``--help``), argument
types for numbers, files and output paths, :class:`ArgError` for checks that span
several arguments, and :func:`dispatch`, which runs a command's checks and then
its implementation, named ``"module:function"`` and imported only then.
"""

from __future__ import annotations

import argparse
import importlib
import math
import os
import sys
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, NoReturn

from spyre_adapter.harness.usage import ArgError, UsageError

__all__ = [
    "UsageError", "ArgError", "ArgumentParser", "HelpFormatter", "dispatch", "int_range", "float_range", "output_file",
    "existing_file", "existing_dir", "check_output", "one_of", "run_checks", "EXIT_USAGE", "add_pool_arguments",
]

#: Exit status of a bad argument (argparse's and the codemods').
EXIT_USAGE = 2


class HelpFormatter(argparse.HelpFormatter):
    """Every option that takes a value shows its default, unless its help
    already says what happens by default."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        default = action.default
        if ("default" in text.lower() or default in (None, False, argparse.SUPPRESS) or default == []
                or not action.option_strings or action.nargs == 0):
            return text
        return f"{text} (default: %(default)s)"


class ArgumentParser(argparse.ArgumentParser):
    """argparse with errors on one line (``prog: error: message``, exit 2) instead
    of a usage block; subcommand parsers made from it behave the same."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        if message.startswith("unrecognized arguments"):
            message += f" (see {self.prog} --help)"
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


# ------------------------------------------------------------------ argument types

def int_range(low: int, high: int | None = None) -> Callable[[str], int]:
    """An ``int`` type accepting ``low`` <= n (<= ``high``)."""
    accepted = f"an integer >= {low}" if high is None else f"an integer from {low} to {high}"

    def convert(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not accepted: expected {accepted}") from None
        if value < low or (high is not None and value > high):
            raise argparse.ArgumentTypeError(f"{text!r} is not accepted: expected {accepted}")
        return value

    convert.__name__ = "integer"  # argparse names the type in some messages
    return convert


def float_range(low: float, *, inclusive: bool = True) -> Callable[[str], float]:
    """A finite ``float`` type accepting x >= ``low`` (x > ``low`` if not inclusive)."""
    accepted = f"a number {'>=' if inclusive else '>'} {low:g}"

    def convert(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not accepted: expected {accepted}") from None
        if not math.isfinite(value) or value < low or (not inclusive and value == low):
            raise argparse.ArgumentTypeError(f"{text!r} is not accepted: expected {accepted}")
        return value

    convert.__name__ = "number"
    return convert


def one_of(choices: Iterable[str], what: str = "one of") -> Callable[[str], str]:
    """A ``str`` type accepting only ``choices`` (for choices argparse cannot list)."""
    allowed = list(choices)

    def convert(text: str) -> str:
        if text not in allowed:
            raise argparse.ArgumentTypeError(f"{text!r} is not accepted: expected {what} {', '.join(allowed)}")
        return text

    return convert


def _output_problem(text: str) -> str | None:
    path = Path(text)
    folder = path.parent
    if text.endswith(("/", os.sep)) or path.is_dir():
        return "expected a file path, got a folder"
    if not folder.exists():
        return f"expected a file in an existing folder; {str(folder)!r} does not exist (create it first)"
    if not folder.is_dir():
        return f"expected a file in a folder; {str(folder)!r} is not a folder"
    if path.exists() and not os.access(path, os.W_OK):
        return "expected a writable file; this one is read-only"
    if not os.access(folder, os.W_OK | os.X_OK):
        return f"expected a file in a writable folder; {str(folder)!r} is not writable"
    return None


def output_file(text: str) -> str:
    """An output file: its folder must exist (nothing creates folders), it must
    not be a folder, and it must be writable. Checked before any work."""
    problem = _output_problem(text)
    if problem:
        raise argparse.ArgumentTypeError(f"{text!r} is not accepted: {problem}")
    return text


def check_output(argument: str, value: str | None) -> None:
    """:func:`output_file` as a check after parsing (for parsers defined elsewhere)."""
    if value is not None:
        problem = _output_problem(value)
        if problem:
            raise ArgError(argument, value, problem)


def existing_file(text: str) -> str:
    """An input file that exists."""
    path = Path(text)
    if not path.exists():
        raise argparse.ArgumentTypeError(f"{text!r} is not accepted: expected an existing file; it does not exist")
    if not path.is_file():
        raise argparse.ArgumentTypeError(f"{text!r} is not accepted: expected a file, got a folder")
    if not os.access(path, os.R_OK):
        raise argparse.ArgumentTypeError(f"{text!r} is not accepted: expected a readable file")
    return text


def existing_dir(text: str) -> Path:
    """A folder that exists (nothing creates folders)."""
    path = Path(text)
    if not path.is_dir():
        what = "it is a file" if path.exists() else "it does not exist (create it first)"
        raise argparse.ArgumentTypeError(f"{text!r} is not accepted: expected an existing folder; {what}")
    return path


# ------------------------------------------------------------------ running a command

Check = Callable[[argparse.Namespace], None] | str


def dispatch(parser: argparse.ArgumentParser, args: argparse.Namespace,
             checks: Sequence[Check] = (), subparsers: dict[str, argparse.ArgumentParser] | None = None) -> int:
    """Run the checks of ``args`` (``args.checks`` plus ``checks``), then the
    command's implementation ``args.func``. Checks and implementations are
    callables or ``"module:function"`` references, imported only when they run
    (the deliberate lazy step: a bad argument never waits for torch). A
    :class:`UsageError` from either is one line on stderr, exit status 2."""
    target = _target(parser, args, subparsers)
    run_checks(parser, args, checks, subparsers)
    try:
        return int(_resolve(args.func)(args) or 0)
    except UsageError as exc:
        target.error(str(exc))
    except BrokenPipeError:
        # The reader went away (``spyre-adapter models | head``): not an error of
        # ours. Point stdout at devnull so the interpreter's final flush is quiet.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


def run_checks(parser: argparse.ArgumentParser, args: argparse.Namespace,
               checks: Sequence[Check] = (), subparsers: dict[str, argparse.ArgumentParser] | None = None) -> None:
    """The checks :func:`dispatch` runs before the command (exit 2 on the first failure)."""
    try:
        for check in (*getattr(args, "checks", ()), *checks):
            _resolve(check)(args)
    except UsageError as exc:
        _target(parser, args, subparsers).error(str(exc))


def _target(parser: argparse.ArgumentParser, args: argparse.Namespace,
            subparsers: dict[str, argparse.ArgumentParser] | None) -> argparse.ArgumentParser:
    command = getattr(args, "command", None)
    return (subparsers or {}).get(command, parser) if command else parser


def _resolve(ref: Callable[..., Any] | str) -> Callable[..., Any]:
    if callable(ref):
        return ref
    module, _, name = ref.partition(":")
    return getattr(importlib.import_module(module), name)  # type: ignore[no-any-return]


def add_pool_arguments(p: argparse.ArgumentParser, *, timeout: float, failure: str) -> None:
    """The options of a sweep run in worker processes (resumable journals):
    ``--workers``, ``--timeout``, ``--workdir``, ``--summarize-only``; an item
    over the timeout counts as ``failure``."""
    p.add_argument("--workers", type=int_range(1), default=os.cpu_count() or 1, metavar="N",
                   help="worker processes (default: one per CPU)")
    p.add_argument("--timeout", type=float_range(0.0, inclusive=False), default=timeout, metavar="SECONDS",
                   help=f"seconds an item may run before it counts as a {failure}")
    p.add_argument("--workdir", type=existing_dir, metavar="DIR",
                   help="an existing folder for the journals; rerun with the same folder to resume "
                        "(default: a new temporary folder)")
    p.add_argument("--summarize-only", action="store_true",
                   help="write the summary from the journals in --workdir without running (a partial sweep "
                        "is marked incomplete, its missing items listed)")
