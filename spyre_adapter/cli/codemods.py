"""Checks, before any work, of ``upgrade``/``migrate`` (arguments defined by
:mod:`spyre_codemods.cli`): the same classes of bad input as every other
command get one line and exit status 2."""

from __future__ import annotations

import argparse
from pathlib import Path

from spyre_codemods.releases import KNOWN_RELEASES, parse_release

from spyre_adapter.cli.argcheck import ArgError, check_output

__all__ = ["check_codemod"]


def _known_release(argument: str, text: str | None) -> None:
    if text is None:
        return
    accepted = f"expected a torch release the rules know, {KNOWN_RELEASES[0]} to {KNOWN_RELEASES[-1]}"
    try:
        release = parse_release(text)
    except ValueError:
        raise ArgError(argument, text, accepted) from None
    if release not in KNOWN_RELEASES:
        raise ArgError(argument, text, accepted)


def check_codemod(args: argparse.Namespace) -> None:
    """``upgrade``/``migrate``: workers, releases, the JSON report path, PATHS."""
    if args.jobs < 1:
        raise ArgError("-j/--jobs", args.jobs, "expected an integer >= 1 (worker processes)")
    _known_release("--from", args.source)
    _known_release("--to", getattr(args, "target", None))
    check_output("--json", args.json)
    if getattr(args, "list_rules", False):
        return
    if not args.paths:
        raise ArgError("PATHS", None, "expected at least one file or folder")
    for path in args.paths:
        if not Path(path).exists():
            raise ArgError("PATHS", path, "expected an existing file or folder")
