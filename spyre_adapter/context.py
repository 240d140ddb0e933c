"""The emulated card a process runs on: the machine model, the card's LX state,
the device report and the cache of planned programs - one object, passed to
what plans and runs kernels (no module keeps machine state of its own)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import threading
from collections.abc import Iterator
from typing import Any

from spyre_shims import kernel_ir as kir

from .emulator.executor import Card
from .machine import Machine
from .model.program import Program
from .report import REPORT, DeviceReport

__all__ = ["DeviceContext", "current", "current_machine", "use_machine", "set_machine"]


class ProgramCache:
    """Programs by kernel signature (its Kernel IR without its name), machine and
    sizes: identical kernels - every layer of a model - are planned once."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._programs: dict[str, Program] = {}
        self.hits = 0
        self.misses = 0

    @staticmethod
    def key(kernel: Any, m: Machine, sizes: dict[Any, int], extra: str = "") -> str:
        doc = json.loads(kir.to_json(kernel))
        doc["name"] = ""
        h = hashlib.sha256(json.dumps(doc, sort_keys=True).encode())
        h.update(json.dumps(m.to_dict(), sort_keys=True).encode())
        h.update(json.dumps(sorted((str(k), v) for k, v in sizes.items())).encode())
        h.update(extra.encode())
        return h.hexdigest()

    def get(self, key: str) -> Program | None:
        with self._lock:
            p = self._programs.get(key)
            if p is None:
                self.misses += 1
            else:
                self.hits += 1
            return p

    def put(self, key: str, p: Program) -> None:
        with self._lock:
            self._programs[key] = p

    def clear(self) -> None:
        with self._lock:
            self._programs.clear()


class DeviceContext:
    """Everything about the emulated device one process uses."""

    def __init__(self, machine: Machine) -> None:
        self.machine = machine
        self.card = Card(machine)
        self.report: DeviceReport = REPORT
        self.programs = ProgramCache()

    def set_machine(self, m: Machine) -> None:
        """Plan and emulate on ``m`` from now on (a fresh card for it)."""
        if m != self.machine:
            self.machine = m
            self.card = Card(m)


_CONTEXT = DeviceContext(Machine.from_spec(os.environ.get("SPYRE_MACHINE")))


def current() -> DeviceContext:
    """The device context of this process."""
    return _CONTEXT


def current_machine() -> Machine:
    """The machine kernels are planned for and emulated on."""
    return _CONTEXT.machine


def set_machine(m: Machine) -> None:
    """Plan and emulate on ``m`` from now on."""
    _CONTEXT.set_machine(m)


@contextlib.contextmanager
def use_machine(m: Machine) -> Iterator[Machine]:
    """Plan and emulate on ``m`` inside the block (what-if studies)."""
    old_m, old_card = _CONTEXT.machine, _CONTEXT.card
    _CONTEXT.set_machine(m)
    try:
        yield m
    finally:
        _CONTEXT.machine, _CONTEXT.card = old_m, old_card
