"""``spyre-adapter bench``: the scheduler and the emulator against the physical limits.

Every kernel is planned for the card, checked, and simulated; its modeled time
is compared with the roofline (eta, against the datasheet roof and against the
sustained roof the simulator itself runs at) and its DRAM traffic with the
compulsory traffic (rho). Baselines are planned for the same kernels in the same
run and scored with the same denominators: one core; the best simple even split
(for GEMMs: LX-sized tiles, operands shared over the ring; for loop kernels:
every core, no LX planning); and the division torch-spyre's documented
work-division rules choose, with operands shared (:mod:`.baselines`). The calibration section reports
errors on held-out measurements only (:mod:`.calibration`), and our modeled
times are set against torch-spyre's own cost model (:mod:`.reference_model`).
GEMMs are built as
Kernel IR directly (planning and simulation only: an 8192^3 numeric matmul
would dominate the run); chains, the workload cases and the decoder block go
through ``torch.compile`` on the device and run on the emulator.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import dataclasses
import json
import math
import multiprocessing
import os
import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from rich.console import Console
from rich.table import Table

from spyre_shims import kernel_ir as kir
from spyre_shims.errors import UnsupportedKernelError
from spyre_shims.runtime import capture_graphs, reset_compiled

from spyre_adapter.backend import attention
from spyre_adapter.backend.session import current, use_machine
from spyre_adapter.backend.spyre import plan
from spyre_adapter.bench import baselines
from spyre_adapter.bench import calibration as cal
from spyre_adapter.bench import checks as bench_checks
from spyre_adapter.bench import speed as bench_speed
from spyre_adapter.bench import torch_spyre as rm
from spyre_adapter.emulator import metrics
from spyre_adapter.harness.console import Stages, make_console
from spyre_adapter.harness.on_device import run_compiled
from spyre_adapter.harness.timing import median_time
from spyre_adapter.model import timing
from spyre_adapter.model.buffer_specs import contiguous_buffer
from spyre_adapter.model.errors import DoesNotFit
from spyre_adapter.model.machine import DEFAULT, Machine
from spyre_adapter.model.rules import EmulatorError, static_check
from spyre_adapter.model.traffic import compulsory_bytes
from spyre_adapter.scheduler.kinds import work_of
from spyre_adapter.scheduler.loops import Division, model_group, plan_group
from spyre_adapter.scheduler.search import max_autotune
from spyre_adapter.workloads.runner import CompiledCache, run_case
from spyre_adapter.workloads.spec import load
from spyre_adapter.zoo import blocks as models

#: Llama-3.1-8B (hidden 4096, 32 heads, 8 KV heads, intermediate 14336) and
#: granite-3.3-8b (intermediate 12800) projections, prefill (2048 tokens) and
#: decode (12 tokens, as in the real-model workload files).
LLM_GEMMS = [
    ("llama8b.qo_proj", 2048, 4096, 4096), ("llama8b.kv_proj", 2048, 1024, 4096),
    ("llama8b.gate_up_proj", 2048, 14336, 4096), ("llama8b.down_proj", 2048, 4096, 14336),
    ("granite8b.gate_up_proj", 2048, 12800, 4096), ("granite8b.down_proj", 2048, 4096, 12800),
    ("llama8b.decode.qo_proj", 12, 4096, 4096), ("llama8b.decode.gate_up_proj", 12, 14336, 4096),
    ("llama8b.decode.down_proj", 12, 4096, 14336), ("llama8b.decode.lm_head", 12, 128256, 4096),
]
SQUARE = (512, 1024, 2048, 4096, 8192)


def gemm_kernel(name: str, m: int, n: int, k: int) -> kir.ExternKernel:
    """Kernel IR of an fp16 ``(m, k) @ (k, n)``."""
    return kir.ExternKernel(name, "mm", (contiguous_buffer("a", (m, k)), contiguous_buffer("b", (k, n))),
                            contiguous_buffer("c", (m, n), role="output"), ("a", "b", "c"))


# ------------------------------------------------------------------ one kernel

def _measure(kernel: kir.Kernel, m: Machine, program: Any = None) -> tuple[metrics.Metrics, str | None]:
    """Metrics of a kernel's program on ``m`` (simulated; compulsory bytes from the
    kernel's reference semantics), and the hardware-rule error, if any."""
    p = program if program is not None else plan(kernel, m, {})
    kernel = p.kernel if p.kernel is not None else kernel  # the planner may complete a captured layout
    error = None
    peaks: dict[int, int] = {}
    try:
        peaks = static_check(p, m, {b.name: int(b.storage_numel) for b in kernel.buffers} |
                             {n: k for n, _, k in p.workspace})
    except EmulatorError as exc:
        error = str(exc)
    comp = compulsory_bytes(kernel, None, {})
    return metrics.compute(p, timing.simulate(p, m, keep_events=False), m, comp, max(peaks.values(), default=0),
                           work_of(kernel)), error


def _is_matmul(kernel: kir.Kernel) -> bool:
    return isinstance(kernel, kir.ExternKernel) and kernel.op in ("mm", "bmm")


