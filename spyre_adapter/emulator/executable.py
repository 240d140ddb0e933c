"""A loaded Spyre program: checks once, simulates time once, computes numerics
on every launch, and reports each launch to the device report."""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping, MutableMapping
from typing import Any

import sympy
import torch

from spyre_shims import kernel_ir as kir

from ..machine import Machine
from ..program import Program, program_from_json
from ..report import REPORT
from . import checks, metrics, numerics, timing


class Executable:
    """What :meth:`SpyreBackend.load` returns for one kernel."""

    def __init__(self, payload: str, planner: Any) -> None:
        data = json.loads(payload)
        self.machine = Machine(**data["machine"])
        self.kernel = kir.from_json(data["ir"])
        self._planner = planner
        self._programs: dict[tuple[int, ...], Program] = {}
        self._derived: dict[tuple[int, ...], tuple[timing.Timeline, metrics.Metrics]] = {}
        self._lock = threading.Lock()
        #: extra LX bytes per core held by earlier kernels (graph residency plan)
        self.resident: dict[int, int] = {}
        if data.get("program"):
            self._programs[()] = program_from_json(data["program"])

    @property
    def name(self) -> str:
        return self.kernel.name

    def program(self, sizes: Mapping[sympy.Symbol, int] | None = None) -> Program:
        """The program for these run-time sizes (planned on first use)."""
        key = tuple(sorted((str(k), v) for k, v in (sizes or {}).items()))
        key = tuple(v for _, v in key)
        with self._lock:
            p = self._programs.get(key) or self._programs.get(())
            if p is None:
                p = self._planner(self.kernel, self.machine, dict(sizes or {}))
                self._programs[key] = p
        return p

    def replace_program(self, program: Program) -> None:
        """Use ``program`` from now on (static sizes only)."""
        with self._lock:
            self._programs[()] = program
            self._derived.clear()

    def invalidate(self) -> None:
        """Forget derived figures (after the residency planner changed the program)."""
        self._derived.clear()

    def analyse(self, sizes: Mapping[sympy.Symbol, int] | None = None) -> tuple[Program, timing.Timeline, metrics.Metrics]:
        """Check, simulate and measure the program (cached per sizes)."""
        p = self.program(sizes)
        key = tuple(sorted(p.sizes.values()))
        got = self._derived.get(key)
        if got is None:
            checks.check_program(p, self.machine, sizes or {}, self.resident)
            tl = timing.simulate(p, self.machine)
            got = (tl, metrics.compute(p, tl, self.machine))
            self._derived[key] = got
        return p, got[0], got[1]

    def __call__(self, buffers: MutableMapping[str, torch.Tensor], sizes: Mapping[sympy.Symbol, int]) -> None:
        p, tl, m = self.analyse(sizes)
        numerics.run(p, buffers, sizes)
        REPORT.record(self.name, m, tl)
