"""What the stable API can do on the installed torch (a capability query).

A vendor asks once, at registration, instead of probing torch itself:
``spyre_shims.capabilities().features["kernel_ir.extern"]``.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping

from ._api_level import API_LEVEL
from .ops import POINTWISE, REDUCTIONS, STRUCTURAL
from .probe import run_probe

__all__ = ["Capabilities", "capabilities"]


@dataclasses.dataclass(frozen=True)
class Capabilities:
    """The stable API on this torch: its level, the torch release and window,
    which features work (by the names in ``surface.toml``), the adapters chosen,
    and the op set a Kernel IR body may contain."""

    api_level: int
    torch: str
    window: str
    in_window: bool
    features: Mapping[str, bool]
    adapters: tuple[str, ...]
    pointwise_ops: frozenset[str]
    structural_ops: frozenset[str]
    reductions: frozenset[str]

    @property
    def unavailable(self) -> tuple[str, ...]:
        """Features this torch lacks."""
        return tuple(sorted(k for k, v in self.features.items() if not v))


@functools.cache
def capabilities() -> Capabilities:
    """The capabilities of the stable API on the installed torch (cached)."""
    p = run_probe()
    return Capabilities(API_LEVEL, p["torch"], p["window"], p["window_ok"], dict(p["features"]),
                        tuple(p["adapters"]), frozenset(POINTWISE), STRUCTURAL, REDUCTIONS)
