"""Collective bandwidth over the emulated cards, as nccl-tests reports it.

Run one process per card under torchrun::

    torchrun --nproc-per-node 4 -m spyre_adapter.bench.collectives --json results/distributed/busbw_4.json

For all_reduce and all_gather at sizes 4 KiB .. 256 MiB each rank runs the
collective on spyre tensors through the ``sccl`` backend. Per size, rank 0
prints nccl-tests' figures for the modeled link time the card's report
recorded (algbw = size / time, busbw = algbw x the op's bus factor) and
``eta`` = busbw / ``link_gbps``, the algorithm model's efficiency against the
link's roof. These are figures *of the model* (its algorithms over its own link
constants, ``link_latency_ns`` being assumed): they say how much of the link an
algorithm leaves to latency, not how fast a real card is. The ``program``
columns are the same collective compiled (``torch.compile`` of the functional
collective): the modeled time of the card's program as the emulator ran it -
its link exchanges and the cores' reduction or copy, in as many stages as its
planner chose - with its busbw and eta. The ``host`` columns are measured: the
wall time of the eager collective through gloo on this host (what emulating it
costs), with its own algbw and busbw.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol

from spyre_adapter.backend.session import current
from spyre_adapter.model.collectives import BUS_FACTOR

__all__ = ["SIZES", "run", "main"]

#: 4 KiB .. 256 MiB, a factor of 4 apart (nccl-tests' -b 4K -e 256M -f 4).
SIZES = [4096 * 4**k for k in range(9)]
OPS = ("all_reduce", "all_gather")


def _once(op: str, nbytes: int, n: int) -> None:
    if op == "all_reduce":
        x = torch.empty(nbytes // 4, device="spyre")
        dist.all_reduce(x)
    else:  # nbytes: the gathered buffer, as nccl-tests counts it
        out = torch.empty(nbytes // 4, device="spyre")
        dist.all_gather_into_tensor(out, torch.empty(nbytes // 4 // n, device="spyre"))


def _all_reduce(t: torch.Tensor) -> torch.Tensor:
    return funcol.all_reduce(t, "sum", dist.group.WORLD)


def _all_gather(t: torch.Tensor) -> torch.Tensor:
    return funcol.all_gather_tensor(t, 0, dist.group.WORLD)


#: The functional collectives compiled once for every size (a program planned per size at its launch).
_COMPILED = {"all_reduce": torch.compile(_all_reduce, dynamic=True),
             "all_gather": torch.compile(_all_gather, dynamic=True)}


def _program(op: str, nbytes: int, n: int, repeats: int) -> tuple[float, int]:
    """(modeled ns of the compiled collective's program, median of ``repeats``
    launches after the checked first, and its stages)."""
    report = current().report
    fn = _COMPILED[op]
    x = torch.ones(nbytes // 4 // (1 if op == "all_reduce" else n), device="spyre")
    report.keep_programs = True
    fn(x)  # compile and the checked first launch
    def collective_ns() -> float:  # the collective's kernel only (all_reduce lowers to a clone, then the kernel)
        return sum(r["modeled_ns"] for r in report.per_kernel() if r["kind"] == "collective")

    times = []
    for _ in range(repeats):
        dist.barrier()
        before = collective_ns()
        fn(x)
        times.append(collective_ns() - before)
    stages = max((p.plan.stages for p in report.programs.values() if p.kind == "collective"), default=0)
    if not times or min(times) <= 0 or not stages:
        raise RuntimeError(f"compiled {op} of {nbytes} B ran no collective program (see the fallback warnings)")
    report.keep_programs = False
    report.programs.clear()
    return statistics.median(times), stages


def run(sizes: list[int], repeats: int = 3) -> list[dict[str, Any]]:
    """Rows of op, size, modeled and host figures (every rank runs; rank 0's rows are returned everywhere)."""
    n = dist.get_world_size()
    report = current().report
    link = current().machine.link_gbps
    rows = []
    for op in OPS:
        for size in sizes:
            _once(op, size, n)  # warm-up (allocation, first touch)
            walls, modeled = [], []
            for _ in range(repeats):
                dist.barrier()
                before = report.link_ns
                t0 = time.perf_counter()
                _once(op, size, n)
                walls.append(time.perf_counter() - t0)
                modeled.append(report.link_ns - before)
            ns = statistics.median(modeled)
            wall_ns = statistics.median(walls) * 1e9
            factor = BUS_FACTOR[op](n)
            prog_ns, stages = _program(op, size, n, repeats)
            rows.append({"op": op, "ranks": n, "bytes": size, "modeled_us": ns / 1e3,
                         "algbw_gbps": size / ns, "busbw_gbps": size / ns * factor,
                         "eta": size / ns * factor / link, "program_us": prog_ns / 1e3,
                         "program_busbw_gbps": size / prog_ns * factor, "program_eta": size / prog_ns * factor / link,
                         "program_stages": stages, "host_us": wall_ns / 1e3,
                         "host_algbw_gbps": size / wall_ns, "host_busbw_gbps": size / wall_ns * factor})
    return rows


def _table(rows: list[dict[str, Any]], link: float) -> str:
    head = (f"{'op':<11}{'ranks':>6}{'size':>12}{'modeled us':>12}{'algbw GB/s':>12}{'busbw GB/s':>12}"
            f"{'eta':>7}{'program us':>12}{'stages':>7}{'prog eta':>9}{'host us':>12}{'host busbw':>12}")
    lines = [f"link roof: {link:g} GB/s per direction (link_gbps); eta = busbw / roof (the model's figures; "
             "program: the compiled collective's program, link and cores)", head]
    for r in rows:
        lines.append(f"{r['op']:<11}{r['ranks']:>6}{r['bytes']:>12}{r['modeled_us']:>12.2f}{r['algbw_gbps']:>12.2f}"
                     f"{r['busbw_gbps']:>12.2f}{r['eta']:>7.3f}{r['program_us']:>12.2f}{r['program_stages']:>7}"
                     f"{r['program_eta']:>9.3f}{r['host_us']:>12.1f}{r['host_busbw_gbps']:>12.3f}")
    return "\n".join(lines)


def _args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m spyre_adapter.bench.collectives", description=__doc__.split("\n\n")[0])
    ap.add_argument("--max-bytes", type=int, default=SIZES[-1], help="largest size (default 256 MiB)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", default=None, help="write the rows here (rank 0)")
    args = ap.parse_args(argv)
    if args.max_bytes < SIZES[0]:
        ap.error(f"--max-bytes={args.max_bytes} is not accepted: expected at least {SIZES[0]}")
    if args.repeats < 1:
        ap.error(f"--repeats={args.repeats} is not accepted: expected a whole number >= 1")
    return args


def main(argv: list[str] | None = None) -> int:
    """Entry point under torchrun (one process per card)."""
    args = _args(argv)
    dist.init_process_group()
    try:
        rows = run([s for s in SIZES if s <= args.max_bytes], args.repeats)
        if dist.get_rank() == 0:
            print(_table(rows, current().machine.link_gbps))
            if args.json:
                with open(args.json, "w") as f:
                    json.dump({"machine": current().machine.to_dict(), "rows": rows}, f, indent=1)
    finally:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
