"""A loaded Spyre kernel: its program per run-time sizes, executed on every
launch (the numbers come from running it), with the hardware checks on its
first launch and the timing simulated once per program (and per data-dependent
traffic), recorded to the device report."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, MutableMapping
from typing import Any, Protocol

import sympy
import torch

from ..machine import Machine
from ..model.program import DmaStore, Program, itemsize
from ..model.rules import EmulatorError
from ..model.timing import Timeline, simulate
from ..model.traffic import compulsory_bytes
from . import metrics
from .executor import Card, execute

__all__ = ["Executable", "Recorder", "Planner"]

#: Plans a kernel for run-time sizes: (kernel IR, machine, sizes) -> Program.
Planner = Callable[[Any, Machine, Mapping[sympy.Symbol, int]], Program]


class Recorder(Protocol):
    """Where launches are reported (the device report)."""

    def record(self, name: str, metrics: metrics.Metrics, timeline: Timeline, program: Program | None = None) -> None:
        ...


class _Derived:
    """What one program measured: its checks passed, its compulsory bytes and LX peak."""

    def __init__(self) -> None:
        self.checked = False
        self.compulsory: int | None = None
        self.lx_peak = 0
        self.timing: dict[tuple, tuple[Timeline, metrics.Metrics]] = {}


class Executable:
    """One kernel on the emulated card."""

    def __init__(self, kernel: Any, machine: Machine, planner: Planner, card: Card, recorder: Recorder,
                 program: Program | None = None) -> None:
        self.kernel = kernel
        self.machine = machine
        self._planner = planner
        self.card = card
        self.recorder = recorder
        self._programs: dict[tuple, Program] = {}
        self._derived: dict[int, _Derived] = {}
        self._lock = threading.Lock()
        if program is not None:
            self._programs[()] = program

    @property
    def name(self) -> str:
        return str(self.kernel.name)

    def _key(self, sizes: Mapping[sympy.Symbol, int] | None) -> tuple:
        return tuple(v for _, v in sorted((str(k), v) for k, v in (sizes or {}).items()))

    def program(self, sizes: Mapping[sympy.Symbol, int] | None = None) -> Program:
        """The program for these run-time sizes (planned on first use)."""
        key = self._key(sizes)
        with self._lock:
            p = self._programs.get(key) or self._programs.get(())
            if p is None:
                p = self._planner(self.kernel, self.machine, dict(sizes or {}))
                self._programs[key] = p
        return p

    def replace_program(self, program: Program) -> None:
        """Run ``program`` from now on (static sizes: the residency planner's version)."""
        with self._lock:
            self._programs = {(): program}

    def __call__(self, buffers: MutableMapping[str, torch.Tensor], sizes: Mapping[sympy.Symbol, int]) -> None:
        p = self.program(sizes)
        d = self._derived.setdefault(id(p), _Derived())
        first = not d.checked
        if d.compulsory is None:
            d.compulsory = self.compulsory(p, buffers, sizes)
        stats = execute(p, buffers, self.card, sizes, checking=first)
        if first:
            d.lx_peak = max(stats.lx_peak.values(), default=0)
            d.checked = True
        key = tuple(sorted(stats.dynamic_bytes.items()))
        got = d.timing.get(key)
        if got is None:
            tl = simulate(p, self.machine, stats.dynamic_bytes)
            got = (tl, metrics.compute(p, tl, self.machine, d.compulsory, d.lx_peak))
            d.timing[key] = got
        self.recorder.record(p.name, got[1], got[0], p)

    @staticmethod
    def compulsory(p: Program, buffers: Mapping[str, torch.Tensor], sizes: Mapping[sympy.Symbol, int]) -> int:
        """Compulsory DRAM bytes of the kernel, less what the program gets from or
        leaves in LX across kernels (those bytes never need DRAM)."""
        if p.kernel is None:
            return 0
        total = compulsory_bytes(p.kernel, buffers, sizes)
        for r in p.lx_in:
            total -= (r.hi - r.lo) * itemsize(r.dtype)
        written = {b.name for b in p.kernel.buffers if b.role in ("output", "inout")}
        stored = {(c.core, i.dst.buffer) for c in p.cores for i in c.instrs if isinstance(i, DmaStore)}
        for r in p.lx_out:  # a share kept in LX and never stored: its write is not DRAM traffic
            if r.buffer in written and (r.core, r.buffer) not in stored:
                total -= (r.hi - r.lo) * itemsize(r.dtype)
        return max(total, 0)

    def analyse(self, sizes: Mapping[sympy.Symbol, int] | None = None) -> tuple[Program, Timeline]:
        """The program and its simulated timeline without running it (planning studies)."""
        p = self.program(sizes)
        return p, simulate(p, self.machine)


__all__ += ["EmulatorError"]
