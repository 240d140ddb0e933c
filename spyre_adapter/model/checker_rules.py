"""The emulator's checker rules by name, each of which can be switched off in a
scope: how the mutation self-test shows that every rule catches some planted
bug no other rule catches (a rule whose removal changes nothing is untested).

Checks are on unless a scope switches them off; nothing but that self-test
should.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["RULES", "enabled", "disabled", "switched_off"]

#: rule name -> what it checks
RULES: dict[str, str] = {
    "lx-view-bounds": "LX views well formed, aligned to their dtype and inside the usable LX",
    "dma-stick-alignment": "the LX side of a DMA starts on a stick boundary",
    "dma-region-bounds": "a DMA region is inside its tensor and matches its LX view",
    "dram-races": "no two cores' strided DRAM accesses to shared bytes (one a write) without an order between them",
    "dynamic-races": "the same for data-dependent transfers (gathers and scatters)",
    "allocations": "no two live allocations share a byte; every step inside an allocation live at it",
    "unwritten-lx": "no read of LX bytes not written in this launch",
    "stale-lx": "no read of bytes an allocation took over before it wrote them",
}

_off: set[str] = set()


def enabled(rule: str) -> bool:
    """Whether checker rule ``rule`` is on."""
    return rule not in _off


def switched_off() -> frozenset[str]:
    """The rules a scope has switched off (what a remembered check result depends on)."""
    return frozenset(_off)


@contextmanager
def disabled(*rules: str) -> Iterator[None]:
    """Switch the named rules off inside the scope (for the mutation self-test)."""
    unknown = [r for r in rules if r not in RULES]
    if unknown:
        raise ValueError(f"unknown checker rule(s) {unknown}; known: {sorted(RULES)}")
    added = set(rules) - _off
    _off.update(added)
    try:
        yield
    finally:
        _off.difference_update(added)
