"""Our plan's modeled figures for the GEMMs of the bench summary (every dimension
>= 2048: square 2048/4096/8192 and the Llama/Granite prefill projections), one
GEMM per fresh process and no baseline planners, so the large shapes finish:
``python benchmarks/bench_gemm_plan.py --json results/bench/gemms_full.jsonl``.

Each line: η against the sustained and the datasheet roof, ρ, modeled time,
program steps, planning and measuring seconds; the geomean is printed at the end.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from spyre_adapter.backend.session import current
from spyre_adapter.backend.spyre import plan
from spyre_adapter.bench.suite import LLM_GEMMS, SQUARE, _measure, gemm_kernel
from spyre_adapter.cli.argcheck import ArgumentParser, output_file


def shapes() -> list[tuple[str, int, int, int]]:
    """The summary's GEMMs: every dimension at least 2048."""
    out = [(f"square.{s}", s, s, s) for s in SQUARE] + list(LLM_GEMMS)
    return [g for g in out if min(g[1:]) >= 2048]


def one(name: str, mm: int, nn: int, kk: int) -> dict[str, Any]:
    """Plan and measure one GEMM (in this process)."""
    m = current().machine
    kernel = gemm_kernel(name, mm, nn, kk)
    t0 = time.perf_counter()
    p = plan(kernel, m, {})
    t1 = time.perf_counter()
    met, err = _measure(kernel, m, p)
    return {"name": name, "shape": [mm, nn, kk], "eta_sustained": met.eta_sustained,
            "eta_datasheet": met.eta_datasheet, "rho": met.rho, "modeled_ns": met.modeled_ns,
            "cores": met.cores_used, "plan": str(met.plan), "check_error": err, "plan_s": t1 - t0,
            "measure_s": time.perf_counter() - t1, "instructions": sum(c.n_steps for c in p.cores)}


def main(argv: list[str] | None = None) -> int:
    ap = ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", type=output_file, required=True, help="JSON-lines output file")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        name, mm, nn, kk = json.loads(args.child)
        print(json.dumps(one(name, mm, nn, kk)))
        return 0
    rows = []
    with Path(args.json).open("w") as out:
        for g in shapes():
            done = subprocess.run([sys.executable, __file__, "--json", str(args.json), "--child", json.dumps(g)],
                                  capture_output=True, text=True)
            lines = [ln for ln in done.stdout.splitlines() if ln.startswith("{")]
            if done.returncode != 0 or not lines:
                print(f"{g[0]}: failed: {(done.stderr.strip().splitlines() or ['no output'])[-1]}", file=sys.stderr)
                continue
            row = json.loads(lines[-1])
            rows.append(row)
            out.write(json.dumps(row) + "\n")
            out.flush()
            print(f"{row['name']}: eta {row['eta_datasheet']:.3f} / {row['eta_sustained']:.3f}, "
                  f"plan {row['plan_s']:.0f} s", file=sys.stderr)
    if rows:
        geo = math.exp(sum(math.log(r["eta_sustained"]) for r in rows) / len(rows))
        print(f"gemm_eta_sustained_geomean over {len(rows)} GEMMs: {geo:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
