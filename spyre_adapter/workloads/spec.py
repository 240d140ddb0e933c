"""The workload file format (``shared/workloads/template.yaml``): a model name,
file-wide defaults (dtype, seed, atol, rtol; ``defaults:`` or ``default:``) and
cases, each an op name, inputs, keyword arguments (``kwmap``/``attrs``), a
description and marks. Loading only reads; building happens in ``builders``."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import yaml


@dataclasses.dataclass(frozen=True)
class Defaults:
    dtype: str = "fp16"
    seed: int = 0
    atol: float = 5e-3
    rtol: float = 5e-3


@dataclasses.dataclass(frozen=True)
class CaseSpec:
    """One case as written in the file (inputs still raw)."""

    name: str
    op: str
    inputs: tuple[dict[str, Any], ...]
    kwargs: dict[str, Any]
    index: int
    description: str = ""
    marks: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class WorkloadFile:
    path: Path
    model: str
    defaults: Defaults
    cases: tuple[CaseSpec, ...]


#: libyaml's loader when PyYAML was built with it (~10x faster on the real files).
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load(path: str | Path) -> WorkloadFile:
    """Parse one workload file. Raises ValueError (one line: the file and what is
    wrong) when the file itself is unusable (unreadable, not YAML, no case list);
    a malformed *case* is kept and reported when built."""
    path = Path(path)
    try:
        doc = yaml.load(path.read_text(), Loader=_LOADER)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        raise ValueError(f"{path}: not valid YAML{where}: {getattr(exc, 'problem', None) or exc}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path}: cannot be read ({exc})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("cases"), list):
        raise ValueError(f"{path}: not a workload file (needs a 'cases' list)")
    raw = doc.get("defaults", doc.get("default")) or {}
    try:
        defaults = Defaults(dtype=str(raw.get("dtype", Defaults.dtype)), seed=int(raw.get("seed", Defaults.seed)),
                            atol=float(raw.get("atol", Defaults.atol)), rtol=float(raw.get("rtol", Defaults.rtol)))
    except (AttributeError, TypeError, ValueError) as exc:
        raise ValueError(f"{path}: defaults: {exc}") from None
    cases = [_case(c, i) for i, c in enumerate(doc["cases"])]
    return WorkloadFile(path, str(doc.get("model", path.stem)), defaults, tuple(cases))


def _case(c: Any, index: int) -> CaseSpec:
    if not isinstance(c, dict):
        return CaseSpec(f"case[{index}]", "", (), {}, index, description=f"not a mapping: {c!r}")
    marks = c.get("marks") or ()
    kwargs = {**(c.get("attrs") or {}), **(c.get("kwmap") or {})}
    inputs = c.get("inputs") or ()
    return CaseSpec(name=str(c.get("name", f"case[{index}]")), op=str(c.get("op", "")),
                    inputs=tuple(inputs) if isinstance(inputs, list) else (inputs,), kwargs=kwargs, index=index,
                    description=str(c.get("description", "")).strip(),
                    marks=(marks,) if isinstance(marks, str) else tuple(marks))
