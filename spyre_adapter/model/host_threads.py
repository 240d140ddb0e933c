"""The intra-op threads of the backend's own host work: planning programs and
running them on the emulator.

That work is mostly small tensor operations (index sets of one tile, one
core's LX views). Splitting each over threads costs more than it saves, and
when another process holds a core the threads' barriers stall: beside a test
suite on a 2-core machine, a 1024-wide decoder block's first run (compile and
checked launch) took 45-68 s with its planners on torch's 2 threads and PE
steps from 2^18 multiply-adds threaded, 25-38 s with this policy. The
backend's passes therefore run on ``SPYRE_EMULATOR_THREADS`` threads (default
1) and restore the process's count after; a PE step batched over many cores,
a real matmul, uses the process's own count (see
:data:`spyre_adapter.emulator.replay.THREADED_MACS`).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import torch

__all__ = ["wanted", "host_threads"]


def wanted() -> int:
    """``SPYRE_EMULATOR_THREADS`` (a positive integer; default 1)."""
    raw = os.environ.get("SPYRE_EMULATOR_THREADS", "1")
    return int(raw) if raw.isdigit() and int(raw) > 0 else 1


@contextlib.contextmanager
def host_threads() -> Iterator[int]:
    """Run the block on :func:`wanted` intra-op threads; yields the process's own
    count, restored after the block."""
    want, had = wanted(), torch.get_num_threads()
    if want == had:
        yield had
        return
    torch.set_num_threads(want)
    try:
        yield had
    finally:
        torch.set_num_threads(had)

