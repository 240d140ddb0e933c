"""Benchmark checks that the figures come from programs that run.

* :func:`execute_row` runs a kernel's planned program on a fresh emulated card
  with every hardware check on, compares its outputs with the kernel's reference
  semantics, and reports the LX peak the executed program reached; then runs it
  as steady-state launches do (a recording launch, then a replay, on new inputs)
  and compares those too.
* :func:`mutation_section` mutates the programs of a few real kernels (dropped
  and shifted loads, swapped cores, missing barriers, shrunk allocations, early
  stores, skipped K slices: :mod:`spyre_adapter.bench.mutants`) and counts the mutants
  the emulator catches, by an error or by wrong numbers.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from typing import Any

import torch

from spyre_shims import kernel_ir as kir
from spyre_shims.ops import torch_dtype
from spyre_shims.runtime import capture_graphs, reset_compiled

from spyre_adapter.backend.spyre import plan
from spyre_adapter.bench.mutants import OPERATORS, judge, mutants, reference_run
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
                program: Program | None = None) -> dict[str, Any]:
    """Run the kernel's program (its plan unless ``program``) with checks; its
    numbers against the reference."""
    p = program if program is not None else plan(kernel, m, {})
    kernel = p.kernel if p.kernel is not None else kernel  # the planner may complete a captured layout
    card, replay = Card(m), Replay()
    rows = []
    for seed in (0, 1, 2):  # checked; recording (dependence levels); replayed
        inputs = kernel_inputs(kernel, seed)
        want = reference_run(kernel, inputs)
        bufs = {k: v.clone() for k, v in inputs.items()}
        try:
            stats = execute(p, bufs, card, checking=seed == 0, replay=None if seed == 0 else replay)
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
                         "lx_peak_executed": max(stats.lx_peak.values(), default=0)})
        else:
            rows.append({"ok": ok})
    return {**rows[0], "replay_matches_reference": all(r["ok"] for r in rows[1:])}


#: Small real kernels whose programs are mutated (fp16, as the model runs them).
MUTATION_CASES: list[tuple[str, Callable[..., Any], list[tuple[int, ...]]]] = [
    ("matmul", lambda a, b: a @ b, [(256, 512), (512, 256)]),
    ("softmax", lambda x: torch.softmax(x, -1), [(128, 1024)]),
    ("rmsnorm", lambda x, w: w * (x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-5)).half(),
     [(128, 512), (512,)]),
    ("add_relu", lambda x, y: torch.relu(x + y), [(256, 512), (256, 512)]),
]


def _kernels_of(fn: Callable[..., Any], shapes: Sequence[tuple[int, ...]]) -> list[kir.Kernel]:
    gen = torch.Generator().manual_seed(0)
    args = [torch.randn(*s, generator=gen).half().to("spyre") for s in shapes]
    reset_compiled()
    with warnings.catch_warnings(), capture_graphs() as graphs:
        warnings.simplefilter("ignore")
        torch.compile(fn, dynamic=False)(*args)
    return [k for g in graphs for k in g.kernels]


def mutation_section(m: Machine, per_operator: int = 3) -> dict[str, Any]:
    """Mutants of the programs of :data:`MUTATION_CASES`: how many the emulator kills."""
    total = killed = 0
    survivors: list[str] = []
    by_operator: dict[str, list[int]] = {op: [0, 0] for op in OPERATORS}
    for name, fn, shapes in MUTATION_CASES:
        for kernel in _kernels_of(fn, shapes):
            p = plan(kernel, m, {})
            inputs = kernel_inputs(kernel)
            want = reference_run(kernel, inputs)
            for mut in mutants(p, m, per_operator=per_operator):
                out = judge(mut, inputs, want, _outputs(kernel), m)
                total += 1
                killed += out.killed
                by_operator.setdefault(mut.operator, [0, 0])
                by_operator[mut.operator][0] += 1
                by_operator[mut.operator][1] += out.killed
                if not out.killed:
                    survivors.append(f"{name}: {mut.operator} core {mut.core} step {mut.step}: {mut.detail}")
    return {"mutants": total, "mutants_killed": killed, "mutants_killed_ratio": killed / total if total else 0.0,
            "by_operator": {op: {"mutants": n, "killed": k} for op, (n, k) in by_operator.items() if n},
            "survivors": survivors}
