"""``spyre-adapter bench``: the scheduler and the emulator against the physical limits.

Every kernel is planned for the card, checked, and simulated; its modeled time
is compared with the roofline (eta) and its DRAM traffic with the compulsory
traffic (rho). Two baselines are planned for the same kernels in the same run:
one core, and an even split over all cores without LX reuse. GEMMs are built as
Kernel IR directly (planning and simulation only: an 8192^3 numeric matmul
would dominate the run); chains, the workload cases and the decoder block go
through ``torch.compile`` on the device and run on the emulator.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import math
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from rich.console import Console
from rich.table import Table

from spyre_shims import kernel_ir as kir
from spyre_shims.runtime import capture_graphs, reset_compiled

from . import models
from .backend import plan
from .context import current, use_machine
from .emulator import metrics
from .machine import DEFAULT, Machine
from .model import timing
from .model.rules import EmulatorError, static_check
from .model.traffic import compulsory_bytes
from .on_device import run_compiled
from .scheduler.loops import Division, model_group, plan_group
from .scheduler.matmul import plan_matmul
from .bench_speed import median_time
from .buffer_specs import contiguous_buffer
from .console import Stages, make_console
from .workloads.spec import load


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
    error = None
    peaks: dict[int, int] = {}
    try:
        peaks = static_check(p, m, {b.name: int(b.storage_numel) for b in kernel.buffers} |
                             {n: k for n, _, k in p.workspace})
    except EmulatorError as exc:
        error = str(exc)
    comp = compulsory_bytes(kernel, None, {})
    return metrics.compute(p, timing.simulate(p, m, keep_events=False), m, comp, max(peaks.values(), default=0)), error


def _naive(kernel: kir.Kernel, m: Machine) -> Any:
    if isinstance(kernel, kir.ExternKernel) and kernel.op == "attention":
        return plan(kernel, m, {})  # the hand-written kernel already splits its units evenly
    if isinstance(kernel, kir.ExternKernel):
        return plan_matmul(kernel, m, {}, kernel.name, naive=True)
    gm = model_group(kernel, m, {}, lx_planning=False)
    units = max(1, -(-gm.rows // gm.unit)) if gm.rows else 1
    return plan_group(kernel, m, {}, kernel.name, force=Division(min(units, m.cores)), lx_planning=False)


def kernel_row(kernel: kir.Kernel, source: str, label: str, m: Machine) -> dict[str, Any]:
    """The benchmark row of one kernel: the planned program and both baselines."""
    main, error = _measure(kernel, m)
    one, _ = _measure(kernel, m.replace(cores=1))
    even, _ = _measure(kernel, m, _naive(kernel, m))
    row = {"name": label, "source": source, "kind": main.kind, "modeled_ns": main.modeled_ns,
           "eta_sustained": main.eta_sustained, "eta_datasheet": main.eta_datasheet, "eta_dram": main.eta_dram,
           "rho": main.rho, "core_balance": main.core_balance, "lx_peak": main.lx_peak, "cores": main.cores_used,
           "dram_bytes": main.dram_bytes, "compulsory_bytes": main.compulsory_bytes, "flops": main.flops,
           "plan": main.plan, "check_error": error}
    # Baselines are measured against the whole card's roofline, like the plan.
    for key, b in (("single_core", one), ("even_split", even)):
        row[key] = {"modeled_ns": b.modeled_ns, "eta_sustained": main.bound_sustained_ns / b.modeled_ns,
                    "eta_datasheet": main.bound_datasheet_ns / b.modeled_ns,
                    "eta_dram": main.dram_bound_ns / b.modeled_ns, "rho": b.rho, "cores": b.cores_used,
                    "speedup_of_plan": b.modeled_ns / main.modeled_ns}
    return row


# ------------------------------------------------------------------ sections

def bench_gemms(m: Machine, quick: bool) -> list[dict[str, Any]]:
    shapes = [(f"square.{s}", s, s, s) for s in SQUARE if not quick or s <= 2048] + \
        [g for g in LLM_GEMMS if not quick or g[1] <= 2048 and g[2] <= 4096]
    rows = []
    for name, mm, nn, kk in shapes:
        row = kernel_row(gemm_kernel(name, mm, nn, kk), "gemm", name, m)
        row["shape"] = [mm, nn, kk]
        rows.append(row)
    return rows


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
    from .workloads.runner import CompiledCache, run_case

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
    from . import attention
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
            ctx = attention.generic_path() if mode == "generic" else contextlib.nullcontext()
            with ctx:
                out, _ = run_compiled(fn, (q, k, v))
            times[mode] = report.clock_ns
            errors[mode] = float((out.float() - expected).abs().max())
        rows.append({"shape": [b, h, lq, lk, d], "causal": causal, "handwritten_ns": times["handwritten"],
                     "generic_ns": times["generic"], "gain": times["generic"] / times["handwritten"],
                     "max_abs_error": errors})
    return rows


def calibration(m: Machine) -> list[dict[str, Any]]:
    """The model against torch-spyre's measurements of the real card."""
    gen = torch.Generator().manual_seed(0)
    softmax = _compiled_kernels(lambda x: torch.softmax(x, -1), [torch.randn(512, 1024, generator=gen).half()])[0]
    one = m.replace(cores=1)
    rows = []
    for lx, measured in ((True, 23.7e3), (False, 32.5e3)):
        p = plan_group(softmax, one, {}, "softmax", lx_planning=lx)
        model = timing.simulate(p, one).total_ns
        rows.append({"name": f"softmax (512,1024) fp16, 1 core, {'with' if lx else 'without'} LX planning",
                     "unit": "us", "measured": measured / 1e3, "model": model / 1e3})
    gemm = gemm_kernel("gemm", 1024, 1024, 1024)
    tl = timing.simulate(plan(gemm, one, {}), one)
    rows.append({"name": "sustained matmul, 1024^3 fp16 on 1 core", "unit": "MAC/ns/core",
                 "measured": 1140.0, "model": 1024**3 / tl.total_ns})
    big = torch.randn(4096, 4096, generator=gen).half()
    read = [k for k in _compiled_kernels(lambda x: x.float().sum(-1), [big]) if isinstance(k, kir.KernelGroup)][0]
    p = plan(read, m, {})
    rows.append({"name": "DRAM read: row sums of a 4096x4096 fp16 tensor, 32 cores", "unit": "GB/s",
                 "measured": 150.0, "model": compulsory_bytes(read, None, {}) / timing.simulate(p, m).total_ns})
    copy = [k for k in _compiled_kernels(lambda x: x * 2, [big]) if isinstance(k, kir.KernelGroup)][0]
    p = plan(copy, m, {})
    rows.append({"name": "DRAM mixed read/write: x*2 on a 4096x4096 fp16 tensor, 32 cores", "unit": "GB/s",
                 "measured": 105.0, "model": compulsory_bytes(copy, None, {}) / timing.simulate(p, m).total_ns})
    for r in rows:
        r["error"] = (r["model"] - r["measured"]) / r["measured"]
    return rows


