"""Benchmark checks that the figures come from programs that run.

* :func:`execute_row` runs a kernel's planned program on a fresh emulated card
  with every hardware check on, compares its outputs with the kernel's reference
  semantics, and reports the LX peak the executed program reached (the card's
  high-water mark of bytes the launch wrote, next to the static figure); then runs it
  as steady-state launches do (a recording launch, then a replay, on new inputs)
  and compares those too.
* :func:`mutation_section` mutates the programs of real compiles and of planned
  phased groups (:mod:`spyre_adapter.bench.mutants`, :mod:`.mutation_cases`) and
  counts the mutants caught, by the checker's error or by outputs farther from
  CPU eager than the unmutated programs' (:mod:`.mutation_runs`).
"""

from __future__ import annotations

from typing import Any

import torch

from spyre_shims import kernel_ir as kir
from spyre_shims.ops import torch_dtype

from spyre_adapter.backend.spyre import plan
from spyre_adapter.bench.mutants import reference_run
from spyre_adapter.bench.mutation_cases import function_cases, kernel_cases
from spyre_adapter.bench.mutation_runs import rule_self_test, run_all, summary
from spyre_adapter.emulator import Card, Replay, execute
from spyre_adapter.model.machine import Machine
from spyre_adapter.model.program import Program
from spyre_adapter.model.rules import EmulatorError

__all__ = ["execute_row", "mutation_section", "kernel_inputs"]


def kernel_inputs(kernel: kir.Kernel, seed: int = 0) -> dict[str, torch.Tensor]:
    """Flat buffers for ``kernel``: random inputs, NaN-filled outputs (a store a
    program misses shows)."""
    gen = torch.Generator().manual_seed(seed)
    out = {}
    for b in kernel.buffers:
        dt = torch_dtype(b.dtype)
        n = int(b.storage_numel)
        if b.role in ("input", "inout"):
            t = torch.randn(n, generator=gen) if dt.is_floating_point else torch.randint(0, 4, (n,), generator=gen)
            out[b.name] = t.to(dt)
        else:
            out[b.name] = torch.full((n,), float("nan"), dtype=dt) if dt.is_floating_point else torch.zeros(n, dtype=dt)
    return out


def _outputs(kernel: kir.Kernel) -> list[str]:
    if isinstance(kernel, kir.ExternKernel):
        return [kernel.output.name]
    return [b.name for b in kernel.buffers if b.role in ("output", "inout")]


def execute_row(kernel: kir.Kernel, m: Machine, atol: float = 5e-2, rtol: float = 2e-2,
                program: Program | None = None, replays: bool = True) -> dict[str, Any]:
    """Run the kernel's program (its plan unless ``program``) with checks; its
    numbers against the reference. ``replays``: also launched twice more the way
    steady state runs it (recorded, then replayed); off, ``replay_matches_reference``
    is None."""
    p = program if program is not None else plan(kernel, m, {})
    kernel = p.kernel if p.kernel is not None else kernel  # the planner may complete a captured layout
    card, replay = Card(m), Replay()
    rows = []
    for seed in (0, 1, 2) if replays else (0,):  # checked; recording (dependence levels); replayed
        inputs = kernel_inputs(kernel, seed)
        want = reference_run(kernel, inputs)
        bufs = {k: v.clone() for k, v in inputs.items()}
        try:
            stats = execute(p, bufs, card, checking=seed == 0, replay=None if seed == 0 else replay,
                            measure_peak=seed == 0)
        except EmulatorError as exc:
            if seed == 0:
                return {"executed": False, "error": str(exc)[:300]}
            return {**rows[0], "replay_matches_reference": False, "replay_error": str(exc)[:300]}
        err = 0.0
        ok = True
        for name in _outputs(kernel):
            got, ref = bufs[name].double(), want[name].double()
            diff = (got - ref).abs()
            err = max(err, float(diff.max()) if diff.numel() else 0.0)
            ok = ok and bool((diff <= atol + rtol * ref.abs()).all())
        if seed == 0:
            rows.append({"executed": True, "matches_reference": ok, "max_abs_error": err,
                         "lx_peak_static": max(stats.lx_peak.values(), default=0),
                         "lx_peak_executed": max(stats.lx_peak_executed.values(), default=0)})
        else:
            rows.append({"ok": ok})
    return {**rows[0], "replay_matches_reference": all(r["ok"] for r in rows[1:]) if replays else None}


def mutation_section(m: Machine, per_operator: int = 3, quick: bool = False) -> dict[str, Any]:
    """Mutants of the programs of :mod:`.mutation_cases` judged against CPU eager:
    kill ratios overall, per operator and per program kind, the survivors, and
    the checker-rule self-test (each rule off in turn, on the quick cases)."""
    judged = run_all(function_cases(quick=quick), kernel_cases(m), m, per_operator)
    s = summary(judged)
    out = {"mutants": s["mutants"], "mutants_killed": s["killed"], "mutants_killed_ratio": s["killed_ratio"],
           "mutants_killed_by_checker": s["killed_by_checker"], "by_operator": s["by_operator"],
           "by_kind": s["by_kind"], "survivors": s["survivors"]}
    if not quick:
        out["rule_self_test"] = rule_self_test(function_cases(quick=True), kernel_cases(m), m, 2)
    return out
