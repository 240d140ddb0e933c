"""Mutation testing judged by CPU eager: a planted bug in one kernel's program,
run inside the whole compiled function on the emulated card, must give an
error or outputs that differ from the same function run eagerly on the CPU.

The oracle shares no code with the emulator or the reference interpreter: a
mutant that the emulator executes wrongly *and* the interpreter agrees with
still differs from eager. Each case is compiled once; each mutant replaces one
kernel's program for one call (its first launch is a checked one, as a new
program's always is) and the original is put back after.
"""

from __future__ import annotations

import copy
import dataclasses
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import torch

from spyre_shims.backend import get_backend
from spyre_shims.reference import KernelFault
from spyre_shims.runtime import reset_compiled

from spyre_adapter.backend.session import current
from spyre_adapter.bench.mutants import Mutant, Outcome, mutants
from spyre_adapter.emulator import Card, execute
from spyre_adapter.emulator.executable import Executable
from spyre_adapter.model.checker_rules import RULES, disabled
from spyre_adapter.model.machine import Machine
from spyre_adapter.model.program import Program
from spyre_adapter.model.rules import EmulatorError

__all__ = ["Case", "Compiled", "KernelCase", "Judged", "compile_case", "judge_eager", "run_case", "run_kernel_case",
           "run_all", "by_checker", "summary", "rule_self_test"]


@dataclasses.dataclass(frozen=True)
class Case:
    """A function (or module), its CPU arguments and the tolerance its outputs are held to."""

    name: str
    fn: Callable[..., Any]
    args: tuple[torch.Tensor, ...]
    atol: float = 2e-2
    rtol: float = 2e-2


@dataclasses.dataclass
class Compiled:
    """A case compiled for "spyre": the compiled function, its kernels'
    executables, the eager outputs and what the unmutated programs compute."""

    case: Case
    run: Callable[[], list[torch.Tensor]]
    executables: list[Executable]
    eager: list[torch.Tensor]
    unmutated: list[torch.Tensor]


def _flat(out: Any) -> list[torch.Tensor]:
    if isinstance(out, torch.Tensor):
        return [out]
    return [t for o in out for t in _flat(o)] if isinstance(out, (tuple, list)) else []


def _loaded() -> dict[str, Executable]:
    """Every executable the Spyre backend and the session hold now (kernels and hand-written calls)."""
    backend = get_backend("spyre")
    out = dict(backend.executables()) if backend is not None else {}
    out.update({f"{k}": v for k, v in current().kernel_state.items() if isinstance(v, Executable)})
    return out


def compile_case(case: Case) -> Compiled:
    """Compile ``case`` for "spyre" and run it once (every kernel planned and
    checked); what it computes must already match eager."""
    before = _loaded()
    reset_compiled()
    # a module runs on the card as a copy with its weights there
    on_card = copy.deepcopy(case.fn).to("spyre") if isinstance(case.fn, torch.nn.Module) else case.fn
    compiled = torch.compile(on_card, dynamic=False)
    dev = [a.to("spyre") for a in case.args]

    def run() -> list[torch.Tensor]:
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return [t.cpu() for t in _flat(compiled(*dev))]

    run()  # compiles, plans and checks every kernel
    got = run()  # steady state, as every mutant's neighbours run
    with torch.no_grad():
        eager = [t.detach() for t in _flat(case.fn(*case.args))]
    why = _differs(got, eager, case)
    if why:
        raise AssertionError(f"{case.name}: the unmutated compiled function differs from eager: {why}")
    exes = [e for k, e in _loaded().items() if before.get(k) is not e]
    return Compiled(case, run, exes, eager, got)


#: How much farther from eager than the unmutated programs a mutant's output
#: element must be to count as wrong, relative to the output's largest value:
#: a model's outputs carry its residual stream, so the tolerance that accepts
#: the unmutated run would hide a wrong attention or MLP inside it.
WORSE_THAN_UNMUTATED = 5e-4


def _worse(got: Sequence[torch.Tensor], unmutated: Sequence[torch.Tensor], eager: Sequence[torch.Tensor]) -> str | None:
    """Whether ``got`` is farther from eager than the unmutated outputs, anywhere."""
    if len(got) != len(eager):
        return f"{len(got)} outputs, eager has {len(eager)}"
    for k, (g, u, w) in enumerate(zip(got, unmutated, eager)):
        if g.shape != w.shape:
            return f"output {k}: shape {tuple(g.shape)}, eager {tuple(w.shape)}"
        g64, u64, w64 = g.double(), u.double(), w.double()
        scale = float(w64.abs().nan_to_num(0).max()) if w64.numel() else 0.0
        nan = torch.isnan(g64) & ~torch.isnan(w64)
        bad = nan | ((g64 - w64).abs() > (u64 - w64).abs() + WORSE_THAN_UNMUTATED * scale)
        if bool(bad.any()):
            return f"output {k}: {int(bad.sum())} of {bad.numel()} values farther from eager than the unmutated run"
    return None


def _differs(got: Sequence[torch.Tensor], want: Sequence[torch.Tensor], case: Case) -> str | None:
    if len(got) != len(want):
        return f"{len(got)} outputs, eager has {len(want)}"
    for k, (g, w) in enumerate(zip(got, want)):
        g64, w64 = g.double(), w.double()
        nan = torch.isnan(g64) != torch.isnan(w64)
        bad = nan | (((g64 - w64).abs() > case.atol + case.rtol * w64.abs()) & ~torch.isnan(w64))
        if bool(bad.any()):
            return f"output {k}: {int(bad.sum())} of {bad.numel()} values differ from eager"
    return None


