"""Calibration of the machine model against measurements of the real card.

Every constant of :class:`~spyre_adapter.model.machine.Machine` has one source
(:data:`CATEGORIES`): the datasheet, the published architecture, a published
measurement used as the value itself, a fit here, or an assumption nothing
measured constrains (with its sensitivity reported). Only the constants in
:data:`FITTED` are fitted, and only on the points whose role is ``"fit"``; every
other measurement is a held-out prediction, and errors are reported on those
alone. Each point says where its figure comes from (``provenance``: a published
measurement, or a fitted parameter of torch-spyre's reference model) and whether
it is ``independent`` of our constants (not derived from a figure one of our
constants was taken from). Two published torch-spyre sources
(:data:`SOURCES_CITED`).

``spyre-adapter calibrate`` re-runs the fit, prints the table and the
held-out errors and writes ``results/calibration/calibration.json``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal

import torch

from spyre_shims import kernel_ir as kir

from spyre_adapter.bench import kernels as sk
from spyre_adapter.model import timing
from spyre_adapter.model.machine import DEFAULT, SOURCES, Machine
from spyre_adapter.model.traffic import compulsory_bytes
from spyre_adapter.scheduler.loops import plan_group
from spyre_adapter.scheduler.matmul import plan_matmul

__all__ = ["Point", "POINTS", "FITTED", "ASSUMED", "CATEGORIES", "SOURCES_CITED", "kernel_ns", "calibration_rows",
           "summary", "fit", "sensitivity", "command"]

SP = ("torch-spyre docs/source/compiler/scratchpad_planning.md, 'Optimizations on softmax': median of 1000 runs "
      "after 200 warm-up runs, end to end")
CM = ("torch-spyre torch_spyre/_inductor/cost_model.py (copy in ../shared/reference/torch-spyre-cost-model), "
      "device kernel time from torch.profiler")
#: The published sources the measurements come from.
SOURCES_CITED = {"SP": SP, "CM": CM}

#: Constants fitted here, with their search bounds.
FITTED: dict[str, tuple[float, float]] = {"core_dma_gbps": (8.0, 400.0), "kernel_launch_ns": (0.0, 30_000.0),
                                          "lane_reduce_cycles_per_stick": (0.0, 64.0)}
#: How a fitted constant moves in the fit: rates in log space, the rest linear
#: (latencies, which may be 0, in microseconds).
_SCALE = {"kernel_launch_ns": 1e3, "lane_reduce_cycles_per_stick": 1.0}
#: Constants no measurement here constrains: stated values, sensitivity reported.
ASSUMED = tuple(k for k, v in SOURCES.items() if v.startswith("[assumed]"))

#: Source category of every machine constant (the tag its ``SOURCES`` entry opens with).
CATEGORIES: dict[str, str] = {k: v[1:v.index("]")] for k, v in SOURCES.items()}

Role = Literal["fit", "predicted", "stack"]
Provenance = Literal["measurement", "reference-fit"]


@dataclasses.dataclass(frozen=True)
class Point:
    """One measurement of the real card and how the model computes the same quantity.

    ``role``: ``fit`` (the fitted constants are chosen on it), ``predicted``
    (held out: the error is a prediction error) or ``stack`` (our whole compiler
    on the measured function: not a machine calibration, shown for what it says
    about the scheduler). A published figure a constant is set to directly
    (``[measured]`` in ``machine.SOURCES``) is never a point: its row would only
    echo the parameter.

    ``provenance``: ``measurement`` (a figure measured on the card, as published)
    or ``reference-fit`` (a fitted parameter of torch-spyre's cost model, itself
    fitted to their measurements). ``independent``: False when one of our
    constants was taken from the same data, so agreement is partly by
    construction."""

    name: str
    role: Role
    unit: str
    measured: float
    source: str
    model: Callable[[Machine], float]
    note: str = ""
    provenance: Provenance = "measurement"
    independent: bool = True


# ------------------------------------------------------------------ the model side

def _program(kernel: kir.Kernel, m: Machine, lx: bool) -> Any:
    if isinstance(kernel, kir.ExternKernel):
        return plan_matmul(kernel, m, {}, kernel.name)
    return plan_group(kernel, m, {}, kernel.name, lx_planning=lx)


def kernel_ns(kernels: Sequence[kir.Kernel], m: Machine, lx: bool = True) -> float:
    """Modeled time of ``kernels`` run one after another on ``m`` (each planned for
    ``m`` by the scheduler and simulated; launches included)."""
    return sum(timing.simulate(_program(k, m, lx), m, keep_events=False).total_ns for k in kernels)


def _time_us(build: Callable[[], list[kir.Kernel]], cores: int, lx: bool = True) -> Callable[[Machine], float]:
    return lambda m: kernel_ns(build(), m.replace(cores=cores), lx) / 1e3


def _rate_gbps(build: Callable[[], list[kir.Kernel]], cores: int) -> Callable[[Machine], float]:
    def rate(m: Machine) -> float:
        ks = build()
        return sum(compulsory_bytes(k, None, {}) for k in ks) / kernel_ns(ks, m.replace(cores=cores))
    return rate


def _bandwidth_ratio(cores: int, rows: int = 4096, cols: int = 2048) -> Callable[[Machine], float]:
    """A row reduction's bandwidth on ``cores`` cores over the whole card's (same bytes)."""
    def ratio(m: Machine) -> float:
        ks = sk.kernels("sumrow", rows, cols)
        return kernel_ns(ks, m.replace(cores=32)) / kernel_ns(ks, m.replace(cores=cores))
    return ratio


def _softmax_dim0_as_compiled() -> list[kir.Kernel]:
    """softmax(x, 0) of a (512, 1024) fp16 tensor as Inductor hands it to this
    backend: one kernel of column max and column sum of exp (x read by both),
    one kernel writing the normalised output."""
    rows, cols = 512, 1024
    F16, F32, I0, I1, R0, dense_buffer = sk.F16, sk.F32, sk.I0, sk.I1, sk.R0, sk.dense_buffer
    _Body, _group, _loop = sk._Body, sk._group, sk._loop
    mx = _Body()
    mx.reduce("max", mx.f32(mx.load("x", I0 + cols * R0)), F32, "cmax", I0)
    sm = _Body()
    d = sm("sub", (sm.f32(sm.load("x", I0 + cols * R0)), sm.load("cmax", I0, F32)), F32)
    sm.reduce("sum", sm("exp", (d,), F32), F32, "csum", I0)
    red = _group("softmax0_reduce", [_loop("op0", (cols,), mx, (rows,)), _loop("op1", (cols,), sm, (rows,))],
                 [dense_buffer("x", (rows, cols)), dense_buffer("cmax", (1, cols), F32, "inout"),
                  dense_buffer("csum", (1, cols), F32, "output")])
    o = _Body()
    d = o("sub", (o.f32(o.load("x", cols * I0 + I1)), o.load("cmax", I1, F32)), F32)
    q = o("truediv", (o("exp", (d,), F32), o.load("csum", I1, F32)), F32)
    o.store("out", cols * I0 + I1, o("to_dtype", (q, F16), F16))
    div = _group("softmax0_div", [_loop("op2", (rows, cols), o)],
                 [dense_buffer("x", (rows, cols)), dense_buffer("cmax", (1, cols), F32),
                  dense_buffer("csum", (1, cols), F32), dense_buffer("out", (rows, cols), role="output")])
    return [red, div]


def _softmax_fused() -> list[kir.Kernel]:
    # softmax over dim 0 of (512, 1024) as the one fused kernel torch-spyre ran
    return sk.kernels("softmax_dim0", 512, 1024)


def _op(op: str, rows: int, cols: int) -> Callable[[], list[kir.Kernel]]:
    return lambda: sk.kernels(op, rows, cols)


_PROXY = ("modeled as one fused kernel (column max, column sum of exp, normalised output), the kernel torch-spyre "
          "ran; what our compiler emits from Inductor's two kernels is a 'stack' row")
_RUNG_G = ("rung-G reload probe, cores=32, R=64; C=16384 is the only width sweep_plan.json pairs with R=64 for "
           "add, bcast and bcastcol")
_G = ("g(cores) = BW(cores)/BW(32), mean over read/amax/sumrow/mean at their anchor shapes (sweep: 4096x2048 and "
      "8192x2048); cores 8 and 16 single-shot. Modeled on sumrow 4096x2048")

#: Every measurement used, with its role.
POINTS: tuple[Point, ...] = (
    Point("softmax (512,1024) fp16 over dim 0, 1 core, LX planning", "fit", "us", 23.67, f"{SP}, stage 4",
          _time_us(_softmax_fused, 1), _PROXY),
    Point("add (64,16384) fp16, 32 cores", "fit", "us", 52.0, f"{CM}, {_RUNG_G}", _time_us(_op("add", 64, 16384), 32)),
    Point("softmax (512,1024) fp16 over dim 0, 1 core, no LX planning", "predicted", "us", 32.51,
          f"{SP}, baseline", _time_us(_softmax_fused, 1, lx=False), _PROXY),
    Point("softmax (512,1024) fp16 over dim 0, 4 cores, LX planning", "predicted", "us", 32.17, f"{SP}, 4-core",
          _time_us(_softmax_fused, 4), _PROXY),
    Point("bcast x(64,16384) + b(1,16384) fp16, 32 cores", "predicted", "us", 31.5, f"{CM}, {_RUNG_G} (30-33 us)",
          _time_us(_op("bcast", 64, 16384), 32)),
    Point("bcastcol x(64,16384) + b(64,1) fp16, 32 cores", "predicted", "us", 31.5, f"{CM}, {_RUNG_G} (30-33 us)",
          _time_us(_op("bcastcol", 64, 16384), 32)),
    Point("softmax over the last dim, (4096,2048) fp16, 32 cores: DRAM bytes / time", "predicted", "GB/s", 100.0,
          f"{CM}: 'at the floor softmax runs at ~100 GB/s'", _rate_gbps(_op("softmax", 4096, 2048), 32),
          "the balanced-copy rate our dram_mixed_gbps (105) was taken from", "reference-fit", False),
    Point("transpose (4096,4096) fp16, 32 cores: DRAM bytes / time", "predicted", "GB/s", 116.0,
          f"{CM}: bw_restickify_gbps, transpose ~116 GB/s", _rate_gbps(_op("transpose", 4096, 4096), 32),
          provenance="reference-fit"),
    Point("sumcol (2048,4096) fp16, 32 cores: DRAM bytes / time", "predicted", "GB/s", 113.0,
          f"{CM}: bw_reduce_outer_gbps, sumcol ~113 GB/s", _rate_gbps(_op("sumcol", 2048, 4096), 32),
          provenance="reference-fit"),
    *(Point(f"row-reduction bandwidth on {c} core{'s' if c > 1 else ''} / on 32 cores",
            "fit" if c <= 4 else "predicted", "ratio", g, f"{CM}: red_bw_cores_g", _bandwidth_ratio(c),
            _G + ("" if c <= 4 else "; single-shot on the card"), "reference-fit")
      for c, g in ((1, 0.11), (2, 0.22), (4, 0.43), (8, 0.54), (16, 0.54))),
    Point("softmax (512,1024) fp16 over dim 0 as our compiler emits it, 1 core, LX planning", "stack", "us", 23.67,
          f"{SP}, stage 4", _time_us(_softmax_dim0_as_compiled, 1), "two kernels; x read three times"),
    Point("softmax (512,1024) fp16 over dim 0 as our compiler emits it, 4 cores, LX planning", "stack", "us", 32.17,
          f"{SP}, 4-core", _time_us(_softmax_dim0_as_compiled, 4), "two kernels; x read three times"),
)


# ------------------------------------------------------------------ rows, summary

def _row(p: Point, m: Machine) -> dict[str, Any]:
    model = p.model(m)
    return {"name": p.name, "role": p.role, "unit": p.unit, "measured": p.measured, "model": model,
            "error": (model - p.measured) / p.measured, "source": p.source, "note": p.note,
            "provenance": p.provenance, "independent": p.independent}


def calibration_rows(machine: Machine = DEFAULT, roles: Sequence[Role] = ("fit", "predicted", "stack"),
                     ) -> list[dict[str, Any]]:
    """Each point's measured value, our model's value on ``machine`` and the relative
    error (model - measured) / measured, with its role and source."""
    return [_row(p, machine) for p in POINTS if p.role in roles]


def summary(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The bench's calibration figures: errors on held-out points only, and how many
    points there are of each kind."""
    pred = [abs(r["error"]) for r in rows if r["role"] == "predicted"]
    fit_ = [abs(r["error"]) for r in rows if r["role"] == "fit"]
    return {
        "calibration_fit_points": len(fit_),
        "calibration_predicted_independent_points": sum(1 for r in rows if r["role"] == "predicted"
                                                        and r.get("independent", True)),
        "calibration_predicted_points": len(pred),
        "calibration_predicted_error_max": max(pred, default=0.0),
        "calibration_predicted_error_median": statistics.median(pred) if pred else 0.0,
        "calibration_fit_residual_max": max(fit_, default=0.0),
        "calibration_fitted": sorted(FITTED),
    }


