"""The Spyre backend: the stable API's :class:`~spyre_shims.backend.Backend`
implemented with the scheduler (programs, by kernel kind), the emulator
(executing them) and the session (machine, card, report, program cache).

One compile path: :meth:`SpyreBackend.compile` plans a kernel of static sizes
once (a kernel no program fits falls back, visibly) and :meth:`SpyreBackend.load`
keeps that plan for its launches; a kernel of run-time sizes is planned at its
launches. :meth:`SpyreBackend.on_graph` plans LX residency over the programs
already planned, and plans only what compile never saw (a graph from Inductor's
cache) or a machine it did not plan for.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import weakref
from collections.abc import Callable, Mapping
from pathlib import Path

import sympy

from spyre_shims import kernel_ir as kir
from spyre_shims.backend import Backend, DeviceProperties, FusionCandidate, Launch, default_can_fuse
from spyre_shims.compat import config as inductor_config
from spyre_shims.errors import UnsupportedKernelError
from spyre_shims.jsonform import FormatError

from spyre_adapter.backend.session import Session, current, current_machine, set_machine, use_machine
from spyre_adapter.emulator import Executable, Planned
from spyre_adapter.model.errors import DoesNotFit, EmulatorError
from spyre_adapter.model.host_threads import host_threads
from spyre_adapter.model.kinds import KernelKind, kind_of
from spyre_adapter.model.machine import Machine
from spyre_adapter.model.machine_spec import MachineSpecError
from spyre_adapter.model.program import Program
from spyre_adapter.model.structure import structure_digest
from spyre_adapter.scheduler import kinds as _builtin_kinds  # noqa: F401 - registers the built-in kinds
from spyre_adapter.scheduler.collectives import COLLECTIVE_OPS
from spyre_adapter.scheduler.residency import plan_residency
from spyre_adapter.scheduler.residency import summary as residency_summary
from spyre_adapter.scheduler.search import autotuning, max_autotune
from spyre_adapter.scheduler.size_buckets import size_bucket
from spyre_adapter.scheduler.size_templates import SizeTemplate

__all__ = ["SpyreBackend", "PayloadError", "read_payload", "plan", "plan_launch", "supported_kind", "is_symbolic",
           "current_machine", "use_machine", "set_machine"]


def is_symbolic(kernel: kir.Kernel) -> bool:
    """True when the kernel's sizes depend on run-time symbols: it can only be
    planned at a launch, which binds them. A recorded hand-written call
    declares no symbols, so its operands' layouts are looked at too."""
    return bool(kernel.symbols) or any(
        isinstance(e, sympy.Basic) and e.free_symbols
        for b in kernel.buffers for e in (*b.size, *b.stride, b.offset))


def supported_kind(kernel: kir.Kernel) -> KernelKind:
    """The kind of ``kernel``, which the card can run; else
    :class:`~spyre_shims.errors.UnsupportedKernelError` naming what it cannot."""
    kind = kind_of(kernel)
    if kind is None:
        what = f"kernel kind {getattr(kernel, 'op', type(kernel).__name__)}"
        raise UnsupportedKernelError(what, kernel.name, "no Spyre planner")
    reason = kind.unsupported(kernel)
    if reason is not None:
        raise UnsupportedKernelError(*reason)
    return kind


def _plan(kernel: kir.Kernel, m: Machine, sizes: Mapping[sympy.Symbol, int],
          kind: KernelKind | None = None, key: str | None = None) -> tuple[Program, str | None]:
    """The program and, when it is the program cache's, its key (``kind`` and
    ``key``: already found by the caller)."""
    kind = kind or supported_kind(kernel)
    cache = current().programs
    extra = _extra(kind)
    key = key or cache.key(kernel, m, dict(sizes), extra)
    cached: str | None = key
    p = cache.get(key, kernel)
    if p is None:
        at = _template_key(kernel, kind, m, sizes, extra)
        bound = _bound(at) or _carried(kernel, kind, m, extra, at)
        if bound is not None:
            # (stored under the names of the kernel the template was made for; the hit renames)
            q, tkey, t = bound
            cache.put(key, q, q.kernel)
            cache.bound += 1
            cache.bound_from[key] = (tkey, t)
            got = cache.get(key, kernel)
            assert got is not None
            p = got
        else:
            p = _planned(kernel, kind, m, sizes)
            if p.kernel is not None and p.kernel is not kernel:
                # A planner that completed the kernel (a captured call's output layout) is
                # not cached: a hit would bind the program to the incomplete kernel.
                cached = None
            else:
                cache.put(key, p, kernel)
                if at is not None:
                    _template(kernel, kind, m, extra, at, p)
    return p if p.name == kernel.name else dataclasses.replace(p, name=kernel.name), cached


