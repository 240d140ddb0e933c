"""Checks of machine overrides (``--machine``, ``SPYRE_MACHINE``): every value a
number in range, files readable JSON/YAML objects. Each error is one line that
names the value and what is accepted. Imports no torch."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import yaml

__all__ = ["MachineSpecError", "checked", "read_file"]


class MachineSpecError(ValueError):
    """A machine override that is not accepted (unknown name, not a number, out
    of range, unreadable file); the message names the value and what is accepted."""


def checked(name: str, value: Any, *, integer: bool = False, zero_ok: bool = False) -> float | int:
    """``value`` (a number or its text) as a finite number, whole if ``integer``,
    > 0 (>= 0 if ``zero_ok``)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise MachineSpecError(f"{name}={value!r} is not accepted: expected a number")
    number: float | int
    try:
        number = int(value) if not isinstance(value, float) else value
    except ValueError:
        try:
            number = float(value)
        except ValueError:
            raise MachineSpecError(f"{name}={value!r} is not accepted: expected a number") from None
    if not math.isfinite(number):
        raise MachineSpecError(f"{name}={value} is not accepted: expected a finite number")
    if integer and number != int(number):
        raise MachineSpecError(f"{name}={value} is not accepted: expected a whole number")
    if number < 0 or (number == 0 and not zero_ok):
        raise MachineSpecError(f"{name}={value} is not accepted: expected a number {'>=' if zero_ok else '>'} 0")
    return int(number) if integer else float(number)


def read_file(spec: str) -> dict[str, Any]:
    """The overrides in a JSON/YAML file, as an object of name: value."""
    path = Path(spec)
    if path.suffix not in (".json", ".yaml", ".yml"):
        raise MachineSpecError(f"{spec!r} is not accepted: expected name=value pairs separated by commas "
                               "(e.g. cores=8,lx_kib=1024) or a .json/.yaml file")
    if not path.is_file():
        raise MachineSpecError(f"file {spec!r} is not accepted: it does not exist")
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise MachineSpecError(f"file {spec!r} is not accepted: cannot be read ({exc})") from None
    if path.suffix == ".json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise MachineSpecError(f"file {spec!r} is not accepted: not valid JSON (line {exc.lineno}, "
                                   f"column {exc.colno}: {exc.msg})") from None
    else:
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
            raise MachineSpecError(f"file {spec!r} is not accepted: not valid YAML ({where}"
                                   f"{getattr(exc, 'problem', None) or exc})") from None
    if not isinstance(data, dict):
        raise MachineSpecError(f"file {spec!r} is not accepted: expected an object of parameter: value, "
                               f"found {type(data).__name__}")
    return data
