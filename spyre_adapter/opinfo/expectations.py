"""The reviewed expectations of the sweep (``expectations.yaml``): xfails, each
with a written reason, and per-op tolerance overrides, each with a reason.

An xfail never hides a run: the item still runs, and one that no longer fails
is reported as ``xpass`` so the list cannot go stale silently.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from pathlib import Path
from typing import Any

import yaml

from spyre_adapter.opinfo.corpus import DTYPES

PATH = Path(__file__).with_name("expectations.yaml")

#: Comparison tolerances by dtype (about 4-8 ulp of the low-precision types;
#: fp32 leaves room for a different summation order in reductions and matmuls).
TOLERANCES: dict[str, tuple[float, float]] = {"fp32": (1e-5, 1e-4), "fp16": (1e-3, 2e-3), "bf16": (8e-3, 1.6e-2)}


@dataclasses.dataclass(frozen=True)
class Expectations:
    xfail: dict[tuple[str, str], tuple[str, str]]
    tolerance: dict[tuple[str, str], tuple[float, float, str]]

    def xfail_reason(self, op: str, dtype: str) -> str | None:
        hit = self.xfail.get((op, dtype))
        return hit[0] if hit else None

    def xfail_matches(self, op: str, dtype: str, failure: str) -> bool:
        """The failure is the one the entry expects (its ``match`` regex; by
        default only wrong results, so a crash is never hidden)."""
        hit = self.xfail.get((op, dtype))
        return bool(hit and re.search(hit[1], failure))

    def tolerances(self, op: str, dtype: str) -> tuple[float, float]:
        hit = self.tolerance.get((op, dtype))
        return (hit[0], hit[1]) if hit else TOLERANCES[dtype]


def _expand(entry: dict[str, Any], kind: str) -> list[tuple[str, str]]:
    reason = str(entry.get("reason", "")).strip()
    if len(reason) < 10:
        raise ValueError(f"{kind} entry for {entry.get('ops')} needs a written reason")
    dtypes = entry.get("dtypes") or list(DTYPES)
    unknown = set(dtypes) - set(DTYPES)
    if unknown:
        raise ValueError(f"{kind} entry for {entry['ops']}: unknown dtypes {sorted(unknown)}")
    return [(op, d) for op in entry["ops"] for d in dtypes]


def parse(data: dict[str, Any]) -> Expectations:
    """Expectations from the YAML document (validated: reasons required)."""
    xfail: dict[tuple[str, str], tuple[str, str]] = {}
    for e in data.get("xfail") or []:
        for key in _expand(e, "xfail"):
            xfail[key] = (str(e["reason"]).strip(), str(e.get("match", "^wrong result")))
    tol: dict[tuple[str, str], tuple[float, float, str]] = {}
    for e in data.get("tolerance") or []:
        for key in _expand(e, "tolerance"):
            tol[key] = (float(e["atol"]), float(e["rtol"]), str(e["reason"]).strip())
    return Expectations(xfail, tol)


@functools.cache
def load(path: Path = PATH) -> Expectations:
    return parse(yaml.safe_load(path.read_text()) or {})
