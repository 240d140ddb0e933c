"""The consoles reports and progress print to (rich).

A report goes to stdout; when that is not a terminal (a file, a pipe, a CI log)
and COLUMNS is not set, nothing wraps: tables take their natural width instead
of folding at 80 columns. Progress goes to stderr, a line per stage
(:class:`Stages`), so a long run piped or in CI is never silent.
"""

from __future__ import annotations

import os
import time

from rich.console import Console

#: Columns used when the output is not a terminal and COLUMNS is not set: wide
#: enough that no table row or line wraps (each is printed at its natural width).
LOG_WIDTH = 10_000


def make_console(stderr: bool = False) -> Console:
    """A console for report output (``stderr``: for progress and logs)."""
    console = Console(stderr=stderr)
    if not console.is_terminal and "COLUMNS" not in os.environ:
        console = Console(stderr=stderr, width=LOG_WIDTH)
    return console


class Stages:
    """Progress as one line per stage on stderr, with the time since the start:
    ``[  12.3 s] compiling for spyre``."""

    def __init__(self, console: Console | None = None) -> None:
        self.console = console or make_console(stderr=True)
        self.start = time.perf_counter()

    def __call__(self, message: str) -> None:
        elapsed = time.perf_counter() - self.start
        self.console.print(f"[dim][{elapsed:7.1f} s][/dim] {message}", highlight=False, soft_wrap=True)
