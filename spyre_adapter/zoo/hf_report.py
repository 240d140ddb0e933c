"""``spyre-adapter run --model hf:<family>``: run a transformers model (see
:mod:`.hf_models`) and print its check and its prefill/decode report."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from spyre_adapter.harness.console import make_console
from spyre_adapter.zoo.hf import HFOptions, run_hf


def print_hf(result: dict[str, Any], console: Console | None = None) -> None:
    """The run's result check, compile counts and per-phase device figures."""
    console = console or make_console()
    if result.get("status") == "does not fit":
        console.print(f"[bold]{result['model']}[/bold]: [red]does not fit[/red] - {result['detail']}")
        return
    ok = "[green]PASS[/green]" if result["passed"] else "[red]FAIL[/red]"
    precision = f"autocast {result['autocast']}" if result["autocast"] else result["dtype"]
    cfg = result["config"]
    console.print(f"[bold]{result['model']}[/bold] ({result['model_type']}, {cfg.get('num_hidden_layers')} layers, "
                  f"hidden {cfg.get('hidden_size')}, {precision}) greedy decode, {result['shapes']} shapes, "
                  f"{result['cache']} KV cache: {result['prompt_tokens']} prompt + {result['new_tokens']} new tokens")
    same = "identical" if result["tokens_identical"] else f"differ from token {result['first_differing_token']}"
    console.print(f"result check vs CPU eager: {ok}  tokens {same}; max abs logit error "
                  f"{result['max_abs_logit_error']:.2e} (allowed {result['atol']:.1e}) over "
                  f"{result['steps_compared']} step(s)")
    routing = result.get("routing", {})
    if routing.get("flipped"):
        # a near-tie resolved the other way is a rounding difference, not an error:
        # the check above compares with the reference routed as the device routed
        console.print(f"  expert routing: {len(routing['flipped'])} near-tie(s) of {routing['near_ties']} went the "
                      f"other way on the device; compared with the CPU reference routed the same way (error "
                      f"{routing['error_as_first_routed']:.2e} against the reference as first routed):")
        for text in routing["flipped"]:
            console.print(f"    {text}")
    elif "error_as_first_routed" in routing:
        console.print(f"  expert routing: no re-run of the reference with its {routing['near_ties']} near-tie(s) "
                      "resolved the other way matches the device")
    c = result["compile"]
    console.print(f"compiles: {c['compiles']} ({c['recompiles']} recompile(s)), graph breaks: {c['graph_breaks']}, "
                  f"host fallbacks: {len(result['fallbacks'])}")
    for msg in result["fallbacks"]:
        console.print(f"  [yellow]{msg}[/yellow]")
    console.print(f"weights: {result['weight_bytes'] / 2**20:.2f} MiB, read per decode token "
                  f"{result['weight_bytes_read_per_token'] / 2**20:.2f} MiB")
    table = Table(title="prefill and decode on the emulated Spyre: modeled device time per token (steps after "
                        "compiling), roofline = weights read per step / DRAM bandwidth")
    for col in ("phase", "steps", "kernels", "us/token", "DRAM KiB/token", "DRAM/weights", "roofline us/token",
                "x roofline", "emulator s/token", "eager ms/token"):
        table.add_column(col, justify="left" if col == "phase" else "right")
    for phase in ("prefill", "decode"):
        p, e = result[phase], result["eager"][phase]
        if not p.get("steps"):
            continue
        table.add_row(phase, str(p["steps"]), f"{p['kernels_per_step']}", f"{p['modeled_us_per_token']:.2f}",
                      f"{p['dram_bytes_per_token'] / 1024:.1f}", f"{p['dram_over_weights']:.2f}",
                      f"{p['roofline_us_per_token']:.2f}", f"{p['modeled_over_roofline']:.1f}",
                      f"{p['steady_wall_s_per_token']:.3f}", f"{e['wall_s_per_token'] * 1e3:.2f}")
    console.print(table)
    d = result["decode"]
    if d.get("steps") and "plans_per_step" in d:
        # of the emulator's wall time per decode token, what new run-time sizes cost
        console.print(f"decode, new run-time sizes: {d['plans_per_step']:.1f} program(s) planned and "
                      f"{d.get('binds_per_step', 0.0):.1f} bound from size templates per step; "
                      f"{d['plan_ms_per_token']:.1f} ms planning and binding, "
                      f"{d['first_launch_ms_per_token']:.1f} ms first launches per token")
    lx = result["device"]["lx_residency"]
    console.print(f"LX residency across kernels: {lx['kept']} buffer(s) kept ({lx['bytes_kept'] / 1024:.0f} KiB)"
                  + ("; kernels with symbolic sizes are not planned for residency yet"
                     if result["shapes"] == "dynamic" else ""))
    if result.get("note"):
        console.print(f"note: {result['note']}")


def main_hf(opts: HFOptions, json_path: str | None = None) -> int:
    """Run, print, optionally write JSON; exit status 0 on pass."""
    result = run_hf(opts)
    print_hf(result)
    if json_path:
        Path(json_path).write_text(json.dumps(result, indent=2, default=str) + "\n")
    return 0 if result["passed"] else 1
