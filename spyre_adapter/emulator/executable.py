"""A loaded Spyre kernel: its program per machine and run-time sizes, executed
on every launch (the numbers come from running it), with the hardware checks on
its first launch and the timing simulated once per program (and per
data-dependent traffic), recorded to the device report.

A launch is five parts, each a method of :class:`Executable`: :meth:`~Executable.plan`
(the program for the target's machine and these sizes, planned on first use),
:meth:`~Executable.run` (the functional pass, checked on the program's first
launch, replayed after), :meth:`~Executable.verify` (``SPYRE_VERIFY=1``: compare
with the kernel's reference semantics), :meth:`~Executable.measure` (compulsory
traffic, simulated timing, roofline figures) and :meth:`~Executable.record` (the
target's report).

Where a launch runs - the machine, the card, the report - is asked of the
``target`` at each launch, so a kernel compiled once runs wherever the caller is.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import threading
from collections.abc import Callable, Mapping, MutableMapping
from typing import Any, Protocol

import sympy
import torch

from spyre_shims import index as sidx
from spyre_shims import kernel_ir as kir
from spyre_shims.backend import warn_fallback
from spyre_shims.reference import KernelFault, run_kernel

from spyre_adapter.emulator import metrics
from spyre_adapter.emulator.card import Card
from spyre_adapter.emulator.executor import RunStats, execute
from spyre_adapter.emulator.replay import Replay
from spyre_adapter.model import isa
from spyre_adapter.model.errors import DoesNotFit, EmulatorError
from spyre_adapter.model.host_threads import host_threads
from spyre_adapter.model.kinds import KernelKind
from spyre_adapter.model.loop_steps import instructions
from spyre_adapter.model.machine import Machine
from spyre_adapter.model.program import Program, itemsize
from spyre_adapter.model.timing import Timeline, simulate
from spyre_adapter.model.traffic import compulsory_bytes

__all__ = ["Executable", "Planned", "Recorder", "Target", "Planner", "EmulatorError"]

#: Plans a kernel for a machine and run-time sizes: (kernel IR, machine, sizes) -> Program.
Planner = Callable[[Any, Machine, Mapping[sympy.Symbol, int]], "Program | Planned"]


class Recorder(Protocol):
    """Where launches are reported (the device report)."""

    def record(self, name: str, metrics: metrics.Metrics, timeline: Timeline, program: Program | None = None) -> None:
        ...

    def host_time(self, phase: str) -> contextlib.AbstractContextManager[None]:
        """A block whose wall time counts as the backend's own host time in ``phase``."""
        ...


class Target(Protocol):
    """Where a launch runs: the machine it is planned for, the card it runs on,
    the report it is recorded in (a device session)."""

    machine: Machine
    card: Card
    report: Recorder


class _Derived:
    """What one program measured: its checks passed, its compulsory bytes and LX
    peak; and its recorded steps for steady-state launches."""

    def __init__(self) -> None:
        self.checked = False
        #: unchecked launches so far (the first runs unrecorded, see :meth:`Executable.run`)
        self.unchecked = 0
        self.replay = Replay()
        self.compulsory: int | None = None
        self.lx_peak = 0
        #: simulated timelines by data-dependent traffic (shared: no names in them)
        self.timelines: dict[tuple, Timeline] = {}
        #: a kernel's figures by (compulsory bytes, data-dependent traffic)
        self.timing: dict[tuple, tuple[Timeline, metrics.Metrics]] = {}