def _extra(kind: KernelKind) -> str:
    """What besides structure, machine and sizes keys a program: its kind and the search asked for."""
    return kind.name + (" max-autotune" if autotuning() else "")


def _planned(kernel: kir.Kernel, kind: KernelKind, m: Machine, sizes: Mapping[sympy.Symbol, int]) -> Program:
    """What ``kind``'s planner makes of ``kernel`` at these sizes (counted in the program cache)."""
    current().programs.planned += 1
    try:
        with host_threads():
            return kind.plan(kernel, m, sizes)
    except DoesNotFit as exc:
        raise exc.in_kernel(kernel.name) from None
    except EmulatorError as exc:
        raise DoesNotFit(f"its program breaks a hardware rule ({exc})", "", kernel.name) from None


def _template_key(kernel: kir.Kernel, kind: KernelKind, m: Machine, sizes: Mapping[sympy.Symbol, int],
                  extra: str) -> tuple[sympy.Symbol, int, int, str] | None:
    """(symbol, size, bucket top, templates key) of a launch whose program a size
    template can give: one run-time size, a kind with reference semantics (a
    bound program's first launch is compared with them); else None."""
    if len(sizes) != 1 or not kind.reference:
        return None
    (sym, size), = sizes.items()
    top = size_bucket({sym: size})[sym]
    return sym, int(size), top, current().programs.key(kernel, m, {sym: top}, extra + " template")


def _bound(at: tuple[sympy.Symbol, int, int, str] | None) -> tuple[Program, str, SizeTemplate] | None:
    """The program at the size of ``at`` (see :func:`_template_key`) bound from a
    size template (it names the buffers of the kernel the template was made for),
    the templates key and the template; None when no template covers it."""
    if at is None:
        return None
    _, size, _, tkey = at
    t = current().programs.templates.find(tkey, size)
    if t is None:
        return None
    return t.bind(size), tkey, t