# ------------------------------------------------------------------ the fit

def _residuals(m: Machine, points: Sequence[Point]) -> torch.Tensor:
    return torch.tensor([math.log(p.model(m) / p.measured) for p in points], dtype=torch.float64)


def _to_machine(base: Machine, theta: torch.Tensor, names: Sequence[str]) -> Machine:
    return base.replace(**{n: _from_theta(n, float(t)) for n, t in zip(names, theta)})


def _theta(name: str, value: float) -> float:
    return math.log(value) if name.endswith("gbps") else value / _SCALE[name]


def _from_theta(name: str, t: float) -> float:
    lo, hi = FITTED[name]
    return min(hi, max(lo, math.exp(t) if name.endswith("gbps") else t * _SCALE[name]))


def _at_bound(name: str, t: float, side: str) -> bool:
    lo, hi = FITTED[name]
    v = _from_theta(name, t)
    return v <= lo * (1 + 1e-9) if side == "lo" else v >= hi * (1 - 1e-9)


def fit(base: Machine = DEFAULT, names: Sequence[str] = tuple(FITTED), iterations: int = 12,
        tol: float = 1e-4) -> dict[str, Any]:
    """Least squares (in log time) of the :data:`FITTED` constants on the ``fit``
    points: damped Gauss-Newton with forward-difference Jacobians, parameters kept
    inside their bounds. Returns the fitted values, the residuals and the iterations."""
    points = [p for p in POINTS if p.role == "fit"]
    theta = torch.tensor([_theta(n, getattr(base, n)) for n in names], dtype=torch.float64)
    lam = 1e-3
    r = _residuals(_to_machine(base, theta, names), points)
    history = []
    for it in range(iterations):
        cost = float(r @ r)
        history.append({"iteration": it, "cost": cost, **{n: _from_theta(n, float(t)) for n, t in zip(names, theta)}})
        jac = torch.empty(len(points), len(names), dtype=torch.float64)
        for j in range(len(names)):
            step = torch.zeros_like(theta)
            step[j] = 0.02 if names[j].endswith("gbps") else 0.2
            jac[:, j] = (_residuals(_to_machine(base, theta + step, names), points) - r) / step[j]
        # A parameter held at a bound by the gradient drops out of the step.
        grad = jac.T @ r
        free = [j for j, n in enumerate(names)
                if not (_at_bound(n, float(theta[j]), "lo") and grad[j] > 0)
                and not (_at_bound(n, float(theta[j]), "hi") and grad[j] < 0)]
        if not free:
            break
        jf = jac[:, free]
        improved = False
        while lam < 1e6:
            a = jf.T @ jf + lam * torch.diag(torch.diag(jf.T @ jf) + 1e-9)
            cand = theta.clone()
            cand[free] = theta[free] - torch.linalg.solve(a, jf.T @ r)
            cand = torch.tensor([_theta(n, _from_theta(n, float(t))) for n, t in zip(names, cand)], dtype=torch.float64)
            rc = _residuals(_to_machine(base, cand, names), points)
            if float(rc @ rc) < cost:
                theta, r, lam, improved = cand, rc, lam / 10, True
                break
            lam *= 10
        if not improved or cost - float(r @ r) < tol * max(cost, 1e-12):
            break
    values = {n: _from_theta(n, float(t)) for n, t in zip(names, theta)}
    return {"values": values, "residuals": {p.name: float(x) for p, x in zip(points, r)},
            "history": history, "fit_points": [p.name for p in points]}


