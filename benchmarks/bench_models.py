"""transformers model families on the emulated Spyre: compile time, emulator
speed and modeled decode time against the bandwidth roofline.

Per family (the same config, weights and prompt for every measurement):
  * spyre: ``spyre-adapter run --model hf:<family>`` (greedy decode, forward
    compiled with ``dynamic=True``, dynamic KV cache): tokens vs CPU eager,
    compiles/recompiles, fallbacks, compile wall time, modeled us per decode
    token, DRAM bytes per token, ratio to the roofline (weights read per token /
    DRAM bandwidth, 204.8 GB/s datasheet), emulator wall per decode token;
  * baseline in the same run: the same model, same steps, compiled with
    Inductor's own CPU backend (compile wall time, wall per decode token) and
    run eagerly on the CPU (wall per decode token).
Inductor's FX graph and AOTAutograd caches are off (environment, set before
torch is imported), so every compile is a real one. Wall times share this
machine with whatever else runs: read ratios, not absolute seconds.

    python benchmarks/bench_models.py --json results/models/bench.json
"""

from __future__ import annotations

import os

os.environ["TORCHINDUCTOR_FX_GRAPH_CACHE"] = "0"
os.environ["TORCHINDUCTOR_AUTOGRAD_CACHE"] = "0"

import argparse  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import torch  # noqa: E402

import spyre_adapter  # noqa: E402,F401
from spyre_adapter.cli.argcheck import ArgumentParser, int_range, output_file  # noqa: E402
from spyre_adapter.zoo.hf import DTYPES, FAMILIES, HFOptions, build_model, greedy, make_config, run_hf  # noqa: E402
from spyre_shims.compilation import count_compiles  # noqa: E402
from spyre_shims.runtime import reset_compiled  # noqa: E402

#: Big enough that decode reads megabytes of weights per token, small enough
#: to emulate in minutes on two cores.
SIZES = {"hidden": 1024, "intermediate": 2816, "heads": 16, "kv_heads": 4, "layers": 2, "vocab": 8192}


def inductor_cpu(opts: HFOptions) -> dict[str, Any]:
    """The same model and steps compiled with Inductor's CPU backend."""
    config = make_config(opts.family, opts.config_path, opts.sizes)
    model = build_model(config, DTYPES[opts.dtype], opts.seed, opts.family)
    g = torch.Generator().manual_seed(opts.seed + 1)
    ids = torch.randint(0, config.vocab_size, (opts.batch, opts.prompt), generator=g)
    reset_compiled()
    compiled = torch.compile(model.forward, dynamic=True)
    walls: list[float] = []

    def timed(*args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        out = compiled(*args, **kwargs)
        walls.append(time.perf_counter() - t0)
        return out

    model.forward = timed
    with count_compiles() as c, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        seq, _ = greedy(model, ids, opts)
    steady = walls[3:] or walls[-1:]  # decode steps after the three compiles of a dynamic run
    return {"compile_s": c.seconds, "compiles": c.compiles, "recompiles": c.recompiles,
            "wall_s_per_decode_token": sum(steady) / len(steady), "tokens": seq[0, opts.prompt:].tolist()}


def bench_family(family: str, dtype: str, prompt: int, new_tokens: int) -> dict[str, Any]:
    opts = HFOptions(family=family, dtype=dtype, shapes="dynamic", prompt=prompt, new_tokens=new_tokens,
                     sizes=dict(SIZES))
    t0 = time.perf_counter()
    r = run_hf(opts)
    spyre_wall = time.perf_counter() - t0
    cpu = inductor_cpu(opts)
    d = r["decode"]
    return {
        "family": family, "model_type": r["model_type"], "dtype": dtype, "config": r["config"],
        "weight_bytes": r["weight_bytes"], "weight_bytes_read_per_token": r["weight_bytes_read_per_token"],
        "tokens_identical_vs_eager": r["tokens_identical"], "max_abs_logit_error": r["max_abs_logit_error"],
        "fallbacks": len(r["fallbacks"]), "compiles": r["compile"]["compiles"], "recompiles": r["compile"]["recompiles"],
        "graph_breaks": r["compile"]["graph_breaks"],
        "compile_s_spyre": r["compile"]["seconds"], "compile_s_inductor_cpu": cpu["compile_s"],
        "compile_ratio_spyre_over_cpu": (r["compile"]["seconds"] / cpu["compile_s"]) if cpu["compile_s"] else None,
        "modeled_us_per_decode_token": d["modeled_us_per_token"],
        "roofline_us_per_decode_token": d["roofline_us_per_token"],
        "modeled_over_roofline": d["modeled_over_roofline"],
        "roofline_sustained_us_per_decode_token": d["roofline_sustained_us_per_token"],
        "dram_bytes_per_decode_token": d["dram_bytes_per_token"], "dram_over_weights": d["dram_over_weights"],
        "decode_launches_per_token": d["launches_per_step"],
        "prefill_modeled_us_per_token": r["prefill"]["modeled_us_per_token"],
        "emulator_wall_s_per_decode_token": d["steady_wall_s_per_token"],
        "eager_wall_s_per_decode_token": r["eager"]["decode"]["wall_s_per_token"],
        "emulator_over_eager": d["steady_wall_s_per_token"] / r["eager"]["decode"]["wall_s_per_token"],
        "inductor_cpu_wall_s_per_decode_token": cpu["wall_s_per_decode_token"],
        "inductor_cpu_compiles": cpu["compiles"],
        "spyre_run_wall_s": spyre_wall,
    }


def _table(rows: list[dict[str, Any]]) -> str:
    head = ("| family | recompiles | fallbacks | compile s spyre / Inductor CPU | modeled us/token | roofline us/token "
            "| modeled/roofline | DRAM/weights | emulator/eager wall | tokens = eager |")
    lines = [head, "|" + "---|" * 10]
    for r in rows:
        lines.append(f"| {r['family']} | {r['recompiles']} | {r['fallbacks']} | {r['compile_s_spyre']:.1f} / "
                     f"{r['compile_s_inductor_cpu']:.1f} ({r['compile_ratio_spyre_over_cpu']:.2f}x) | "
                     f"{r['modeled_us_per_decode_token']:.1f} | {r['roofline_us_per_decode_token']:.1f} | "
                     f"{r['modeled_over_roofline']:.2f} | {r['dram_over_weights']:.2f} | "
                     f"{r['emulator_over_eager']:.0f}x | {r['tokens_identical_vs_eager']} |")
    return "\n".join(lines)


def main() -> int:
    p = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--family", action="append", choices=sorted(FAMILIES), help="default: all")
    p.add_argument("--dtype", default="fp16", choices=sorted(DTYPES))
    p.add_argument("--prompt", type=int_range(1), default=16)
    p.add_argument("--new-tokens", type=int_range(1), default=8)
    p.add_argument("--json", type=output_file, help="write the results here (its folder must exist)")
    args = p.parse_args()
    rows = []
    for family in args.family or sorted(FAMILIES):
        rows.append(bench_family(family, args.dtype, args.prompt, args.new_tokens))
        print(_table(rows[-1:]).splitlines()[-1], flush=True)
    print(_table(rows))
    if args.json:
        doc = {"sizes": SIZES, "dtype": args.dtype, "prompt": args.prompt, "new_tokens": args.new_tokens,
               "torch": torch.__version__, "python": platform.python_version(), "machine": platform.machine(),
               "cores": os.cpu_count(), "families": rows, "table": _table(rows)}
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(doc, indent=1, default=str) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
