"""The Spyre backend: the stable API's :class:`~spyre_shims.backend.Backend`
implemented with the scheduler, the program format and the emulator."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import weakref
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import sympy

from spyre_shims import kernel_ir as kir
from spyre_shims.backend import Backend, DeviceProperties, FusionCandidate, Launch, default_can_fuse
from spyre_shims.errors import UnsupportedKernelError
from spyre_shims.ops import POINTWISE

from .emulator.executable import Executable
from .machine import Machine
from .program import Program, program_to_json
from .report import REPORT
from .scalars import scalar_instrs
from .scheduler.loops import plan_group
from .scheduler.matmul import plan_matmul
from .scheduler.residency import plan_residency
from .scheduler.residency import summary as residency_summary

#: Pointwise ops without a Spyre vector/SFU implementation: kernels using them
#: run on the host reference evaluator (with a fallback warning).
UNSUPPORTED_OPS = frozenset({
    n for n in POINTWISE if n.startswith(("bessel_", "modified_bessel_", "scaled_modified_bessel_",
                                           "spherical_bessel_", "chebyshev_", "shifted_chebyshev_",
                                           "hermite_", "laguerre_", "legendre_"))
} | {"airy_ai", "zeta", "igamma", "igammac", "gammainc", "gammaincc", "erfcx", "i0", "i0e", "i1", "i1e",
     "ndtri", "log_ndtr", "polygamma", "digamma", "lgamma", "nextafter"})
#: dtypes the card computes in (no 64-bit floating point, no complex).
UNSUPPORTED_DTYPES = frozenset({"float64", "complex64", "complex128"})

_machine = Machine.from_spec(os.environ.get("SPYRE_MACHINE"))


def current_machine() -> Machine:
    """The machine kernels are planned for and emulated on."""
    return _machine


@contextlib.contextmanager
def use_machine(m: Machine) -> Iterator[Machine]:
    """Plan and emulate on ``m`` inside the block (what-if studies)."""
    global _machine
    old, _machine = _machine, m
    try:
        yield m
    finally:
        _machine = old


def set_machine(m: Machine) -> None:
    """Plan and emulate on ``m`` from now on."""
    global _machine
    _machine = m


def plan(kernel: kir.Kernel, m: Machine, sizes: Mapping[sympy.Symbol, int]) -> Program:
    """The Spyre program for one kernel."""
    if isinstance(kernel, kir.ExternKernel):
        if kernel.op == "attention":  # the hand-written kernel's own program
            from .attention import program_for

            return program_for(kernel, m)
        return plan_matmul(kernel, m, sizes, kernel.name)
    return plan_group(kernel, m, sizes, kernel.name)


#: A kernel the residency planner cannot see into (a hand-written kernel, a
#: program planned at run time): nothing stays in LX across it.
_BREAK = Program("opaque", "opaque", None, [], {}, {})


def _check_supported(kernel: kir.Kernel) -> None:
    if isinstance(kernel, kir.ExternKernel):
        bad = [b.dtype for b in kernel.buffers if b.dtype in UNSUPPORTED_DTYPES]
        if bad:
            raise UnsupportedKernelError(f"dtype {bad[0]}", kernel.name, f"{kernel.op} in {bad[0]}")
        return
    buffers = {b.name: b for b in kernel.buffers}
    for lk in kernel.kernels:
        # float64 launch parameters (Dynamo's unspecialized floats) are evaluated by
        # the host at launch and enter the card converted (see scalars.py).
        host_scalars = scalar_instrs(lk, buffers)
        for k, ins in enumerate(lk.body):
            if ins.op in UNSUPPORTED_OPS:
                raise UnsupportedKernelError(f"op {ins.op}", lk.name, "no Spyre vector/SFU implementation")
            if ins.dtype in UNSUPPORTED_DTYPES and not (ins.dtype == "float64" and k in host_scalars):
                raise UnsupportedKernelError(f"dtype {ins.dtype}", lk.name, f"{ins.op} computes in {ins.dtype}")


class SpyreBackend(Backend):
    """Compiles Kernel IR into Spyre programs and runs them on the emulator."""

    device = "spyre"
    features = frozenset({"reduce_to_single_element"})

    def compile(self, kernel: kir.Kernel) -> str:
        _check_supported(kernel)
        m = current_machine()
        program = None if kernel.symbols else program_to_json(plan(kernel, m, {}))
        return json.dumps({"ir": kir.to_json(kernel), "program": program, "machine": m.to_dict()})

    def __init__(self) -> None:
        self._loaded: weakref.WeakValueDictionary[str, Executable] = weakref.WeakValueDictionary()

    def load(self, payload: str) -> Launch:
        exe = Executable(payload, plan)
        self._loaded[exe.name] = exe
        return exe

    def can_fuse(self, first: FusionCandidate, second: FusionCandidate, vertical: bool) -> bool:
        return default_can_fuse(first, second, vertical)

    def properties(self) -> DeviceProperties:
        m = current_machine()
        return DeviceProperties(name="IBM Spyre (emulated)", cores=m.cores, memory_bytes=m.dram_bytes)

    def on_graph(self, graph: kir.GraphIR) -> None:
        """Record the graph and plan LX residency across its kernels."""
        REPORT.add_graph(graph)
        exes = [self._loaded.get(k.name) for k in graph.kernels]
        programs = [e.program() if e is not None and not e.kernel.symbols else None for e in exes]
        chain = [p if p is not None else _BREAK for p in programs]
        outputs = set(dict(graph.meta).get("outputs", ()))
        # Every kernel's reads, also those of kernels the planner cannot see into:
        # a store they depend on must not be elided.
        reads = [{b.name for b in k.inputs} if isinstance(k, kir.ExternKernel)
                 else {b.name for b in k.buffers if b.role in ("input", "inout")} for k in graph.kernels]
        decisions = plan_residency(chain, outputs, current_machine(), reads)
        for e, before, after in zip(exes, programs, chain):
            if e is not None:
                if before is not None and after is not before:
                    e.replace_program(after)  # re-divided to line up with its producer
                e.invalidate()
        REPORT.add_residency(graph.name, residency_summary(decisions))

    def cache_key(self) -> str:
        h = hashlib.sha256()
        for path in sorted(Path(__file__).parent.rglob("*.py")):
            h.update(path.read_bytes())
        h.update(json.dumps(current_machine().to_dict(), sort_keys=True).encode())
        return h.hexdigest()[:16]

    def ref(self) -> str:
        return "spyre_adapter.backend:SpyreBackend"