@dataclasses.dataclass
class Planned:
    """A kernel's program at some run-time sizes, and what a launch runs.

    ``program`` names the kernel's own buffers (what reports show). ``runs`` is
    the same program as its planner made it for the first kernel of this
    structure, which every identical kernel (each layer of a model) launches on
    its own buffers renamed by ``names`` (``runs``' buffer -> the kernel's) and
    its run-time sizes by ``symbols`` (``runs``' size symbol -> the kernel's: each
    layer's KV length has a symbol of its own). A launch of one of them is, to
    the program, one more launch of the first:
    the checks of its first launch, its recorded steps and its simulated timing
    depend on the program alone, so they are kept once, in ``state`` (None: not
    shared, ``runs`` is ``program``).

    ``bound``: the program was bound from a size template (see
    :mod:`spyre_adapter.scheduler.size_templates`), not planned at these sizes:
    its first launch is also compared with the kernel's reference semantics,
    and should the numbers differ, that launch's outputs are the reference's
    (announced as a host fallback) and ``bound()`` withdraws the program and its
    template."""

    #: ``program``, or how to make it (a kernel launching another's program needs
    #: its own copy only for reports and verification: made when asked for)
    given: Program | Callable[[], Program]
    runs: Program | None = None
    names: Mapping[str, str] | None = None
    state: dict[Any, Any] | None = None
    symbols: Mapping[str, str] | None = None
    bound: Callable[[], None] | None = None
    #: the kernel's name (``program.name``, known before the program is made)
    name: str = ""
    #: whether ``runs``' addresses depend on data (see :func:`_reads_data_for_indices`)
    data_indexed: bool = dataclasses.field(init=False)
    #: this kernel's figures; its launch state too when nothing is shared
    own: _Derived = dataclasses.field(init=False, repr=False)

    @property
    def program(self) -> Program:
        """The program under this kernel's own buffer names (made on first use)."""
        if callable(self.given):
            self.given = self.given()
        return self.given

    def __post_init__(self) -> None:
        if not callable(self.given):
            self.name = self.given.name
        if self.runs is None:
            self.runs, self.names, self.state, self.symbols = self.program, None, None, None
        if self.symbols is not None and all(k == v for k, v in self.symbols.items()):
            self.symbols = None
        self.data_indexed = _reads_data_for_indices(self.runs.kernel)
        self.own = _Derived()

    def launch_state(self, buffers: Mapping[str, torch.Tensor]) -> _Derived:
        """The launch state for these (``runs``-named) buffers: shared by every
        identical kernel whose buffers have the same extents (the first launch's
        bounds checks hold for those only)."""
        if self.state is None:
            return self.own
        key = tuple(t.numel() for t in buffers.values())
        got = self.state.get(key)
        if got is None:
            got = self.state[key] = _Derived()
        return got

    def runs_sizes(self, sizes: Mapping[sympy.Symbol, int]) -> Mapping[sympy.Symbol, int]:
        """A launch's run-time sizes under the symbols of the program it runs."""
        if self.symbols is None:
            return sizes
        theirs = {mine: t for t, mine in self.symbols.items()}
        return {sidx.index_symbol(theirs[str(k)]) if str(k) in theirs else k: v for k, v in sizes.items()}


def _reads_data_for_indices(kernel: Any) -> bool:
    """Whether a kernel's addresses depend on the data it reads (an ``indirect``
    index): its compulsory traffic is then traced on a launch's data."""
    return isinstance(kernel, kir.KernelGroup) and any(i.op == "indirect" for lk in kernel.kernels for i in lk.body)


@dataclasses.dataclass
class _Launch:
    """One launch on its way through the parts."""

    target: Any
    buffers: MutableMapping[str, torch.Tensor]
    sizes: Mapping[sympy.Symbol, int]
    planned: Planned
    #: ``buffers`` under the names of the program the launch runs
    runs_on: Mapping[str, torch.Tensor]
    state: _Derived
    #: ``sizes`` under the symbols of the program the launch runs
    runs_sizes: Mapping[sympy.Symbol, int]
    stats: RunStats | None = None