def sensitivity(machine: Machine = DEFAULT, factor: float = 2.0) -> dict[str, dict[str, float]]:
    """How far each held-out prediction moves when an assumed constant is divided or
    multiplied by ``factor``: per constant, the largest relative change of a prediction."""
    base = {r["name"]: r["model"] for r in calibration_rows(machine, ("predicted",))}
    out = {}
    for name in ASSUMED:
        worst = {}
        for f in (1 / factor, factor):
            rows = calibration_rows(machine.replace(**{name: getattr(machine, name) * f}), ("predicted",))
            worst[f"x{f:g}"] = max(abs(r["model"] / base[r["name"]] - 1) for r in rows)
        out[name] = worst
    return out


# ------------------------------------------------------------------ command line

def constant_table(machine: Machine = DEFAULT) -> list[dict[str, Any]]:
    """Every machine constant: value, source category and citation."""
    return [{"name": k, "value": v, "category": CATEGORIES[k], "source": SOURCES[k]}
            for k, v in machine.to_dict().items()]


def command(args: argparse.Namespace) -> int:
    """``spyre-adapter calibrate`` (arguments checked by :mod:`spyre_adapter.cli.bench`):
    run the fit, print the table, write the JSON."""
    out = Path(args.json)
    t0 = time.perf_counter()
    result = fit()
    fitted = DEFAULT.replace(**result["values"])
    rows = calibration_rows(fitted)
    print("fitted on:", "; ".join(result["fit_points"]))
    for n, v in result["values"].items():
        print(f"  {n} = {v:.4g} (default {getattr(DEFAULT, n):.4g})")
    print(f"\n{'role':<10} {'provenance':<13} {'ours?':<7} {'measured':>10} {'model':>10} {'error':>8}  point")
    for r in rows:
        print(f"{r['role']:<10} {r['provenance']:<13} {'derived' if not r['independent'] else '':<7} "
              f"{r['measured']:>10.3f} {r['model']:>10.3f} {r['error']:>+8.1%}  {r['name']} [{r['unit']}]")
    print("provenance: measurement = a published figure measured on the card; reference-fit = a fitted parameter of "
          "torch-spyre's cost model. derived: one of our constants was taken from the same data.")
    s = summary(rows)
    print(f"\n{s['calibration_predicted_points']} held-out predictions (errors above are predictions except the "
          f"{s['calibration_fit_points']} fit rows): max |error| {s['calibration_predicted_error_max']:.1%}, "
          f"median {s['calibration_predicted_error_median']:.1%}")
    sens = {} if args.no_sensitivity else sensitivity(fitted)
    for name, w in sens.items():
        print(f"  assumed {name}: predictions move by up to {max(w.values()):.1%} when halved or doubled")
    doc = {"fit": result, "rows": rows, "summary": s, "constants": constant_table(fitted),
           "sensitivity_to_assumed": sens, "sources": SOURCES_CITED, "wall_s": time.perf_counter() - t0}
    out.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {out}")
    return 0

