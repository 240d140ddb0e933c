"""The emulated card a process runs on: the machine model, the card's LX state,
the device report and the cache of planned programs - one object, passed to
what plans and runs kernels (no module keeps machine state of its own)."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import json
import os
import threading
from collections.abc import Iterator
from typing import Any

from spyre_shims import kernel_ir as kir

from spyre_adapter.backend.report import REPORT, DeviceReport
from spyre_adapter.emulator.executor import Card
from spyre_adapter.model.isa import with_buffers
from spyre_adapter.model.machine import Machine
from spyre_adapter.model.program import Program
from spyre_adapter.model.structure import buffer_names, structure_text

__all__ = ["DeviceContext", "current", "current_machine", "use_machine", "set_machine"]


@functools.lru_cache(maxsize=64)
def _machine_text(m: Machine) -> bytes:
    """A machine's parameters as canonical JSON (asked once per launch at new sizes)."""
    return json.dumps(m.to_dict(), sort_keys=True).encode()


class ProgramCache:
    """Programs by kernel *structure*: the Kernel IR with buffer and kernel names
    made positional, the machine and the sizes. Identical kernels - every layer of
    a model - are planned once; a hit is the cached program with the new kernel's
    buffer names. Each entry also holds the launch state its kernels share (see
    :meth:`shared`)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._programs: dict[str, tuple[Program, tuple[str, ...], dict[Any, Any]]] = {}
        self.hits = 0
        self.misses = 0

    @classmethod
    def key(cls, kernel: Any, m: Machine, sizes: dict[Any, int], extra: str = "") -> str:
        h = hashlib.sha256(structure_text(kernel))
        h.update(_machine_text(m))
        h.update(json.dumps(sorted((str(k), v) for k, v in sizes.items())).encode())
        h.update(extra.encode())
        return h.hexdigest()

    def get(self, key: str, kernel: Any) -> Program | None:
        """The program cached under ``key``, for ``kernel`` (its names)."""
        with self._lock:
            got = self._programs.get(key)
            if got is None:
                self.misses += 1
                return None
            self.hits += 1
        p, names, _ = got
        mine = buffer_names(kernel)
        if names == mine:
            return p if p.kernel is kernel else dataclasses.replace(p, kernel=kernel)
        bodies = p.bodies
        if isinstance(kernel, kir.KernelGroup):
            bodies = tuple(kernel.kernels) + p.bodies[len(kernel.kernels):]
        return with_buffers(p, dict(zip(names, mine)), kernel, bodies)

    def shared(self, key: str, kernel: Any) -> tuple[Program, dict[str, str], dict[Any, Any]] | None:
        """The program cached under ``key`` as it was planned (its first kernel's
        buffer names), each of those names -> ``kernel``'s, and the entry's shared
        state: a launch of ``kernel`` can run that program on its buffers renamed,
        and share with every identical kernel what depends on the program alone
        (its checks, its recorded steps, its timing)."""
        with self._lock:
            got = self._programs.get(key)
        if got is None:
            return None
        p, names, state = got
        return p, dict(zip(names, buffer_names(kernel))), state

    def put(self, key: str, p: Program, kernel: Any) -> None:
        with self._lock:
            self._programs[key] = (p, buffer_names(kernel), {})

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
