"""The Spyre backend: the stable API's :class:`~spyre_shims.backend.Backend`
implemented with the scheduler (programs), the emulator (executing them) and
the device context (machine, card, report)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import weakref
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import sympy

from spyre_shims import kernel_ir as kir
from spyre_shims.backend import Backend, DeviceProperties, FusionCandidate, Launch, default_can_fuse
from spyre_shims.errors import UnsupportedKernelError
from spyre_shims.jsonform import FormatError
from spyre_shims.ops import POINTWISE

from . import attention
from .context import DeviceContext, current, current_machine, set_machine, use_machine
from .emulator.executable import Executable, Planned
from .machine import Machine
from .model.program import Program
from .machine_spec import DoesNotFitError, MachineSpecError
from .model.rules import EmulatorError
from .scalars import scalar_instrs
from .scheduler.loops import plan_group
from .scheduler.lx_alloc import LxFull
from .scheduler.matmul import plan_matmul
from .scheduler.residency import plan_residency
from .scheduler.scan_program import is_scan, plan_scan
from .scheduler.scan_program import unsupported as scan_unsupported
from .scheduler.residency import summary as residency_summary

__all__ = ["SpyreBackend", "PayloadError", "read_payload", "PLANNERS", "plan", "current_machine", "use_machine", "set_machine",
           "UNSUPPORTED_OPS", "UNSUPPORTED_DTYPES", "plan_launch"]

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
#: dtypes the PE arrays multiply (16-bit floats natively, fp32 emulated).
PE_DTYPES = frozenset({"float16", "bfloat16", "float32"})

Planner = Callable[[Any, Machine, Mapping[sympy.Symbol, int]], Program]


def _plan_loops(kernel: kir.KernelGroup, m: Machine, sizes: Mapping[sympy.Symbol, int]) -> Program:
    return plan_group(kernel, m, sizes, kernel.name)


def _plan_matmul(kernel: kir.ExternKernel, m: Machine, sizes: Mapping[sympy.Symbol, int]) -> Program:
    return plan_matmul(kernel, m, sizes, kernel.name)


def _plan_scan(kernel: kir.KernelGroup, m: Machine, sizes: Mapping[sympy.Symbol, int]) -> Program:
    return plan_scan(kernel, m, sizes, kernel.name)


def _plan_attention(kernel: kir.ExternKernel, m: Machine, sizes: Mapping[sympy.Symbol, int]) -> Program:
    return attention.program_for(kernel, m, sizes)


#: Kernel kind -> planner. A kind is "loops" for a fused loop-kernel group, or
#: an extern kernel's op (``mm``... or a hand-written kernel's name).
PLANNERS: dict[str, Planner] = {
    "loops": _plan_loops,
    "mm": _plan_matmul, "bmm": _plan_matmul, "addmm": _plan_matmul, "baddbmm": _plan_matmul,
    "attention": _plan_attention,
    "scan": _plan_scan,
}


def is_symbolic(kernel: kir.Kernel) -> bool:
    """True when the kernel's sizes depend on run-time symbols: it can only be
    planned at a launch, which binds them. A recorded hand-written call
    declares no symbols, so its operands' layouts are looked at too."""
    return bool(kernel.symbols) or any(
        isinstance(e, sympy.Basic) and e.free_symbols
        for b in kernel.buffers for e in (*b.size, *b.stride, b.offset))


def kind_of(kernel: kir.Kernel) -> str:
    """The planner table's key for a kernel."""
    if isinstance(kernel, kir.KernelGroup):
        return "scan" if is_scan(kernel) else "loops"
    return kernel.op