class Executable:
    """One kernel of kind ``kind`` on the emulated card: planned by ``planner``,
    launched where ``target()`` says (see the module docstring)."""

    def __init__(self, kernel: Any, kind: KernelKind, planner: Planner, target: Callable[[], Target]) -> None:
        self.kernel = kernel
        self.kind = kind
        self._planner = planner
        self._target = target
        #: programs by (machine, run-time sizes)
        self._programs: dict[tuple, Planned] = {}
        #: (machine, run-time sizes) no program fits: the kernel runs on the host there
        self._on_host: set[tuple] = set()
        self._lock = threading.Lock()
        #: also run the reference semantics and compare (SPYRE_VERIFY=1): which kernel goes wrong
        self.verify = os.environ.get("SPYRE_VERIFY", "") not in ("", "0") and kind.reference

    @property
    def name(self) -> str:
        return str(self.kernel.name)

    @staticmethod
    def _key(machine: Machine, sizes: Mapping[sympy.Symbol, int] | None) -> tuple:
        return (machine, tuple(v for _, v in sorted((str(k), v) for k, v in (sizes or {}).items())))

    # ---------------------------------------------------------- plan
    def plan(self, machine: Machine, sizes: Mapping[sympy.Symbol, int] | None = None) -> Planned:
        """The program for ``machine`` and these run-time sizes (planned on first use,
        kept) and what a launch runs. Raises :class:`DoesNotFit`."""
        key = self._key(machine, sizes)
        with self._lock:
            got = self._programs.get(key)
            if got is None:
                made = self._planner(self.kernel, machine, dict(sizes or {}))
                got = self._programs[key] = made if isinstance(made, Planned) else Planned(made)
        return got

    def keep(self, machine: Machine, planned: Program | Planned, sizes: Mapping[sympy.Symbol, int] | None = None) -> None:
        """Run ``planned`` on ``machine`` at these sizes from now on (planned by the
        compiler, or re-planned by the residency planner for its graph)."""
        with self._lock:
            self._programs[self._key(machine, sizes)] = planned if isinstance(planned, Planned) else Planned(planned)

    def program(self, machine: Machine, sizes: Mapping[sympy.Symbol, int] | None = None) -> Program:
        """The program for ``machine`` and these run-time sizes (planned on first use)."""
        return self.plan(machine, sizes).program

    # ---------------------------------------------------------- launch
    def __call__(self, buffers: MutableMapping[str, torch.Tensor], sizes: Mapping[sympy.Symbol, int]) -> None:
        target = self._target()
        key = self._key(target.machine, sizes)
        if key in self._on_host:
            run_kernel(self.kernel, buffers, sizes)
            return
        # Run-time sizes this kernel has not run at: its program is found or planned now
        # (a dynamic-shape decode meets new sizes every token), host time of its own.
        fresh = key not in self._programs
        try:
            with target.report.host_time("plan_at_launch") if fresh else contextlib.nullcontext():
                planned = self.plan(target.machine, sizes)
        except DoesNotFit as exc:
            if not self.kind.host_fallback:
                raise
            # Known only now that the run-time sizes are: the kernel's reference
            # semantics run on the host instead, announced (a compile-time misfit
            # falls back the same way through Inductor).
            shown = dict(sorted((str(k), v) for k, v in (sizes or {}).items()))
            warn_fallback(f"{self.name} at run-time sizes {shown}: {exc}")
            self._on_host.add(key)
            run_kernel(self.kernel, buffers, sizes)
            return
        runs_on = buffers if planned.names is None else \
            {theirs: buffers[mine] for theirs, mine in planned.names.items() if mine in buffers}
        launch = _Launch(target, buffers, sizes, planned, runs_on, planned.launch_state(runs_on),
                         planned.runs_sizes(sizes))
        # A program's first launch is checked, traced and timed: host time the
        # backend spends once per program, reported apart from steady launches.
        # A program bound from a size template is compared with the reference on its first launch.
        bound = planned.bound if not launch.state.checked else None
        with target.report.host_time("first_launch") if not launch.state.checked else contextlib.nullcontext():
            expected = self.expected(launch, bound is not None)
            self.run(launch)
            if expected is not None:
                try:
                    self.verify_against(launch, expected)
                except EmulatorError as exc:
                    if bound is None:
                        raise
                    self._withdraw(key, launch, expected, bound, exc)
                    return
            self.record(launch, *self.measure(launch))

    def _withdraw(self, key: tuple, launch: _Launch, expected: Mapping[str, torch.Tensor],
                  bound: Callable[[], None], exc: EmulatorError) -> None:
        """A program bound from a size template computed other numbers than the
        reference: this launch's outputs become the reference's (a host fallback,
        announced), the program and its template are withdrawn, and the next
        launch at these sizes is planned."""
        for name, value in expected.items():
            launch.buffers[name].copy_(value)
        shown = dict(sorted((str(k), v) for k, v in (launch.sizes or {}).items()))
        warn_fallback(f"{self.name} at run-time sizes {shown}: the program bound from a size template "
                      f"differs from the reference semantics ({exc.detail}); the template is withdrawn")
        bound()
        with self._lock:
            self._programs.pop(key, None)

    def expected(self, launch: _Launch, force: bool = False) -> dict[str, torch.Tensor] | None:
        """With verification on (or ``force``), the reference semantics' outputs
        for this launch's inputs (computed before the program overwrites anything)."""
        # (a program reading what an earlier kernel left in LX has no DRAM inputs to compare from)
        if not (self.verify or force and self.kind.reference) or launch.planned.program.lx_in:
            return None
        copies = {k: v.clone() for k, v in launch.buffers.items()}
        run_kernel(self.kernel, copies, launch.sizes)
        outs = [self.kernel.output.name] if isinstance(self.kernel, kir.ExternKernel) else \
            [b.name for b in self.kernel.buffers if b.role in ("output", "inout")]
        return {n: copies[n] for n in outs if n in copies}

    def run(self, launch: _Launch) -> None:
        """The functional pass: checked on the program's first launch, then recorded
        and replayed. An error names this kernel, also when the program it runs is
        another identical kernel's."""
        q, d = launch.planned.runs, launch.state
        assert q is not None
        first = not d.checked
        # Recording (regrouping the steps by dependence level) costs about 2.5 plain
        # runs and pays from the launch after it: the first unchecked launch runs
        # plain. A decode's program for one KV length is launched once per layer.
        recorded = d.unchecked > 0  # (only an unchecked launch records)
        try:
            with host_threads() as threads:
                launch.stats = execute(q, launch.runs_on, launch.target.card, launch.runs_sizes, checking=first,
                                       replay=d.replay if recorded else None, pe_threads=threads)
        except (EmulatorError, KernelFault) as exc:
            if launch.planned.given is q:  # its own program (another kernel's: given is a copy, or how to make one)
                raise
            shared = f"(this kernel runs the program of the identical kernel {q.name} on its own buffers)"
            if isinstance(exc, EmulatorError):
                names = launch.planned.names or {}
                mine = EmulatorError(exc.kind, self.name, exc.core, exc.step, names.get(exc.buffer, exc.buffer),
                                     exc.detail)
                mine.add_note(shared)
                raise mine.with_traceback(exc.__traceback__) from None
            exc.add_note(shared)
            raise
        if first:
            d.lx_peak = max(launch.stats.lx_peak.values(), default=0)
            d.checked = True
        else:
            d.unchecked += 1

    def verify_against(self, launch: _Launch, expected: Mapping[str, torch.Tensor]) -> None:
        """The launch's outputs equal the reference semantics' (outputs kept in LX
        and never stored are not compared: DRAM never sees them)."""
        p = launch.planned.program
        stored = {b for c in p.cores for i in instructions(c.instrs) if isa.step(i).dma == "out"
                  for b in isa.dram_buffers(i)[1]}
        kept = {r.buffer for r in p.lx_out if r.buffer not in stored}
        _compare(p.name, launch.buffers, {k: v for k, v in expected.items() if k not in kept})

    def measure(self, launch: _Launch) -> tuple[Timeline, metrics.Metrics]:
        """Compulsory traffic (once per program, or per launch's data when its
        addresses depend on data), the simulated timeline (once per program and
        data-dependent traffic) and the roofline figures."""
        planned, d = launch.planned, launch.state
        q, own = planned.runs, planned.own
        assert q is not None and launch.stats is not None
        traced = own if planned.data_indexed else d
        if traced.compulsory is None:
            traced.compulsory = self.compulsory(q, launch.runs_on, launch.runs_sizes)
        compulsory = traced.compulsory
        dyn = tuple(sorted(launch.stats.dynamic_bytes.items()))
        # Events only for a report that keeps timelines (a trace): otherwise the
        # time the planner already simulated for this program serves.
        events = launch.target.report.keep_timelines
        got = own.timing.get((compulsory, dyn, events))
        if got is None:
            tl = d.timelines.get((dyn, events))
            if tl is None:
                tl = d.timelines[(dyn, events)] = simulate(q, launch.target.machine, launch.stats.dynamic_bytes,
                                                           keep_events=events)
            work = self.kind.work(self.kernel, launch.sizes)
            # (the program as it runs: the figures do not depend on buffer names)
            got = own.timing[(compulsory, dyn, events)] = (tl, metrics.compute(q, tl, launch.target.machine,
                                                                               compulsory, d.lx_peak, work,
                                                                               planned.name))
        return got

    def record(self, launch: _Launch, timeline: Timeline, figures: metrics.Metrics) -> None:
        """The launch in the target's report, under this kernel's own program."""
        report, planned = launch.target.report, launch.planned
        # the kernel's own copy of the program only for a report that keeps programs
        program = planned.program if getattr(report, "keep_programs", True) else planned.runs
        report.record(planned.name, figures, timeline, program)

    @staticmethod
    def compulsory(p: Program, buffers: Mapping[str, torch.Tensor], sizes: Mapping[sympy.Symbol, int]) -> int:
        """Compulsory DRAM bytes of the kernel, less what the program gets from or
        leaves in LX across kernels (those bytes never need DRAM)."""
        if p.kernel is None:
            return 0
        try:
            total = compulsory_bytes(p.kernel, buffers, sizes)
        except KernelFault:  # indices read from an in-place buffer the launch changed: bound by the views
            total = compulsory_bytes(p.kernel, None, sizes, views_only=True)
        for r in p.lx_in:
            total -= (r.hi - r.lo) * itemsize(r.dtype)
        written = {b.name for b in p.kernel.buffers if b.role in ("output", "inout")}
        stored = {(c.core, b) for c in p.cores for i in instructions(c.instrs) if isa.step(i).dma == "out"
                  for b in isa.dram_buffers(i)[1]}
        for r in p.lx_out:  # a share kept in LX and never stored: its write is not DRAM traffic
            if r.buffer in written and (r.core, r.buffer) not in stored:
                total -= (r.hi - r.lo) * itemsize(r.dtype)
        return max(total, 0)

    def analyse(self, machine: Machine, sizes: Mapping[sympy.Symbol, int] | None = None) -> tuple[Program, Timeline]:
        """The program and its simulated timeline without running it (planning studies)."""
        p = self.program(machine, sizes)
        return p, simulate(p, machine)


def _rtol(dtype: torch.dtype) -> float:
    """Relative tolerance of a program's output against the reference: 1e-3, or
    one unit in the last place of a coarser dtype (bf16, fp16): the program
    accumulates in another order, and the fp32 sums that differ in their last
    bits can round to neighbouring bf16 values."""
    return max(1e-3, torch.finfo(dtype).eps) if dtype.is_floating_point else 1e-3


def _compare(name: str, got: Mapping[str, torch.Tensor], expected: Mapping[str, torch.Tensor]) -> None:
    for buf, want in expected.items():
        g, w = got[buf].double(), want.double()
        bad = ((g - w).abs() > 1e-3 + _rtol(want.dtype) * w.abs()) & ~(torch.isnan(g) & torch.isnan(w))
        if bool(bad.any()):
            raise EmulatorError("verification failed", name, -1, -1, buf,
                                f"{int(bad.sum())} of {bad.numel()} values differ from the reference semantics "
                                f"(first at element {int(bad.nonzero()[0])}: {float(g[bad][0])} vs {float(w[bad][0])})")