@contextmanager
def _substituted(exe: Executable, m: Machine, mutant: Mutant) -> Iterator[None]:
    original = exe.plan(m)
    exe.keep(m, mutant.program)
    try:
        yield
    finally:
        exe.keep(m, original)


def judge_eager(c: Compiled, exe: Executable, mutant: Mutant, m: Machine) -> Outcome:
    """Run the compiled function with ``mutant`` in place of ``exe``'s program:
    killed by an error or by outputs that differ from eager."""
    with _substituted(exe, m, mutant):
        try:
            got = c.run()
        except (EmulatorError, KernelFault, RuntimeError, IndexError, ValueError) as exc:
            return Outcome(mutant, True, f"{type(exc).__name__}: {str(exc)[:160]}")
    why = _worse(got, c.unmutated, c.eager)
    return Outcome(mutant, bool(why), why or "as close to eager as the unmutated programs")


def run_case(case: Case, per_operator: int, seed: int = 0) -> list[tuple[str, Outcome]]:
    """Every mutant of every kernel of ``case`` on the session's machine: (the
    program's kind, how it was judged)."""
    m = current().machine
    c = compile_case(case)
    out = []
    for exe in c.executables:
        p = exe.plan(m).program
        for mut in mutants(p, m, per_operator=per_operator, seed=seed):
            out.append((p.kind, judge_eager(c, exe, mut, m)))
    return out


@dataclasses.dataclass(frozen=True)
class KernelCase:
    """A program run on its own: its kernel's input buffers and what eager torch
    computes for its outputs from them (for programs no compiled function gives:
    the phased groups whose barriers order cores)."""

    name: str
    program: Program
    inputs: dict[str, torch.Tensor]
    eager: Callable[[dict[str, torch.Tensor]], dict[str, torch.Tensor]]


def _run_program(p: Program, inputs: Mapping[str, torch.Tensor], m: Machine) -> dict[str, torch.Tensor]:
    bufs = {k: v.clone() for k, v in inputs.items()}
    execute(p, bufs, Card(m))
    return bufs


def run_kernel_case(case: KernelCase, m: Machine, per_operator: int, seed: int = 0) -> list[tuple[str, Outcome]]:
    """Every mutant of ``case``'s program, judged against eager."""
    want = case.eager({k: v.clone() for k, v in case.inputs.items()})
    names = sorted(want)
    base = _run_program(case.program, case.inputs, m)
    why = _differs([base[n] for n in names], [want[n] for n in names], Case(case.name, lambda: None, ()))
    if why:
        raise AssertionError(f"{case.name}: the unmutated program differs from eager: {why}")
    out = []
    for mut in mutants(case.program, m, per_operator=per_operator, seed=seed):
        try:
            got = _run_program(mut.program, case.inputs, m)
        except (EmulatorError, KernelFault, RuntimeError, IndexError, ValueError) as exc:
            out.append((case.program.kind, Outcome(mut, True, f"{type(exc).__name__}: {str(exc)[:160]}")))
            continue
        why = _worse([got[n] for n in names], [base[n] for n in names], [want[n] for n in names])
        out.append((case.program.kind, Outcome(mut, bool(why), why or "as close to eager as the unmutated program")))
    return out


#: One judged mutant: (case name, program kind, outcome).
Judged = tuple[str, str, Outcome]


def run_all(cases: Sequence[Case], kernel_cases: Sequence[KernelCase], m: Machine, per_operator: int,
            seed: int = 3) -> list[Judged]:
    """Every mutant of every case (compiled functions on the session's machine, planned programs on ``m``)."""
    out: list[Judged] = []
    for c in cases:
        out += [(c.name, kind, o) for kind, o in run_case(c, per_operator, seed)]
    for k in kernel_cases:
        out += [(k.name, kind, o) for kind, o in run_kernel_case(k, m, per_operator, seed)]
    return out


def by_checker(o: Outcome) -> bool:
    """Whether the emulator's checker (an :class:`EmulatorError`), not the numbers, caught the mutant."""
    return o.killed and o.how.startswith("EmulatorError")


def summary(judged: Sequence[Judged]) -> dict[str, Any]:
    """Kill ratios overall, per operator and per program kind, and the survivors."""
    def ratio(items: Sequence[Judged]) -> dict[str, Any]:
        n = len(items)
        k = sum(o.killed for _, _, o in items)
        return {"mutants": n, "killed": k, "killed_ratio": k / n if n else 0.0,
                "killed_by_checker": sum(by_checker(o) for _, _, o in items)}

    ops = sorted({o.mutant.operator for _, _, o in judged})
    kinds = sorted({kind for _, kind, _ in judged})
    return {**ratio(judged),
            "by_operator": {op: ratio([j for j in judged if j[2].mutant.operator == op]) for op in ops},
            "by_kind": {kd: ratio([j for j in judged if j[1] == kd]) for kd in kinds},
            "survivors": [f"{name} ({kind}): {o.mutant.operator} core {o.mutant.core} step {o.mutant.step}: "
                          f"{o.mutant.detail}" for name, kind, o in judged if not o.killed]}


def rule_self_test(cases: Sequence[Case], kernel_cases: Sequence[KernelCase], m: Machine, per_operator: int,
                   seed: int = 3) -> dict[str, dict[str, int]]:
    """The mutant set run with each checker rule switched off in turn: per rule,
    how many mutants the checker still catches and how many are still killed at
    all, next to the figures with every rule on ("all rules")."""
    def counts() -> dict[str, int]:
        judged = run_all(cases, kernel_cases, m, per_operator, seed)
        return {"mutants": len(judged), "killed": sum(o.killed for _, _, o in judged),
                "killed_by_checker": sum(by_checker(o) for _, _, o in judged)}

    out = {"all rules": counts()}
    for rule in RULES:
        with disabled(rule):
            out[rule] = counts()
    return out
