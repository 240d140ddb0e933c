"""Memory of this process and of the machine (Linux ``/proc``): what is
available now, and the peak resident set size between two points of a run."""

from __future__ import annotations

import os
import resource
from pathlib import Path

__all__ = ["available_bytes", "reset_peak_rss", "peak_rss_bytes"]


def _status_kib(field: str, path: str) -> int | None:
    try:
        for line in Path(path).read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return None


def available_bytes() -> int:
    """Memory the machine can give this process now (MemAvailable)."""
    kib = _status_kib("MemAvailable", "/proc/meminfo")
    if kib is not None:
        return kib * 1024
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def reset_peak_rss() -> bool:
    """Start a new peak-RSS window (Linux: ``5`` to ``/proc/self/clear_refs``).
    False where the kernel does not allow it: the peak is then the process's."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def peak_rss_bytes() -> int:
    """Peak resident set size since the last :func:`reset_peak_rss` (or process start)."""
    kib = _status_kib("VmHWM", "/proc/self/status")
    if kib is not None:
        return kib * 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
