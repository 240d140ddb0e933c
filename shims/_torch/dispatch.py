"""Running a kernel's implementation as device execution, outside whatever
torch dispatch modes are active while the compiled graph runs (AOTAutograd's
first-call aliasing analysis, a user's tracing mode): those modes see the
graph's ops, not the host work that emulates one kernel."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from torch.utils import _python_dispatch

__all__ = ["outside_dispatch_modes"]


@contextlib.contextmanager
def outside_dispatch_modes() -> Iterator[None]:
    """Run the block with the current Python dispatch modes popped (restored after)."""
    disable = getattr(_python_dispatch, "_disable_current_modes", None)
    if disable is None:  # feature-detected: every supported release has it
        yield
        return
    with disable():
        yield
