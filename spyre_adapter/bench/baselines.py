"""Baseline planners for the bench, measured like our planner in the same run,
each at its strongest.

* :func:`lx_even_split` - the best simple even split: every core, the output
  divided evenly (no K split), the largest tiles that fit LX or the tilings the
  closed form ranks first, operands shared between cores over the ring.
* :func:`torch_spyre_rules` - the division torch-spyre's compiler would choose,
  from its documented work-division planner
  (:func:`spyre_adapter.scheduler.matmul_seeds.torch_spyre_split`), fed into our
  program builder with the best intra-core tiling our builder has for it and its
  documented operand broadcast (one read of a shared operand feeding several
  cores) modeled as our ring sharing. Other kernels get its Pass 3 division.

Our planner does not simulate these divisions among its own candidates (doing so
ties them, at about three times the planning time of a 2048^3 GEMM), so a
baseline can beat it; the bench says by how much, either way. Every program is simulated and scored against the same bounds and the same
compulsory bytes (from the kernel, not from any program), so eta and rho of
the baselines and of our planner share their denominators.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import sympy

from spyre_shims import kernel_ir as kir

from spyre_adapter.emulator import metrics
from spyre_adapter.model import timing
from spyre_adapter.model.machine import Machine
from spyre_adapter.model.program import Program
from spyre_adapter.model.rules import static_check
from spyre_adapter.model.traffic import compulsory_bytes
from spyre_adapter.scheduler.kinds import work_of
from spyre_adapter.scheduler.loops import Division, model_group, plan_group
from spyre_adapter.scheduler.matmul import plan_grid, plan_matmul, shape_of
from spyre_adapter.scheduler.matmul_seeds import divisors, even_split_grid, torch_spyre_split

__all__ = ["lx_even_split", "even_split_grid", "torch_spyre_split", "torch_spyre_rules", "gemm_baseline_row"]

# even_split_grid and torch_spyre_split are re-exported: the bench and its tests name them here

_Sizes = Mapping[sympy.Symbol, int]


# ------------------------------------------------------------------ even split

def lx_even_split(kernel: kir.ExternKernel, m: Machine, sizes: _Sizes | None = None, tries: int = 2) -> Program:
    """The best simple even split of a matmul: for the ``tries`` best even grids,
    the largest LX-sized tiles (output-stationary) and the two tilings of that grid
    the closed form ranks first (any loop order), all with operands shared over
    the ring and without a K split; every one built, simulated, and the fastest kept."""
    sizes = sizes or {}
    s = shape_of(kernel, sizes)
    built = []
    for split in even_split_grid(s, m)[:tries]:
        for p in (plan_grid(kernel, m, sizes, kernel.name, split, share=True, orders=("c",), largest_tiles=True),
                  plan_grid(kernel, m, sizes, kernel.name, split, share=True, simulate_best=2)):
            built.append((timing.simulate(p, m, keep_events=False).total_ns, p))
    return min(built, key=lambda tp: tp[0])[1]


# ------------------------------------------------------------------ torch-spyre's rules

def torch_spyre_rules(kernel: kir.Kernel, m: Machine, sizes: _Sizes | None = None) -> Program:
    """Our program for ``kernel`` on the division torch-spyre's rules choose."""
    sizes = sizes or {}
    if isinstance(kernel, kir.ExternKernel):
        split, _ = torch_spyre_split(shape_of(kernel, sizes), m)
        return plan_grid(kernel, m, sizes, kernel.name, split, share=True)
    gm = model_group(kernel, m, sizes)
    units = max(1, -(-gm.rows // gm.unit)) if gm.rows else 1
    rows = max(d for d in divisors(units) if d <= m.cores)
    rsplit = 1
    if gm.reducing and rows < m.cores:
        red = max(i.rnumel for i in gm.infos)
        rsplit = max(d for d in divisors(max(1, red // 64)) if d * rows <= m.cores)
    return plan_group(kernel, m, sizes, kernel.name, force=Division(rows, rsplit))


# ------------------------------------------------------------------ scoring

def _scored(kernel: kir.Kernel, p: Program, m: Machine, comp: int) -> tuple[metrics.Metrics, Any]:
    peaks = static_check(p, m, {b.name: int(b.storage_numel) for b in kernel.buffers})
    return metrics.compute(p, timing.simulate(p, m, keep_events=False), m, comp, max(peaks.values(), default=0),
                           work_of(kernel)), p


def gemm_baseline_row(kernel: kir.ExternKernel, m: Machine, ours: Program | None = None) -> dict[str, Any]:
    """Our planner and both baselines on one GEMM: modeled time, eta against the
    datasheet and the sustained roof, and rho, all against our plan's bounds and the
    kernel's compulsory bytes."""
    comp = compulsory_bytes(kernel, None, {})
    main, _ = _scored(kernel, ours if ours is not None else plan_matmul(kernel, m, {}, kernel.name), m, comp)
    s = shape_of(kernel, {})
    split, how = torch_spyre_split(s, m)
    row: dict[str, Any] = {"name": kernel.name, "shape": [s.m, s.n, s.k]}
    for key, met in (("ours", main), ("lx_even_split", _scored(kernel, lx_even_split(kernel, m), m, comp)[0]),
                     ("torch_spyre_rules", _scored(kernel, torch_spyre_rules(kernel, m), m, comp)[0])):
        row[key] = {"modeled_ns": met.modeled_ns, "eta_datasheet": main.bound_datasheet_ns / met.modeled_ns,
                    "eta_sustained": main.bound_sustained_ns / met.modeled_ns, "rho": met.rho,
                    "cores": met.cores_used, "grid": met.plan.get("grid"), "tile": met.plan.get("tile"),
                    "order": met.plan.get("order"), "share": met.plan.get("share")}
    row["torch_spyre_rules"]["pass"] = how
    return row