def _carried(kernel: kir.Kernel, kind: KernelKind, m: Machine, extra: str,
             at: tuple[sympy.Symbol, int, int, str] | None) -> tuple[Program, str, SizeTemplate] | None:
    """At the first size of a bucket, the program bound from the bucket below's
    template carried on over this bucket (see :meth:`SizeTemplates.extend`)."""
    if at is None:
        return None
    sym, size, top, tkey = at
    cache = current().programs
    below = cache.key(kernel, m, {sym: top // 2}, extra + " template")
    try:
        t = cache.templates.extend(tkey, below, size, top, _plan_at(kernel, kind, m, extra, sym))
    except DoesNotFit:
        return None
    if t is None or t.first.kernel is not kernel:
        return None
    return t.bind(size), tkey, t


def _plan_at(kernel: kir.Kernel, kind: KernelKind, m: Machine, extra: str,
             sym: sympy.Symbol) -> Callable[[int], Program]:
    """Plans (or finds in the cache) ``kernel``'s program at one value of ``sym``."""
    cache = current().programs

    def plan_at(v: int) -> Program:
        key = cache.key(kernel, m, {sym: v}, extra)
        got = cache.get(key, kernel)
        if got is None:
            got = _planned(kernel, kind, m, {sym: v})
            if got.kernel is not kernel:
                raise DoesNotFit("its planner completed the kernel")
            cache.put(key, got, kernel)
        return got
    return plan_at


def _template(kernel: kir.Kernel, kind: KernelKind, m: Machine, extra: str,
              at: tuple[sympy.Symbol, int, int, str], p: Program) -> None:
    """After planning ``p`` at the size of ``at`` (no template covers it): try one
    over the rest of its bucket (the programs it plans are cached: a decode's next
    token is the next size)."""
    sym, size, top, tkey = at
    cache = current().programs

    def cached_at(v: int) -> Program | None:  # (a look-up, not a miss of the cache)
        got = cache.shared(cache.key(kernel, m, {sym: v}, extra), kernel)
        return got.program if got is not None and got.program.kernel is kernel else None

    try:
        cache.templates.make(tkey, size, top, p, _plan_at(kernel, kind, m, extra, sym), cached_at)
    except DoesNotFit:
        return  # a size of the range has no program: no template; each size is planned


def plan(kernel: kir.Kernel, m: Machine, sizes: Mapping[sympy.Symbol, int]) -> Program:
    """The Spyre program for one kernel (cached by kernel structure, machine and sizes)."""
    return _plan(kernel, m, sizes)[0]


def plan_launch(kernel: kir.Kernel, m: Machine, sizes: Mapping[sympy.Symbol, int]) -> Planned:
    """:func:`plan`, with what a launch runs: the program as the cache holds it,
    shared by every kernel of the same structure at these sizes (see
    :class:`~spyre_adapter.emulator.executable.Planned`). A program bound from a
    size template carries how to withdraw it should its first launch compute
    other numbers than the reference semantics."""
    cache = current().programs
    kind = supported_kind(kernel)
    key = cache.key(kernel, m, dict(sizes), _extra(kind))
    got = cache.shared(key, kernel)
    if got is not None and got.program.kernel is not kernel:
        # Planned for another kernel of this structure (an earlier layer): it runs
        # as planned; this kernel's own copy under its names is made only if asked for.
        cache.hits += 1
        name = kernel.name

        def own() -> Program:
            p = got.for_kernel(kernel)
            return p if p.name == name else dataclasses.replace(p, name=name)
        return Planned(own, got.program, got.names, got.state, got.symbols, bound=_withdrawal(key), name=name)
    p, cached = _plan(kernel, m, sizes, kind, key)
    got = cache.shared(cached, kernel) if cached is not None else None
    withdraw = _withdrawal(cached) if cached is not None else None
    if got is None:
        return Planned(p, bound=withdraw)
    return Planned(p, got.program, got.names, got.state, got.symbols, bound=withdraw)


def _withdrawal(key: str) -> Callable[[], None] | None:
    """For a program bound from a size template (cached under ``key``): forget it
    and the template (None for any other program)."""
    cache = current().programs
    got = cache.bound_from.get(key)
    if got is None:
        return None
    tkey, t = got

    def withdraw() -> None:
        cache.templates.withdraw(tkey, t)
        cache.drop(key)
    return withdraw


class PayloadError(FormatError):
    """A Spyre payload (the text :meth:`SpyreBackend.compile` embeds in generated
    code) that cannot be loaded; the message says what is wrong."""


def read_payload(payload: str) -> tuple[kir.Kernel, Machine]:
    """The kernel and machine of a payload, every field checked; nothing in it
    is evaluated. Raises :class:`PayloadError` (or the Kernel IR's
    :class:`~spyre_shims.jsonform.FormatError`) with one line naming the problem."""
    kernel, machine, _ = _read_payload(payload)
    return kernel, machine


def _read_payload(payload: str) -> tuple[kir.Kernel, Machine, bool]:
    """:func:`read_payload`, and whether its kernel was compiled with max-autotune
    (an optional ``autotune: true``; see :mod:`spyre_adapter.scheduler.search`)."""
    try:
        data = json.loads(payload)
    except (ValueError, TypeError, RecursionError) as exc:
        raise PayloadError(f"Spyre payload: not JSON ({type(exc).__name__}: {str(exc)[:80]})") from None
    if (not isinstance(data, dict) or not {"ir", "machine"} <= set(data) <= {"ir", "machine", "autotune"}
            or not isinstance(data["ir"], str) or not isinstance(data["machine"], dict)
            or not isinstance(data.get("autotune", False), bool)):
        raise PayloadError("Spyre payload: expected an object {ir: Kernel IR text, machine: parameters"
                           "[, autotune: true or false]}")
    kernel = kir.from_json(data["ir"])
    if not isinstance(kernel, (kir.KernelGroup, kir.ExternKernel)):
        raise PayloadError(f"Spyre payload: ir holds a {type(kernel).__name__}, not a kernel")
    try:
        machine = Machine().replace(**data["machine"])
    except MachineSpecError as exc:
        raise PayloadError(f"Spyre payload: machine: {exc}") from None
    return kernel, machine, bool(data.get("autotune", False))


def _tuned_launch(kernel: kir.Kernel, m: Machine, sizes: Mapping[sympy.Symbol, int]) -> Planned:
    """:func:`plan_launch` with max-autotune: a kernel compiled with it is planned so at its launches too."""
    with max_autotune():
        return plan_launch(kernel, m, sizes)


class SpyreBackend(Backend):
    """Compiles Kernel IR into Spyre programs and runs them on the emulator."""

    device = "spyre"
    features = frozenset({"reduce_to_single_element", "scan", "tuple_reduction", "complex_as_real"})
    collective_ops = COLLECTIVE_OPS

    def __init__(self) -> None:
        self._loaded: weakref.WeakValueDictionary[str, Executable] = weakref.WeakValueDictionary()
        #: what compile planned, for load to keep: kernel name -> (structure, machine, plan or misfit)
        self._compiled: dict[str, tuple[bytes, Machine, Planned | DoesNotFit]] = {}

    def compile(self, kernel: kir.Kernel) -> str:
        with current().report.host_time("compile"):
            return self._compile(kernel)

    def _compile(self, kernel: kir.Kernel) -> str:
        supported_kind(kernel)
        m = current_machine()
        # Inductor's max_autotune (torch.compile's mode="max-autotune") is a request
        # for the planner's longer search too.
        tuned = autotuning() or bool(getattr(inductor_config.inductor, "max_autotune", False))
        if not is_symbolic(kernel):
            # Planned now, once: a kernel no program fits falls back (visibly) at
            # compile time; on_graph records why (the CLI makes it an error).
            try:
                with max_autotune(tuned):
                    self._compiled[kernel.name] = (structure_digest(kernel), m, plan_launch(kernel, m, {}))
            except DoesNotFit as exc:
                self._compiled[kernel.name] = (structure_digest(kernel), m, exc)
                raise UnsupportedKernelError("no program fits the machine", kernel.name, str(exc)) from None
        payload = {"ir": kir.to_json(kernel), "machine": m.to_dict()}
        return json.dumps(payload | {"autotune": True} if tuned else payload)

    def _kept(self, kernel: kir.Kernel, m: Machine) -> Planned | DoesNotFit | None:
        """What compile planned for ``kernel`` on ``m`` (None: it did not)."""
        got = self._compiled.get(kernel.name)
        if got is None or got[1] != m or got[0] != structure_digest(kernel):
            return None
        return got[2]

    def load(self, payload: str) -> Launch:
        kernel, m, tuned = _read_payload(payload)
        exe = Executable(kernel, supported_kind(kernel), _tuned_launch if tuned else plan_launch, current)
        kept = self._kept(kernel, m)
        if isinstance(kept, Planned):
            exe.keep(m, kept)
            del self._compiled[kernel.name]
        self._loaded[exe.name] = exe
        return exe

    def executables(self) -> dict[str, Executable]:
        """The kernels loaded so far, by name (the latest of each name)."""
        return dict(self._loaded)

    def can_fuse(self, first: FusionCandidate, second: FusionCandidate, vertical: bool) -> bool:
        return default_can_fuse(first, second, vertical)

    def properties(self) -> DeviceProperties:
        m = current_machine()
        return DeviceProperties(name="IBM Spyre (emulated)", cores=m.cores, memory_bytes=m.dram_bytes)

    def on_graph(self, graph: kir.GraphIR) -> None:
        """Record the graph and plan LX residency across its kernels."""
        session = current()
        with session.report.host_time("graph"):
            self._on_graph(graph, session)

    def _on_graph(self, graph: kir.GraphIR, session: Session) -> None:
        session.report.add_graph(graph)
        exes = [self._loaded.get(k.name) for k in graph.kernels]
        self._record_limits(graph, exes, session)
        # (kernels of run-time sizes are planned at their launches; residency is for static ones)
        programs = [e.program(session.machine) if e is not None and not is_symbolic(e.kernel) else None
                    for e in exes]
        if dict(graph.meta).get("calls_subgraphs"):
            # Its subgraphs' kernels run between its own (a nested compile region is
            # called once per layer): nothing can be planned to stay in LX across them.
            session.report.add_residency(graph.name, residency_summary([]))
            return
        outputs = set(graph.outputs)
        reads = [{b.name for b in k.inputs} if isinstance(k, kir.ExternKernel)
                 else {b.name for b in k.buffers if b.role in ("input", "inout")} for k in graph.kernels]
        writes = [{k.output.name} if isinstance(k, kir.ExternKernel)
                  else {b.name for b in k.buffers if b.role in ("output", "inout")} for k in graph.kernels]
        with host_threads():
            new, decisions = plan_residency(programs, outputs, session.machine, reads, writes, session.programs)
        for e, before, after in zip(exes, programs, new):
            if e is not None and before is not None and after is not before:
                e.keep(session.machine, after)
        session.report.add_residency(graph.name, residency_summary(decisions))

    def _record_limits(self, graph: kir.GraphIR, exes: list[Executable | None], session: Session) -> None:
        """Record each kernel of ``graph`` that runs on the host because no program
        fits the machine: what compile found, or - for a graph taken from
        Inductor's cache, which never calls compile - planned now. Kernels of
        run-time sizes are planned at their launches, which fall back there."""
        for k, exe in zip(graph.kernels, exes):
            if exe is not None or is_symbolic(k):
                continue
            kept = self._kept(k, session.machine)
            if isinstance(kept, DoesNotFit):
                session.report.record_limit(kept)
                del self._compiled[k.name]
                continue
            try:
                supported_kind(k)
                plan(k, session.machine, {})
            except DoesNotFit as exc:
                session.report.record_limit(exc)
            except UnsupportedKernelError:
                continue  # falls back for another reason, already announced

    def cache_key(self) -> str:
        h = hashlib.sha256()
        root = Path(__file__).parents[1]  # the package: what compiles and runs a kernel is in these
        for package in ("model", "scheduler", "emulator", "backend"):
            for path in sorted((root / package).rglob("*.py")):
                h.update(path.read_bytes())
        h.update(json.dumps(current_machine().to_dict(), sort_keys=True).encode())
        return h.hexdigest()[:16]

    def ref(self) -> str:
        return "spyre_adapter.backend.spyre:SpyreBackend"