# ------------------------------------------------------------------ summary

def _geomean(xs: Iterable[float]) -> float:
    xs = [x for x in xs if x > 0]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else 0.0


def summarize(rows: list[dict[str, Any]], block: dict[str, float], calib: list[dict[str, Any]],
              extra: dict[str, Any]) -> dict[str, Any]:
    big = [r for r in rows if r["source"] == "gemm" and min(r["shape"]) >= 2048]
    chains = [r for r in rows if r["source"] == "chain"]
    return {
        "gemm_eta_sustained_geomean": _geomean(r["eta_sustained"] for r in big),
        "gemm_eta_datasheet_geomean": _geomean(r["eta_datasheet"] for r in big),
        "chain_rho_max": max((r["rho"] for r in chains), default=0.0),
        "chain_eta_dram_geomean": _geomean(r["eta_dram"] for r in chains),
        "emulator_over_eager": block.get("ratio", 0.0),
        "lx_violations": sum(1 for r in rows if r["check_error"] and "LX" in r["check_error"]),
        "check_errors": sum(1 for r in rows if r["check_error"]),
        "kernels_with_eta_over_1": sum(1 for r in rows if r["eta_sustained"] > 1 + 1e-9),
        "kernels_with_rho_under_1": sum(1 for r in rows if r["rho"] < 1 - 1e-9),
        "baseline_single_core_gemm_eta_geomean": _geomean(r["single_core"]["eta_sustained"] for r in big),
        "baseline_even_split_gemm_eta_geomean": _geomean(r["even_split"]["eta_sustained"] for r in big),
        "calibration_error_max": max((abs(c["error"]) for c in calib), default=0.0),
        "kernels": len(rows),
        **extra,
    }