def _plan(kernel: kir.Kernel, m: Machine, sizes: Mapping[sympy.Symbol, int]) -> tuple[Program, str | None]:
    """The program and, when it is the program cache's, its key."""
    kind = kind_of(kernel)
    planner = PLANNERS.get(kind)
    if planner is None:
        raise UnsupportedKernelError(f"kernel kind {kind}", kernel.name, "no Spyre planner")
    cache = current().programs
    key = cache.key(kernel, m, dict(sizes), kind)
    cached: str | None = key
    p = cache.get(key, kernel)
    if p is None:
        try:
            p = planner(kernel, m, sizes)
        except DoesNotFitError as exc:
            raise exc.in_kernel(kernel.name) from None
        except (LxFull, EmulatorError) as exc:
            raise DoesNotFitError(str(exc), f"lx_usable_bytes={m.lx_usable_bytes} per core", kernel.name) from None
        # A planner that completed the kernel (a captured call's output layout) is
        # not cached: a hit would bind the program to the incomplete kernel.
        if p.kernel is not None and p.kernel is not kernel:
            cached = None
        else:
            cache.put(key, p, kernel)
    return p if p.name == kernel.name else dataclasses.replace(p, name=kernel.name), cached


def plan(kernel: kir.Kernel, m: Machine, sizes: Mapping[sympy.Symbol, int]) -> Program:
    """The Spyre program for one kernel (cached by kernel signature, machine and sizes)."""
    return _plan(kernel, m, sizes)[0]


def plan_launch(kernel: kir.Kernel, m: Machine, sizes: Mapping[sympy.Symbol, int]) -> Planned:
    """:func:`plan`, with what a launch runs: the program as the cache holds it,
    shared by every kernel of the same structure at these sizes (see
    :class:`~spyre_adapter.emulator.executable.Planned`)."""
    p, key = _plan(kernel, m, sizes)
    got = current().programs.shared(key, kernel) if key is not None else None
    if got is None:
        return Planned(p)
    runs, names, state = got
    return Planned(p, runs, names, state)


def _check_supported(kernel: kir.Kernel) -> None:
    if isinstance(kernel, kir.ExternKernel):
        bad = [b.dtype for b in kernel.buffers if b.dtype in UNSUPPORTED_DTYPES]
        if bad:
            raise UnsupportedKernelError(f"dtype {bad[0]}", kernel.name, f"{kernel.op} in {bad[0]}")
        if kernel.op in ("mm", "bmm", "addmm", "baddbmm"):
            bad = [b.dtype for b in kernel.buffers if b.dtype not in PE_DTYPES]
            if bad:
                raise UnsupportedKernelError(f"dtype {bad[0]}", kernel.name, f"the PE arrays do not multiply {bad[0]}")
        return
    buffers = {b.name: b for b in kernel.buffers}
    if is_scan(kernel):
        why = scan_unsupported(kernel)
        if why is not None:
            raise UnsupportedKernelError("op scan", kernel.name, f"no Spyre scan program for {why}")
    for lk in kernel.kernels:
        # float64 launch parameters (Dynamo's unspecialized floats) are evaluated by
        # the host at launch and enter the card converted (see scalars.py).
        host_scalars = scalar_instrs(lk, buffers)
        for k, ins in enumerate(lk.body):
            if ins.op in UNSUPPORTED_OPS:
                raise UnsupportedKernelError(f"op {ins.op}", lk.name, "no Spyre vector/SFU implementation")
            if ins.dtype in UNSUPPORTED_DTYPES and not (ins.dtype == "float64" and k in host_scalars):
                raise UnsupportedKernelError(f"dtype {ins.dtype}", lk.name, f"{ins.op} computes in {ins.dtype}")


class PayloadError(FormatError):
    """A Spyre payload (the text :meth:`SpyreBackend.compile` embeds in generated
    code) that cannot be loaded; the message says what is wrong."""


def read_payload(payload: str) -> tuple[kir.Kernel, Machine]:
    """The kernel and machine of a payload, every field checked; nothing in it
    is evaluated. Raises :class:`PayloadError` (or the Kernel IR's
    :class:`~spyre_shims.jsonform.FormatError`) with one line naming the problem."""
    try:
        data = json.loads(payload)
    except (ValueError, TypeError, RecursionError) as exc:
        raise PayloadError(f"Spyre payload: not JSON ({type(exc).__name__}: {str(exc)[:80]})") from None
    if (not isinstance(data, dict) or set(data) != {"ir", "machine"} or not isinstance(data["ir"], str)
            or not isinstance(data["machine"], dict)):
        raise PayloadError("Spyre payload: expected an object {ir: Kernel IR text, machine: parameters}")
    kernel = kir.from_json(data["ir"])
    if not isinstance(kernel, (kir.KernelGroup, kir.ExternKernel)):
        raise PayloadError(f"Spyre payload: ir holds a {type(kernel).__name__}, not a kernel")
    try:
        machine = Machine().replace(**data["machine"])
    except MachineSpecError as exc:
        raise PayloadError(f"Spyre payload: machine: {exc}") from None
    return kernel, machine


