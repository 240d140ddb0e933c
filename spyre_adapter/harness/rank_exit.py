"""How a torchrun worker of this project ends."""

from __future__ import annotations

import os
import sys

__all__ = ["finish"]


def finish(code: int) -> None:
    """Exit a rank with ``code``. After success (the process group destroyed,
    the result written) it leaves without the interpreter's teardown, where a
    collective library's thread still being joined aborted a rank now and then
    ("terminate called without an active exception", SIGABRT), failing a run
    that had finished. A failing rank exits normally."""
    if code != 0:
        sys.exit(code)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