def run_bench(m: Machine, quick: bool = False, workloads: Sequence[Path] = (), max_numel: int | None = None,
              console: Console | None = None) -> dict[str, Any]:
    """Run every section; returns the JSON document."""
    log = Stages(console or make_console(stderr=True))  # a line per section, no source locations
    rows: list[dict[str, Any]] = []
    extra: dict[str, Any] = {}
    t0 = time.perf_counter()
    with use_machine(m):
        log("GEMMs")
        rows += bench_gemms(m, quick)
        log("chains")
        rows += bench_chains(m, quick)
        if workloads:
            log(f"workloads: {', '.join(p.name for p in workloads)}")
            wl_rows, status = bench_workloads(m, workloads, max_numel)
            rows += wl_rows
            extra["workload_cases"] = status
        log("hand-written attention vs the generic path")
        attn = bench_attention(m, quick)
        extra["attention_gain_min"] = min(r["gain"] for r in attn)
        log("decoder block")
        block_rows, block = bench_block(m, quick)
        rows += block_rows
        log("calibration")
        calib = calibration(m)
    extra["wall_s"] = time.perf_counter() - t0
    return {"machine": m.to_dict(), "kernels": rows, "decoder_block": block, "calibration": calib,
            "attention": attn, "summary": summarize(rows, block, calib, extra)}


def print_bench(doc: dict[str, Any], console: Console | None = None) -> None:
    console = console or make_console()
    table = Table(title="GEMMs (eta vs the sustained roof; baselines in the same run)")
    for col in ("gemm", "M x N x K", "us", "eta", "eta 1 core", "eta even split", "rho", "plan"):
        table.add_column(col)
    for r in doc["kernels"]:
        if r["source"] == "gemm":
            table.add_row(r["name"], "x".join(map(str, r["shape"])), f"{r['modeled_ns'] / 1e3:.0f}",
                          f"{r['eta_sustained']:.3f}", f"{r['single_core']['eta_sustained']:.3f}",
                          f"{r['even_split']['eta_sustained']:.3f}", f"{r['rho']:.2f}",
                          f"{r['plan'].get('grid')} {r['plan'].get('order')} {r['plan'].get('tile')}")
    console.print(table)
    table = Table(title="chains (loop kernels)")
    for col in ("kernel", "us", "eta dram", "rho", "cores", "eta even split", "rho even split"):
        table.add_column(col)
    for r in doc["kernels"]:
        if r["source"] == "chain":
            table.add_row(r["name"], f"{r['modeled_ns'] / 1e3:.1f}", f"{r['eta_dram']:.3f}", f"{r['rho']:.2f}",
                          str(r["cores"]), f"{r['even_split']['eta_dram']:.3f}", f"{r['even_split']['rho']:.2f}")
    console.print(table)
    table = Table(title="hand-written attention vs the generic path (modeled device time)")
    for col in ("B x H x Lq x Lk x D", "causal", "hand-written us", "generic us", "gain", "max abs err"):
        table.add_column(col)
    for a in doc.get("attention", []):
        table.add_row("x".join(map(str, a["shape"])), str(a["causal"]), f"{a['handwritten_ns'] / 1e3:.1f}",
                      f"{a['generic_ns'] / 1e3:.1f}", f"{a['gain']:.2f}x", f"{a['max_abs_error']['handwritten']:.1e}")
    console.print(table)
    table = Table(title="calibration against torch-spyre's measurements of the real card")
    for col in ("measurement", "unit", "measured", "model", "error"):
        table.add_column(col)
    for c in doc["calibration"]:
        table.add_row(c["name"], c["unit"], f"{c['measured']:.1f}", f"{c['model']:.1f}", f"{c['error']:+.1%}")
    console.print(table)
    console.print_json(json.dumps(doc["summary"]))


def command(args: argparse.Namespace) -> int:
    """``spyre-adapter bench`` (arguments checked by :mod:`spyre_adapter.bench_cli`)."""
    files = [wf.path for wf in args.workloads]  # checked (loaded) by the argument parser
    doc = run_bench(Machine.from_spec(args.machine) if args.machine else DEFAULT, args.quick, files, args.max_numel)
    print_bench(doc)
    if args.json:
        Path(args.json).write_text(json.dumps(doc, indent=1, default=str) + "\n")
    return 0
