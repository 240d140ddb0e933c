"""The main job: compile a model for the emulated Spyre device, run it, compare
with CPU eager, and report what the scheduler and the emulator did."""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from rich.console import Console
from rich.table import Table

from spyre_shims.device import eager_op_counts

from spyre_adapter.backend import compiler
from spyre_adapter.backend.session import current, set_machine
from spyre_adapter.harness.console import Stages, make_console
from spyre_adapter.harness.on_device import announced_fallbacks
from spyre_adapter.harness.timing import median_time
from spyre_adapter.harness.usage import ArgError, UsageError
from spyre_adapter.model.errors import DoesNotFit
from spyre_adapter.model.isa import listing
from spyre_adapter.model.machine import Machine
from spyre_adapter.model.rules import EmulatorError
from spyre_adapter.zoo import blocks as models
from spyre_adapter.zoo.config import is_hf, sizes_of

DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}
#: Default max abs error vs CPU eager by dtype (activations of O(1) magnitude).
ATOL = {"fp16": 5e-2, "bf16": 2.5e-1, "fp32": 1e-3}
#: Timed steady runs (their median), after one run that records the replayed steps.
STEADY_RUNS = 3


@dataclasses.dataclass
class RunOptions:
    model: str = "llama-block"
    dtype: str = "fp16"
    machine: str | None = None
    trace: str | None = None
    json_path: str | None = None
    listing: str | None = None
    top: int = 12
    atol: float | None = None
    sizes: dict[str, int] = dataclasses.field(default_factory=dict)
    nested_regions: bool = False
    max_autotune: bool = False


def run_model(opts: RunOptions, progress: Callable[[str], None] = lambda message: None) -> dict[str, Any]:
    """Compile and run; return the result check and the device report
    (``progress`` is told each stage)."""
    dtype = DTYPES[opts.dtype]
    cfg = dataclasses.replace(models.ModelConfig(), **opts.sizes, nested_regions=opts.nested_regions)
    machine = Machine.from_spec(opts.machine)
    set_machine(machine)
    compiler.install()
    progress(f"building {opts.model} ({opts.dtype}) and running it eagerly on the CPU")
    model = models.build(opts.model, cfg, dtype)
    x = models.example_inputs(opts.model, cfg, dtype)
    t0 = time.perf_counter()
    with torch.no_grad():
        expected = model(x)
    eager_s = time.perf_counter() - t0

    report = current().report
    report.reset()
    report.keep_timelines = opts.trace is not None
    report.keep_programs = opts.listing is not None
    dev_model = model.to("spyre")
    compiled = torch.compile(dev_model, dynamic=False, mode="max-autotune" if opts.max_autotune else None)
    progress("compiling for the spyre device and running on the emulator")
    eager_before = sum(eager_op_counts().values())
    with announced_fallbacks() as fallbacks:
        t0 = time.perf_counter()
        with torch.no_grad():
            out = compiled(x.to("spyre"))
        first_s = time.perf_counter() - t0
    # The report of one run (the first); the steady run below only measures wall time.
    if report.limits:  # a machine too small for a kernel of the model: bad input, not a fallback
        raise report.limits[0]
    summary = report.to_dict()
    per_kernel = sorted(report.per_kernel(), key=lambda r: -r["modeled_ns"])
    first_launches = list(report.launches)
    report.keep_timelines = False
    progress("steady runs (compiled code, no compilation)")
    with torch.no_grad():
        compiled(x.to("spyre"))  # records the program steps the runs after it replay
        steady_s = median_time(lambda: compiled(x.to("spyre")), STEADY_RUNS)
    got = out.cpu()
    err = (got.float() - expected.float()).abs()
    scale = expected.float().abs().max().item()
    atol = opts.atol if opts.atol is not None else ATOL[opts.dtype]
    result = {
        "model": opts.model, "dtype": opts.dtype, "config": dataclasses.asdict(cfg), "machine": machine.to_dict(),
        "max_abs_error": err.max().item(), "max_rel_error": err.max().item() / max(scale, 1e-12), "atol": atol,
        "passed": bool(err.max().item() <= atol and torch.isfinite(got).all()),
        "fallback_warnings": sorted(set(fallbacks)),
        "eager_ops_on_device": sum(eager_op_counts().values()) - eager_before,
        "timing_s": {"cpu_eager": eager_s, "first_run_with_compile": first_s, "emulated_steady": steady_s},
        "device": summary, "kernels": per_kernel,
    }
    if opts.trace:
        report.write_trace(opts.trace, first_launches)
    if opts.listing:
        Path(opts.listing).write_text("\n\n".join(listing(p) for p in report.programs.values()) + "\n")
        report.keep_programs = False
    return result