class SpyreBackend(Backend):
    """Compiles Kernel IR into Spyre programs and runs them on the emulator."""

    device = "spyre"
    features = frozenset({"reduce_to_single_element", "scan", "tuple_reduction", "complex_as_real"})

    def __init__(self) -> None:
        self._loaded: weakref.WeakValueDictionary[str, Executable] = weakref.WeakValueDictionary()

    def compile(self, kernel: kir.Kernel) -> str:
        _check_supported(kernel)
        m = current_machine()
        if not kernel.symbols:
            # Planned now: a kernel no program fits falls back (visibly) at
            # compile time; on_graph records why (the CLI makes it an error).
            try:
                plan(kernel, m, {})
            except DoesNotFitError as exc:
                raise UnsupportedKernelError("no program fits the machine", kernel.name, str(exc)) from None
        return json.dumps({"ir": kir.to_json(kernel), "machine": m.to_dict()})

    def load(self, payload: str) -> Launch:
        kernel, m = read_payload(payload)
        ctx = current()
        exe = Executable(kernel, m, plan_launch, ctx.card, ctx.report)
        self._loaded[exe.name] = exe
        return exe

    def can_fuse(self, first: FusionCandidate, second: FusionCandidate, vertical: bool) -> bool:
        return default_can_fuse(first, second, vertical)

    def properties(self) -> DeviceProperties:
        m = current_machine()
        return DeviceProperties(name="IBM Spyre (emulated)", cores=m.cores, memory_bytes=m.dram_bytes)

    def on_graph(self, graph: kir.GraphIR) -> None:
        """Record the graph and plan LX residency across its kernels."""
        ctx = current()
        ctx.report.add_graph(graph)
        exes = [self._loaded.get(k.name) for k in graph.kernels]
        self._record_limits(graph, exes, ctx)
        programs = [e.program() if e is not None and not is_symbolic(e.kernel) else None for e in exes]
        outputs = set(graph.outputs)
        reads = [{b.name for b in k.inputs} if isinstance(k, kir.ExternKernel)
                 else {b.name for b in k.buffers if b.role in ("input", "inout")} for k in graph.kernels]
        writes = [{k.output.name} if isinstance(k, kir.ExternKernel)
                  else {b.name for b in k.buffers if b.role in ("output", "inout")} for k in graph.kernels]
        new, decisions = plan_residency(programs, outputs, ctx.machine, reads, writes, ctx.programs)
        for e, before, after in zip(exes, programs, new):
            if e is not None and before is not None and after is not before:
                e.replace_program(after)
        ctx.report.add_residency(graph.name, residency_summary(decisions))

    @staticmethod
    def _record_limits(graph: kir.GraphIR, exes: list[Executable | None], ctx: DeviceContext) -> None:
        """Record each kernel of ``graph`` that runs on the host because no program
        fits the machine. Derived here from the kernels themselves, not from
        :meth:`compile`: a graph taken from Inductor's cache never calls compile.
        A kernel with symbolic sizes is skipped: no program exists before a
        launch binds its sizes, and the launch records a limit it hits."""
        for k, exe in zip(graph.kernels, exes):
            if exe is not None or is_symbolic(k):
                continue
            try:
                _check_supported(k)
                plan(k, ctx.machine, {})
            except DoesNotFitError as exc:
                ctx.report.record_limit(exc)
            except UnsupportedKernelError:
                continue  # falls back for another reason, already announced

    def cache_key(self) -> str:
        h = hashlib.sha256()
        for path in sorted(Path(__file__).parent.rglob("*.py")):
            h.update(path.read_bytes())
        h.update(json.dumps(current_machine().to_dict(), sort_keys=True).encode())
        return h.hexdigest()[:16]

    def ref(self) -> str:
        return "spyre_adapter.backend:SpyreBackend"
