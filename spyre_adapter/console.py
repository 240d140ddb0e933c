"""The console reports print to: rich's, wide enough for the tables when the
output is a file or a CI log (rich would otherwise wrap them at 80 columns)."""

from __future__ import annotations

import os

from rich.console import Console

#: Columns used when the output is not a terminal and COLUMNS is not set.
LOG_WIDTH = 160


def make_console(stderr: bool = False) -> Console:
    """A console for report output (``stderr``: for progress and logs)."""
    console = Console(stderr=stderr)
    if not console.is_terminal and "COLUMNS" not in os.environ:
        console = Console(stderr=stderr, width=LOG_WIDTH)
    return console