def print_result(result: dict[str, Any], top: int, console: Console | None = None) -> None:
    console = console or make_console()
    d = result["device"]
    ok = "[green]PASS[/green]" if result["passed"] else "[red]FAIL[/red]"
    console.print(f"[bold]{result['model']}[/bold] ({result['dtype']}) on the emulated IBM Spyre "
                  f"({result['machine']['cores']} cores, {result['machine']['lx_bytes'] // 1024} KiB LX per core)")
    console.print(f"result check vs CPU eager: {ok}  max abs error {result['max_abs_error']:.3e} "
                  f"(allowed {result['atol']:.1e}), max rel error {result['max_rel_error']:.2e}")
    fb = d["fallbacks"]
    console.print(f"kernels generated: {d['kernels_generated']} in {d['graphs']} graph(s); launches per run: "
                  f"{d['launches']}; fallbacks: {sum(fb.values())}" + (f" ({', '.join(f'{k} x{v}' for k, v in fb.items())})" if fb else ""))
    console.print(f"modeled device time: {d['modeled_device_ns'] / 1e3:.1f} us per run; DRAM traffic "
                  f"{d['dram_bytes'] / 2**20:.2f} MiB = {d['rho']:.2f}x compulsory")
    lx = d["lx_residency"]
    console.print(f"LX residency across kernels: {lx['kept']} buffer(s) kept in LX ({lx['bytes_kept'] / 1024:.0f} KiB) "
                  f"for {lx['readers_served']} reading kernel(s); {lx['stores_elided']} store(s) to DRAM elided")
    t = result["timing_s"]
    console.print(f"wall time: CPU eager {t['cpu_eager'] * 1e3:.1f} ms, first run incl. compile "
                  f"{t['first_run_with_compile']:.1f} s, emulated steady run {t['emulated_steady'] * 1e3:.1f} ms")
    table = Table(title=f"top {top} kernels by modeled time")
    for col in ("kernel", "kind", "time us", "cores", "division", "eta", "rho", "balance", "LX peak KiB"):
        table.add_column(col, justify="right" if col not in ("kernel", "kind", "division") else "left")
    for row in result["kernels"][:top]:
        desc = plan_summary(row["plan"])
        table.add_row(row["name"], row["kind"], f"{row['modeled_ns'] / 1e3 / max(row['launches'], 1):.2f}",
                      str(row["cores"]), desc, f"{row['eta_sustained']:.2f}", f"{row['rho']:.2f}",
                      f"{row['core_balance']:.2f}", f"{row['lx_peak'] / 1024:.0f}")
    console.print(table)


def plan_summary(plan: dict[str, Any]) -> str:
    """A program's work division in a few words."""
    if "grid" in plan and "order" in plan:
        b, m_, n, k = plan["grid"]
        return f"grid b{b} m{m_} n{n} k{k}, tile {'x'.join(map(str, plan['tile']))}, order {plan['order']}"
    if "block_q" in plan:
        return f"{plan['units']} query blocks of {plan['block_q']}, key blocks of {plan['block_kv']}"
    desc = f"{plan.get('row_cores')} row-cores x {plan.get('rsplit', 1)}"
    if plan.get("workspace"):
        desc += " in phases"
    return desc


def main_run(opts: RunOptions) -> int:
    result = run_model(opts, Stages())
    print_result(result, opts.top)
    if opts.json_path:
        Path(opts.json_path).write_text(json.dumps(result, indent=2, default=str) + "\n")
    if opts.trace:
        make_console().print(f"trace written to {opts.trace} (open in ui.perfetto.dev or chrome://tracing)")
    if opts.listing:
        make_console().print(f"program listing written to {opts.listing}")
    return 0 if result["passed"] else 1


def command(args: argparse.Namespace) -> int:
    """``spyre-adapter run`` (arguments checked by :mod:`spyre_adapter.cli.run`).
    A machine too small for a kernel is bad input: one line, exit status 2."""
    if is_hf(args):
        return _command_hf(args)
    opts = RunOptions(model=args.model, dtype=args.dtype or "fp16", machine=args.machine, trace=args.trace,
                      json_path=args.json, listing=args.listing, top=args.top, atol=args.atol, sizes=sizes_of(args),
                      nested_regions=args.nested_regions, max_autotune=args.max_autotune)
    try:
        return main_run(opts)
    except Exception as exc:
        limit = machine_limit(exc)
        if limit is None:
            raise
        if args.machine:
            raise ArgError("--machine", args.machine, f"too small: {limit}") from None
        raise UsageError(f"the model does not fit the machine: {limit}") from None


def _command_tp(args: argparse.Namespace) -> int:
    """``run --model hf:<family> --tp N``: the tensor-parallel runner
    (:mod:`spyre_adapter.zoo.tp`) in N processes, one card each, under torchrun."""
    import os
    import subprocess
    import sys

    argv = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={args.tp}",
            "-m", "spyre_adapter.zoo.tp", "--family", args.model.removeprefix("hf:"), "--dtype", args.dtype or "fp32",
            "--prompt", str(args.prompt), "--new-tokens", str(args.new_tokens)]
    for field, value in sizes_of(args).items():
        argv += [f"--{field.replace('_', '-')}", str(value)]
    if args.json:
        argv += ["--json", args.json]
    env = dict(os.environ)
    if args.machine:
        env["SPYRE_MACHINE"] = args.machine
    return subprocess.run(argv, env=env).returncode


def _command_hf(args: argparse.Namespace) -> int:
    """``run --model hf:<family>`` / ``--hf-config``: a transformers model, greedy decode."""
    if getattr(args, "tp", 1) > 1:
        return _command_tp(args)
    from spyre_adapter.zoo.hf import HFOptions
    from spyre_adapter.zoo.hf_report import main_hf

    set_machine(Machine.from_spec(args.machine))
    sizes = {k: v for k, v in sizes_of(args).items() if k != "seq"}
    opts = HFOptions(family=None if args.hf_config else args.model.removeprefix("hf:"), config_path=args.hf_config,
                     dtype=args.dtype or "fp32", autocast=args.autocast, shapes=args.shapes, cache=args.cache,
                     prompt=args.prompt, new_tokens=args.new_tokens, batch=sizes.pop("batch", 1), sizes=sizes,
                     atol=args.atol)
    return main_hf(opts, args.json)


def machine_limit(exc: BaseException) -> str | None:
    """The hardware limit behind ``exc`` (also when Inductor wrapped it), if any."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, DoesNotFit) or (
                isinstance(seen, EmulatorError) and seen.kind in ("allocation over capacity", "per-core span exceeded")):
            return str(seen)
        seen = seen.__cause__ or seen.__context__
    return None