def _even_split(kernel: kir.Kernel, m: Machine, main: Any) -> Any:
    """The even-split baseline: for a matmul the best simple even split with
    LX-sized tiles (:func:`.baselines.lx_even_split`); for a loop kernel every core
    it can use, no LX planning; for the hand-written attention its own program
    ``main`` (it already splits its units evenly)."""
    if isinstance(kernel, kir.ExternKernel) and not _is_matmul(kernel):
        return main
    if isinstance(kernel, kir.ExternKernel):
        return baselines.lx_even_split(kernel, m)
    gm = model_group(kernel, m, {}, lx_planning=False)
    units = max(1, -(-gm.rows // gm.unit)) if gm.rows else 1
    return plan_group(kernel, m, {}, kernel.name, force=Division(min(units, m.cores)), lx_planning=False)


def _torch_spyre(kernel: kir.Kernel, m: Machine) -> Any:
    """The torch-spyre-rules baseline; None for a kernel those rules do not cover
    (the hand-written attention) or one whose division has no program here."""
    if isinstance(kernel, kir.ExternKernel) and not _is_matmul(kernel):
        return None
    try:
        return baselines.torch_spyre_rules(kernel, m)
    except (DoesNotFit, EmulatorError):
        return None


def _versus(main: metrics.Metrics, b: metrics.Metrics) -> dict[str, Any]:
    """A baseline's figures against the plan's own bounds (same denominators)."""
    return {"modeled_ns": b.modeled_ns, "eta_sustained": main.bound_sustained_ns / b.modeled_ns,
            "eta_datasheet": main.bound_datasheet_ns / b.modeled_ns,
            "eta_dram": main.dram_bound_ns / b.modeled_ns, "rho": b.rho, "cores": b.cores_used,
            "grid": b.plan.get("grid"), "tile": b.plan.get("tile"), "share": b.plan.get("share"),
            "speedup_of_plan": b.modeled_ns / main.modeled_ns}


#: Kernels up to this many multiply-accumulates (or elements) also run their
#: program on the emulator with every check, against the reference semantics.
EXECUTE_MAX_MACS = 1024**3


def _in_summary(kernel: kir.Kernel) -> bool:
    """A GEMM whose every dimension is at least 2048: the summary's GEMM set."""
    if not _is_matmul(kernel):
        return False
    (mm, kk), nn = kernel.inputs[-2].size, kernel.inputs[-1].size[-1]
    return min(int(mm), int(kk), int(nn)) >= 2048


def _flops(kernel: kir.Kernel) -> int:
    if isinstance(kernel, kir.ExternKernel) and kernel.op in ("mm", "addmm"):
        (mm, kk), nn = kernel.inputs[-2].size, kernel.inputs[-1].size[-1]
        return int(mm) * int(kk) * int(nn)
    return sum(int(b.storage_numel) for b in kernel.buffers)


def kernel_row(kernel: kir.Kernel, source: str, label: str, m: Machine, single_core: bool = True,
               baselines_too: bool = True) -> dict[str, Any]:
    """The benchmark row of one kernel: the planned program and the baselines
    (``single_core``: also plan it for one core; ``baselines_too`` off: none).
    A kernel no program fits is a row with the reason (``unplannable``): a
    finding of the run, never its end. ``wall_s``: what the row took (planning,
    executing and the baselines), for the run's time budget."""
    t0 = time.perf_counter()
    row = _kernel_row(kernel, source, label, m, single_core, baselines_too)
    row["wall_s"] = time.perf_counter() - t0
    return row


def _kernel_row(kernel: kir.Kernel, source: str, label: str, m: Machine, single_core: bool,
                baselines_too: bool) -> dict[str, Any]:
    try:
        program = plan(kernel, m, {})
    except (DoesNotFit, UnsupportedKernelError) as exc:
        return {"name": label, "source": source, "kind": None, "unplannable": str(exc), "check_error": None}
    main, error = _measure(kernel, m, program)
    row = {"name": label, "source": source, "kind": main.kind, "modeled_ns": main.modeled_ns,
           "eta_sustained": main.eta_sustained, "eta_datasheet": main.eta_datasheet, "eta_dram": main.eta_dram,
           "rho": main.rho, "core_balance": main.core_balance, "lx_peak": main.lx_peak, "cores": main.cores_used,
           "dram_bytes": main.dram_bytes, "compulsory_bytes": main.compulsory_bytes, "flops": main.flops,
           "plan": main.plan, "check_error": error}
    # (the hand-written attention kernel is checked against its reference in its own tests)
    if not (isinstance(kernel, kir.ExternKernel) and kernel.op == "attention"):
        if _flops(kernel) <= EXECUTE_MAX_MACS:
            row.update(bench_checks.execute_row(kernel, m, program=program))
        elif _in_summary(kernel):
            # the summary's figures come from programs that ran: one checked launch
            row.update(bench_checks.execute_row(kernel, m, program=program, replays=False))
    row["lx_over_capacity"] = max(row["lx_peak"], row.get("lx_peak_executed", 0)) > m.lx_usable_bytes
    if not baselines_too:
        return row
    # Baselines are measured against the whole card's roofline, like the plan. One
    # that has no program on this machine is recorded as such (None, with why).
    if single_core:
        row["single_core"] = _baseline(row, "single_core", lambda: _measure(kernel, m.replace(cores=1))[0], main)
    row["even_split"] = _baseline(row, "even_split",
                                  lambda: _measure(kernel, m, _even_split(kernel, m, program))[0], main)
    ts = _torch_spyre(kernel, m)
    row["torch_spyre_rules"] = _versus(main, _measure(kernel, m, ts)[0]) if ts is not None else None
    if _is_matmul(kernel):
        row["max_autotune"] = _autotuned(kernel, m, main, row)
    return row


_RAN = ("executed", "matches_reference", "max_abs_error")


def _autotuned(kernel: kir.Kernel, m: Machine, main: metrics.Metrics, row: Mapping[str, Any]) -> dict[str, Any]:
    """The kernel planned with max-autotune (:mod:`spyre_adapter.scheduler.search`),
    against the default plan's bounds; a program other than the default plan's
    runs once with every check where the default plan's did."""
    t0 = time.perf_counter()
    with max_autotune():
        program = plan(kernel, m, {})
    measured = _measure(kernel, m, program)[0]
    got = _versus(main, measured) | {"order": measured.plan.get("order"), "plan_s": time.perf_counter() - t0}
    if measured.plan == main.plan and measured.modeled_ns == main.modeled_ns:
        got |= {k: row.get(k) for k in _RAN} | {"same_as_default": True}
    elif row.get("executed") is not None:
        ran = bench_checks.execute_row(kernel, m, program=program, replays=False)
        got |= {k: ran.get(k) for k in _RAN}
    return got


def _baseline(row: dict[str, Any], key: str, measure: Callable[[], metrics.Metrics],
              main: metrics.Metrics) -> dict[str, Any] | None:
    try:
        return _versus(main, measure())
    except DoesNotFit as exc:
        row.setdefault("baselines_unplannable", {})[key] = str(exc)
        return None


# ------------------------------------------------------------------ sections

#: GEMMs up to this many multiply-accumulates also build the baseline planners'
#: programs. Beyond it each baseline builds and simulates several programs of
#: millions of steps (8192^3: over half an hour each on a 2-core machine); the
#: summary compares ours with the baselines on the GEMMs both ran.
BASELINE_MAX_MACS = 4096**3


def bench_gemms(m: Machine, quick: bool, workers: int | None = None,
                shapes: Sequence[tuple[str, int, int, int]] | None = None) -> list[dict[str, Any]]:
    """The GEMM rows (``shapes``: (name, M, N, K); default the square and LLM
    sets), computed by ``workers`` processes (default: one for ``quick``, else one
    per core, at most 2): each row plans, simulates and checks one GEMM alone and
    its figures are modeled, so rows computed side by side are the same rows.
    Returned in the order of ``shapes``."""
    if shapes is None:
        shapes = [(f"square.{s}", s, s, s) for s in SQUARE if not quick or s <= 2048] + \
            [g for g in LLM_GEMMS if not quick]
    if workers is None:
        workers = 1 if quick else min(2, os.cpu_count() or 1)
    jobs = [(m, *shape) for shape in shapes]
    if workers <= 1 or len(jobs) <= 1:
        return [_gemm_row(job) for job in jobs]
    # Largest first, so the longest row does not start last; spawned workers
    # (no state forked from this process: its session, caches and threads), one
    # intra-op thread each (two processes on two cores: threads would contend).
    order = sorted(range(len(jobs)), key=lambda i: -math.prod(jobs[i][2:]))
    with concurrent.futures.ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"),
                                                initializer=torch.set_num_threads, initargs=(1,)) as pool:
        done = dict(zip(order, pool.map(_gemm_row, [jobs[i] for i in order])))
    return [done[i] for i in range(len(jobs))]


def _gemm_row(job: tuple[Machine, str, int, int, int]) -> dict[str, Any]:
    m, name, mm, nn, kk = job
    with use_machine(m):
        # one core of a big GEMM is slow to simulate and says little: up to 2048^3
        row = kernel_row(gemm_kernel(name, mm, nn, kk), "gemm", name, m, single_core=mm * nn * kk <= 2048**3,
                         baselines_too=mm * nn * kk <= BASELINE_MAX_MACS)
    row["shape"] = [mm, nn, kk]
    return row


def _rms(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return w * (x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-5)).to(x.dtype)


def _rope(q: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    h = q.shape[-1] // 2
    return q * cos + torch.cat([-q[..., h:], q[..., :h]], -1) * sin


#: name -> (function, input shapes); fp16, prefill-sized (2048 tokens of a 4096-wide model).
CHAINS: dict[str, tuple[Callable[..., Any], list[tuple[int, ...]]]] = {
    "rmsnorm": (_rms, [(2048, 4096), (4096,)]),
    "residual_rmsnorm": (lambda x, r, w: (x + r, _rms(x + r, w)), [(2048, 4096), (2048, 4096), (4096,)]),
    "layernorm": (lambda x, w, b: F.layer_norm(x, (x.shape[-1],), w, b), [(2048, 4096), (4096,), (4096,)]),
    "softmax": (lambda x: torch.softmax(x, -1), [(2048, 4096)]),
    "softmax_512x1024": (lambda x: torch.softmax(x, -1), [(512, 1024)]),
    "swiglu": (lambda a, b: F.silu(a) * b, [(2048, 14336), (2048, 14336)]),
    "gelu_bias": (lambda x, b: F.gelu(x + b), [(2048, 4096), (4096,)]),
    "rope": (_rope, [(1, 32, 2048, 128), (2048, 128), (2048, 128)]),
    # grouped-query attention: 8 KV heads expanded to 32 query heads (Llama-3.1-8B)
    "repeat_kv": (lambda k: k[:, :, None].expand(1, 8, 4, 2048, 128).reshape(1, 32, 2048, 128) * 1.0,
                  [(1, 8, 2048, 128)]),
    "scale_mask_softmax": (lambda s, m: torch.softmax(s * 0.088 + m, -1), [(32, 512, 512), (512, 512)]),
}


def _compiled_kernels(fn: Callable[..., Any], args: Sequence[torch.Tensor]) -> list[kir.Kernel]:
    reset_compiled()
    with capture_graphs() as graphs:
        run_compiled(fn, args)
    return [k for g in graphs for k in g.kernels]


def bench_chains(m: Machine, quick: bool) -> list[dict[str, Any]]:
    rows = []
    gen = torch.Generator().manual_seed(0)
    for name, (fn, shapes) in CHAINS.items():
        if quick and name not in ("rmsnorm", "softmax_512x1024", "swiglu"):
            continue
        args = [torch.randn(*s, generator=gen).half() for s in shapes]
        for k in _compiled_kernels(fn, args):
            if isinstance(k, kir.KernelGroup):
                rows.append(kernel_row(k, "chain", f"{name}/{k.name.rsplit('_', 1)[-1]}", m))
    return rows


def bench_workloads(m: Machine, files: Sequence[Path], max_numel: int | None) -> tuple[list[dict[str, Any]], dict]:
    rows: list[dict[str, Any]] = []
    status: dict[str, int] = {}
    for path in files:
        wf = load(path)
        cache = CompiledCache(reset_every=40)
        for spec in wf.cases:
            with capture_graphs() as graphs:
                rec = run_case(spec, wf, cache, max_numel)
            status[rec["status"]] = status.get(rec["status"], 0) + 1
            for g in graphs:
                for k in g.kernels:
                    rows.append(kernel_row(k, "workload", f"{wf.path.stem}:{spec.name}/{k.name.rsplit('_', 1)[-1]}",
                                           m))
        cache.clear()
    return rows, status


def bench_block(m: Machine, quick: bool) -> tuple[list[dict[str, Any]], dict[str, float]]:
    """The decoder block: its kernels, and emulator wall time over eager CPU."""
    cfg = models.ModelConfig() if quick else models.ModelConfig(hidden=1024, heads=8, kv_heads=2,
                                                                 intermediate=2816, seq=256)
    model = models.build("llama-block", cfg)
    x = models.example_inputs("llama-block", cfg)
    reset_compiled()
    with torch.no_grad():
        model(x)
        eager = median_time(lambda: model(x), 7)
        dev = model.to("spyre")
        compiled = torch.compile(dev, dynamic=False)
        xd = x.to("spyre")
        with capture_graphs() as graphs:
            compiled(xd)
        compiled(xd)
        emulated = median_time(lambda: compiled(xd), 7)
    rows = [kernel_row(k, "block", f"llama-block/{k.name.rsplit('_', 1)[-1]}", m)
            for g in graphs for k in g.kernels]
    return rows, {"eager_s": eager, "emulated_s": emulated, "ratio": emulated / eager, "config": dataclasses.asdict(cfg)}


#: (batch, heads, queries, keys, head dim, causal): Llama-3.1-8B prefill and a smaller case.
ATTENTION = [(1, 32, 2048, 2048, 128, True), (1, 8, 512, 512, 64, True)]


def bench_attention(m: Machine, quick: bool) -> list[dict[str, Any]]:
    """The hand-written attention kernel against the generic path (matmul,
    softmax, matmul through DRAM), both compiled and run in this run."""
    report = current().report
    rows = []
    gen = torch.Generator().manual_seed(0)
    for b, h, lq, lk, d, causal in ATTENTION[1:] if quick else ATTENTION:
        q, k, v = (torch.randn(b, h, n, d, generator=gen).half() for n in (lq, lk, lk))
        fn = lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=causal)  # noqa: E731
        times, errors = {}, {}
        expected = attention.reference(q, k, v, causal, 1.0 / math.sqrt(d)).float()
        for mode in ("handwritten", "generic"):
            reset_compiled()
            report.reset()
            ctx = current().generic_path() if mode == "generic" else contextlib.nullcontext()
            with ctx:
                out, _ = run_compiled(fn, (q, k, v))
            times[mode] = report.clock_ns
            errors[mode] = float((out.float() - expected).abs().max())
        rows.append({"shape": [b, h, lq, lk, d], "causal": causal, "handwritten_ns": times["handwritten"],
                     "generic_ns": times["generic"], "gain": times["generic"] / times["handwritten"],
                     "max_abs_error": errors})
    return rows


def calibration(m: Machine) -> list[dict[str, Any]]:
    """The model against torch-spyre's measurements of the real card: the fit
    points, the held-out predictions and the whole-compiler rows
    (:mod:`.calibration`)."""
    return cal.calibration_rows(m)


#: Reference comparison sample: configurations per category and the largest operand.
REFERENCE_SAMPLE = {True: (2, 4 * 2**20), False: (4, 8 * 2**20)}
#: The quick run compares the memory-bound categories only (their programs are cheap).
QUICK_REFERENCE_OPS = ("neg", "gelu", "add", "bcast", "bcastcol", "sumrow", "amax", "cat0", "cat1",
                       "softmax_row_tiling")


def reference_section(m: Machine = DEFAULT, quick: bool = False, path: str | Path | None = None) -> dict[str, Any]:
    """Our modeled device time against torch-spyre's cost model on a stratified
    sample of its sweep plan; ``{"skipped": reason}`` when the reference folder is
    not there."""
    reason = rm.skip_reason(path)
    if reason is not None:
        return {"skipped": reason}
    per_category, limit = REFERENCE_SAMPLE[quick]
    doc = rm.compare(path=path, m=m, per_category=per_category, limit_bytes=limit,
                     ops=QUICK_REFERENCE_OPS if quick else None)
    splits = rm.matmul_on_identical_splits(m, rm.load_cost_model(path),
                                           splits=rm.IDENTICAL_SPLITS[:1 if quick else None])
    return {k: doc[k] for k in ("per_category", "out_of_reference_scope", "configs_in_plan", "expressible_in_plan",
                                "compared", "per_category_sample", "skipped_reasons", "rows", "wall_s")} | \
        {"max_operand_bytes": limit, "quick_ops": list(QUICK_REFERENCE_OPS) if quick else None,
         "matmul_identical_splits": splits}


# ------------------------------------------------------------------ summary

def _geomean(xs: Iterable[float]) -> float:
    xs = [x for x in xs if x > 0]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else 0.0


def _vs_reference(ref: dict[str, Any]) -> dict[str, Any]:
    if "skipped" in ref:
        return {"skipped": ref["skipped"]}
    return {cat: {"mape": st["mape"], "spearman": st["spearman"], "n": st["n"], "basis": rm.basis(cat)}
            for cat, st in ref["per_category"].items()}


def _identical_splits(ref: dict[str, Any] | None) -> dict[str, Any] | None:
    """Ours over theirs on one GEMM forced to the same splits (both models, same program)."""
    splits = (ref or {}).get("matmul_identical_splits") or []
    if not splits:
        return None
    ratios = [r["ours_shared_over_theirs"] for r in splits]
    return {"n": len(ratios), "ours_over_theirs_min": min(ratios), "ours_over_theirs_max": max(ratios),
            "basis": "independent"}


def _baseline_geomean(rows: Sequence[dict[str, Any]], key: str, eta: str) -> float:
    return _geomean(r[key][eta] for r in rows if r.get(key))


def summarize(rows: list[dict[str, Any]], block: dict[str, float], calib: list[dict[str, Any]],
              extra: dict[str, Any], reference: dict[str, Any] | None = None) -> dict[str, Any]:
    """The headline figures. GEMM geomeans are over the GEMMs whose every dimension
    is at least 2048; baselines share the plan's denominators. Kernels without a
    program are counted and named, and left out of every figure."""
    unplanned = [{"name": r["name"], "reason": r["unplannable"]} for r in rows if "unplannable" in r]
    total, rows = len(rows), [r for r in rows if "unplannable" not in r]
    big = [r for r in rows if r["source"] == "gemm" and min(r["shape"]) >= 2048]
    chains = [r for r in rows if r["source"] == "chain"]
    return {
        "gemm_eta_sustained_geomean": _geomean(r["eta_sustained"] for r in big),
        "gemm_eta_datasheet_geomean": _geomean(r["eta_datasheet"] for r in big),
        "chain_rho_max": max((r["rho"] for r in chains), default=0.0),
        "chain_eta_dram_geomean": _geomean(r["eta_dram"] for r in chains),
        "emulator_over_eager": block.get("ratio", 0.0),  # replaced by the speed section's end-to-end figure
        # LX use as the allocator placed it (static check) and as the executed program reached it
        "lx_violations": sum(1 for r in rows if (r["check_error"] and "LX" in r["check_error"])
                             or r.get("lx_over_capacity")),
        "kernels_executed": sum(1 for r in rows if r.get("executed")),
        # every GEMM the geomeans above cover, run once with every check (not only simulated)
        "summary_gemms_executed": f"{sum(1 for r in big if r.get('executed'))}/{len(big)}",
        "executed_mismatches": sum(1 for r in rows if r.get("executed") and not r.get("matches_reference")),
        # the same programs launched as steady state does: recorded in dependence levels, then replayed
        "replayed_mismatches": sum(1 for r in rows if r.get("executed") and r.get("replay_matches_reference") is False),
        "execution_errors": sum(1 for r in rows if r.get("executed") is False),
        "check_errors": sum(1 for r in rows if r["check_error"]),
        "kernels_with_eta_over_1": sum(1 for r in rows if r["eta_sustained"] > 1 + 1e-9),
        "kernels_with_rho_under_1": sum(1 for r in rows if r["rho"] < 1 - 1e-9),
        "baseline_single_core_gemm_eta_geomean": _baseline_geomean(big, "single_core", "eta_sustained"),
        "baseline_lx_even_split_gemm_eta_geomean": _baseline_geomean(big, "even_split", "eta_sustained"),
        "baseline_lx_even_split_gemm_eta_datasheet_geomean": _baseline_geomean(big, "even_split", "eta_datasheet"),
        "baseline_torch_spyre_rules_gemm_eta_geomean": _baseline_geomean(big, "torch_spyre_rules", "eta_sustained"),
        "baseline_torch_spyre_rules_gemm_eta_datasheet_geomean": _baseline_geomean(big, "torch_spyre_rules",
                                                                                   "eta_datasheet"),
        # ours on exactly the GEMMs the baselines ran (the geomeans above cover every big GEMM)
        "gemm_eta_sustained_geomean_baselined": _geomean(r["eta_sustained"] for r in big if r.get("even_split")),
        "gemm_eta_datasheet_geomean_baselined": _geomean(r["eta_datasheet"] for r in big if r.get("even_split")),
        "gemms_baselined": [r["name"] for r in big if r.get("even_split")],
        # the same GEMMs planned with max-autotune (the planner's longer search; see scheduler/search.py)
        "gemm_eta_sustained_geomean_baselined_max_autotune": _geomean(
            r["max_autotune"]["eta_sustained"] for r in big if r.get("even_split") and r.get("max_autotune")),
        "gemm_eta_datasheet_geomean_baselined_max_autotune": _geomean(
            r["max_autotune"]["eta_datasheet"] for r in big if r.get("even_split") and r.get("max_autotune")),
        "gemms_max_autotune_executed": sum(1 for r in big if (r.get("max_autotune") or {}).get("executed")),
        "gemm_rho_geomean": _geomean(r["rho"] for r in big),
        "baseline_lx_even_split_gemm_rho_geomean": _baseline_geomean(big, "even_split", "rho"),
        "baseline_torch_spyre_rules_gemm_rho_geomean": _baseline_geomean(big, "torch_spyre_rules", "rho"),
        **{k: v for k, v in cal.summary(calib).items() if k != "calibration_fitted"},
        "vs_torch_spyre_cost_model": _vs_reference(reference) if reference is not None else {"skipped": "not run"},
        "matmul_identical_splits_vs_torch_spyre": _identical_splits(reference),
        "kernels": total,
        "kernels_unplannable": unplanned,
        **extra,
    }


#: Every section of the bench, in the order it runs.
SECTIONS = ("gemms", "chains", "workloads", "attention", "block", "calibration", "reference", "mutants", "speed")


def run_bench(m: Machine, quick: bool = False, workloads: Sequence[Path] = (), max_numel: int | None = None,
              console: Console | None = None, sections: Collection[str] = SECTIONS,
              reference_dir: str | Path | None = None) -> dict[str, Any]:
    """Run the ``sections`` (all by default); returns the JSON document."""
    log = Stages(console or make_console(stderr=True))  # a line per section, no source locations
    rows: list[dict[str, Any]] = []
    extra: dict[str, Any] = {}
    attn: list[dict[str, Any]] = []
    block: dict[str, Any] = {}
    calib: list[dict[str, Any]] = []
    reference: dict[str, Any] | None = None
    t0 = time.perf_counter()
    marks: list[tuple[str, float]] = []

    def section(name: str, message: str) -> None:
        marks.append((name, time.perf_counter()))
        log(message)

    with use_machine(m):
        if "gemms" in sections:
            section("gemms", "GEMMs (our plan, LX even split, torch-spyre's rules; a row per process, two at a time)"
                    if not quick else "GEMMs (our plan, LX even split, torch-spyre's rules)")
            rows += bench_gemms(m, quick)
        if "chains" in sections:
            section("chains", "chains")
            rows += bench_chains(m, quick)
        if workloads and "workloads" in sections:
            section("workloads", f"workloads: {', '.join(p.name for p in workloads)}")
            wl_rows, status = bench_workloads(m, workloads, max_numel)
            rows += wl_rows
            extra["workload_cases"] = status
        if "attention" in sections:
            section("attention", "hand-written attention vs the generic path")
            attn = bench_attention(m, quick)
            extra["attention_gain_min"] = min(r["gain"] for r in attn)
        if "block" in sections:
            section("block", "decoder block")
            block_rows, block = bench_block(m, quick)
            rows += block_rows
        if "calibration" in sections:
            section("calibration", "calibration (held-out measurements of the real card)")
            calib = calibration(m)
        if "reference" in sections:
            section("reference", "torch-spyre's cost model on its sweep plan")
            reference = reference_section(m, quick, reference_dir)
        if "mutants" in sections:
            section("mutants", "mutants of real kernels' programs")
            mut = bench_checks.mutation_section(m, per_operator=2 if quick else 3, quick=quick)
            extra.update({k: mut[k] for k in ("mutants", "mutants_killed", "mutants_killed_ratio",
                                              "mutants_killed_by_checker", "survivors")})
            extra["mutants_by_operator"] = mut["by_operator"]
            extra["mutants_by_kind"] = mut["by_kind"]
            if "rule_self_test" in mut:
                extra["checker_rule_self_test"] = mut["rule_self_test"]
    if "speed" in sections:
        section("speed", "compile time and emulator speed (fresh processes, one at a time)")
        speed = bench_speed.measure(quick, progress=lambda line: log(f"  {line}"))
        extra["speed"] = speed
        extra.update(bench_speed.summary(speed))
    extra["wall_s"] = time.perf_counter() - t0
    ends = [t for _, t in marks[1:]] + [time.perf_counter()]
    extra["section_wall_s"] = {name: end - t for (name, t), end in zip(marks, ends)}
    extra["sections"] = [s for s in SECTIONS if s in sections and (s != "workloads" or workloads)]
    return {"machine": m.to_dict(), "kernels": rows, "decoder_block": block, "calibration": calib,
            "vs_torch_spyre_cost_model": reference or {"skipped": "not run"}, "attention": attn,
            "summary": summarize(rows, block, calib, extra, reference)}


def _eta_pair(b: dict[str, Any] | None) -> str:
    return f"{b['eta_datasheet']:.3f} / {b['eta_sustained']:.3f}" if b else "-"


def print_bench(doc: dict[str, Any], console: Console | None = None) -> None:
    """The bench tables and the summary."""
    console = console or make_console()
    table = Table(title="GEMMs: eta against the datasheet roof / the sustained roof (the simulator runs at the "
                        "sustained rates, so the sustained eta measures only the model's own overheads); "
                        "baselines from the same run, same denominators")
    for col in ("gemm", "M x N x K", "us", "eta", "eta 1 core", "eta LX even split", "eta torch-spyre rules", "rho",
                "rho even / t-s", "plan"):
        table.add_column(col)
    for r in doc["kernels"]:
        if r["source"] == "gemm" and "unplannable" in r:
            table.add_row(r["name"], "x".join(map(str, r.get("shape", ()))), "-", f"no program: {r['unplannable']}")
        elif r["source"] == "gemm":
            ts, even = r.get("torch_spyre_rules"), r.get("even_split")
            table.add_row(r["name"], "x".join(map(str, r["shape"])), f"{r['modeled_ns'] / 1e3:.0f}",
                          _eta_pair(r), _eta_pair(r.get("single_core")), _eta_pair(even), _eta_pair(ts),
                          f"{r['rho']:.2f}", f"{even['rho']:.1f} / {ts['rho']:.1f}" if ts and even else "-",
                          f"{r['plan'].get('grid')} {r['plan'].get('order')} {r['plan'].get('tile')}")
    console.print(table)
    table = Table(title="chains (loop kernels)")
    for col in ("kernel", "us", "eta dram", "rho", "cores", "eta even split", "rho even split"):
        table.add_column(col)
    for r in doc["kernels"]:
        if r["source"] == "chain" and "unplannable" in r:
            table.add_row(r["name"], "-", f"no program: {r['unplannable']}")
        elif r["source"] == "chain":
            even = r.get("even_split")
            no_even = f"no program: {r.get('baselines_unplannable', {}).get('even_split', '?')}"
            table.add_row(r["name"], f"{r['modeled_ns'] / 1e3:.1f}", f"{r['eta_dram']:.3f}", f"{r['rho']:.2f}",
                          str(r["cores"]), f"{even['eta_dram']:.3f}" if even else no_even,
                          f"{even['rho']:.2f}" if even else "-")
    console.print(table)
    table = Table(title="hand-written attention vs the generic path (modeled device time)")
    for col in ("B x H x Lq x Lk x D", "causal", "hand-written us", "generic us", "gain", "max abs err"):
        table.add_column(col)
    for a in doc.get("attention", []):
        table.add_row("x".join(map(str, a["shape"])), str(a["causal"]), f"{a['handwritten_ns'] / 1e3:.1f}",
                      f"{a['generic_ns'] / 1e3:.1f}", f"{a['gain']:.2f}x", f"{a['max_abs_error']['handwritten']:.1e}")
    console.print(table)
    _print_calibration(doc["calibration"], console)
    _print_reference(doc.get("vs_torch_spyre_cost_model", {}), console)
    _print_speed(doc["summary"].get("speed", {}), console)
    console.print_json(json.dumps({k: v for k, v in doc["summary"].items() if k not in ("speed", "survivors")}))


def _print_speed(speed: dict[str, Any], console: Console) -> None:
    if not speed:
        return
    table = Table(title="compile time (first call less one steady call; fresh process, Inductor caches off) and "
                        "emulator speed (steady state, every program executed and its timing simulated)")
    for col in ("section", "model", "device", "first call s", "compile s", "steady s", "eager s", "steady / eager",
                "per process", "ATen floor / eager"):
        table.add_column(col)
    for section, rows in speed.items():
        for r in rows:
            model = {"block": f"block {r.get('hidden')}x{r.get('seq')}", "tiny": f"{r.get('layers')} layers"
                     + (" (regional)" if r.get("regional") else "") + (" (nested regions)" if r.get("nested") else ""),
                     "hf": f"transformers llama {r.get('layers')} layers"}
            dev = r.get("device", "spyre") + f" {r.get('dtype', '')}"
            if "error" in r:
                table.add_row(section, model.get(r["model"], r["model"]), dev, r["error"], "", "", "", "", "", "")
                continue
            eager = r.get("eager_s")
            table.add_row(section, model.get(r["model"], r["model"]), dev, f"{r['first_call_s']:.2f}",
                          f"{r['compile_s']:.2f}", f"{r['steady_s']:.3f}", f"{eager:.3f}" if eager else "-",
                          f"{r['steady_s'] / eager:.2f}" if eager else "-",
                          " ".join(f"{x:.2f}" for x in r.get("process_ratios", ())) or "-",
                          f"{r['floor_over_eager']:.2f}" if "floor_over_eager" in r else "-")
    console.print(table)


def _print_calibration(rows: Sequence[dict[str, Any]], console: Console) -> None:
    s = cal.summary(rows)
    table = Table(title=f"calibration against torch-spyre's measurements of the real card: "
                        f"{s['calibration_fit_points']} fit points, {s['calibration_predicted_points']} held-out "
                        "predictions (errors count only on those); 'stack' rows run our whole compiler")
    for col in ("role", "measurement", "unit", "measured", "model", "error"):
        table.add_column(col)
    for c in rows:
        table.add_row(c["role"], c["name"], c["unit"], f"{c['measured']:.3g}", f"{c['model']:.3g}",
                      f"{c['error']:+.1%}")
    console.print(table)


def _print_reference(ref: dict[str, Any], console: Console) -> None:
    if "skipped" in ref or not ref:
        console.print(ref.get("skipped", "torch-spyre cost model comparison not run"))
        return
    table = Table(title=f"our modeled time against torch-spyre's cost model: {ref['compared']} configurations "
                        f"(up to {ref['per_category_sample']} per category of the {ref['expressible_in_plan']} "
                        f"our device can express, of {ref['configs_in_plan']} in the sweep plan)")
    for col in ("category", "n", "MAPE", "Spearman", "ours / theirs (median)", "within their RMS band", "basis"):
        table.add_column(col)
    for cat, st in ref["per_category"].items():
        table.add_row(cat, str(st["n"]), f"{st['mape']:.1%}",
                      f"{st['spearman']:.3f}" if st["spearman"] is not None else f"- (n < {rm.MIN_SPEARMAN_N})",
                      f"{st['median_ratio']:.2f}",
                      f"{st['within_band']:.0%} of {st['published_rms_percent'][1]:g} %"
                      if st.get("within_band") is not None else "-", rm.basis(cat))
    console.print(table)
    splits = ref.get("matmul_identical_splits") or []
    if splits:
        t = Table(title="one 2048^3 fp16 GEMM forced to each split (us): ours with operand blocks shared over the "
                        "ring / each core reading its own, against torch-spyre's prediction")
        for col in ("split B,M,N,K", "ours shared", "DRAM MiB", "ours unshared", "DRAM MiB", "theirs",
                    "shared / theirs", "compute floor"):
            t.add_column(col)
        for r in splits:
            t.add_row(",".join(map(str, r["split"])), f"{r['ours_shared_us']:.1f}", f"{r['ours_shared_dram_mib']:.0f}",
                      f"{r['ours_unshared_us']:.1f}", f"{r['ours_unshared_dram_mib']:.0f}", f"{r['theirs_us']:.1f}",
                      f"{r['ours_shared_over_theirs']:.2f}", f"{r['compute_floor_us']:.1f}")
        console.print(t)


def command(args: argparse.Namespace) -> int:
    """``spyre-adapter bench`` (arguments checked by :mod:`spyre_adapter.cli.bench`)."""
    files = [wf.path for wf in args.workloads]  # checked (loaded) by the argument parser
    doc = run_bench(Machine.from_spec(args.machine) if args.machine else DEFAULT, args.quick, files, args.max_numel,
                    sections=tuple(args.sections), reference_dir=args.reference)
    if args.json:  # written first: the run is kept whatever printing it does
        Path(args.json).write_text(json.dumps(doc, indent=1, default=str) + "\n")
    print_bench(doc)
    return 0
