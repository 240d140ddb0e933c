"""Run under torchrun by tests/adapter/backend/test_compiled_collectives.py: a
compiled ``all_reduce`` on spyre tensors (``f(x) = all_reduce(2 x) + 1``) at
random sizes, dtypes and reduce ops, and a compiled all_gather_into_tensor and
reduce_scatter_tensor, each compared with the same collective on CPU tensors
through a separate gloo group (the reference), on the first launch (checked)
and on a replayed one. The all_reduce results of every rank are also compared
with each other bit for bit (a tensor-parallel model's ranks must agree).

Writes one JSON per rank into ``CHECK_OUT``: what was checked, the programs'
algorithms and listings' mnemonics, and the report's fallbacks."""

from __future__ import annotations

import json
import os
import random
import warnings
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol

import spyre_adapter
from spyre_adapter.backend.session import current
from spyre_adapter.harness.rank_exit import finish
from spyre_adapter.model import isa

spyre_adapter.register()
warnings.filterwarnings("ignore", category=FutureWarning)  # the reference's all_gather_into_tensor names

OPS = {"sum": dist.ReduceOp.SUM, "avg": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN,
       "product": dist.ReduceOp.PRODUCT}
DTYPES = [torch.float32, torch.float16, torch.bfloat16]


def _compiled(op: str) -> object:
    def f(x: torch.Tensor) -> torch.Tensor:
        return funcol.all_reduce(x * 2, op, dist.group.WORLD) + 1
    return torch.compile(f, dynamic=False)


def _gather_and_scatter(rng: random.Random, rank: int, n: int, dev: str, ref: object, seed: int,
                        checked: list[str]) -> None:
    """all_gather_into_tensor and reduce_scatter_tensor compiled, against gloo."""
    world = dist.group.WORLD
    for numel, dtype, op in [(rng.randint(1, 2000), rng.choice(DTYPES), rng.choice(["sum", "max", "avg"])),
                             (64 * rng.randint(1, 40), torch.float32, "sum")]:  # whole sticks: the copy overlaps
        g = torch.Generator().manual_seed(seed * 100 + rank + 50)
        x = (torch.rand(numel, generator=g) + 0.5).to(dtype)
        gathered = torch.empty(numel * n, dtype=dtype)
        dist.all_gather_into_tensor(gathered, x, group=ref)
        big = (torch.rand(numel * n, generator=g) + 0.5).to(dtype)
        scattered = torch.empty(numel, dtype=dtype)
        dist.reduce_scatter_tensor(scattered, big, OPS[op], group=ref)
        if op == "avg":
            scattered = (scattered / n).to(dtype)
        gather = torch.compile(lambda t: funcol.all_gather_tensor(t * 1, 0, world), dynamic=False)
        scatter = torch.compile(lambda t: funcol.reduce_scatter_tensor(t * 1, op, 0, world), dynamic=False)
        for name, fn, arg, want in (("all_gather_into_tensor", gather, x, gathered),
                                    ("reduce_scatter_tensor", scatter, big, scattered)):
            tag = f"{name}[{numel} {str(dtype)[6:]} {op if name.startswith('reduce') else '-'}]"
            for launch in ("checked", "replayed"):
                got = fn(arg.to(dev))
                assert got.device.type == "spyre", f"{tag}: result on {got.device}"
                torch.testing.assert_close(got.cpu(), want, msg=lambda m: f"{tag} {launch} rank {rank}: {m}")
            checked.append(tag)


def main() -> int:
    seed = int(os.environ.get("CHECK_SEED", "0"))
    dist.init_process_group()
    rank, n = dist.get_rank(), dist.get_world_size()
    dev = f"spyre:{torch.spyre.current_device()}"
    ref = dist.new_group(backend="gloo")
    rng = random.Random(seed)  # the same draws on every rank
    report = current().report
    report.keep_programs = True
    draws = [(rng.randint(1, 3000), rng.choice(DTYPES), op) for op in OPS]
    draws.append((rng.randint(40_000, 70_000), torch.float32, "sum"))  # big enough for a two-shot program
    draws.append((rng.randint(600_000, 700_000), torch.float32, "sum"))  # big enough for staged exchanges
    checked = []
    _gather_and_scatter(rng, rank, n, dev, ref, seed, checked)
    for numel, dtype, op in draws:
        g = torch.Generator().manual_seed(seed * 100 + rank)
        x = (torch.rand(numel, generator=g) + 0.5).to(dtype)
        want = (x * 2).to(dtype)
        dist.all_reduce(want, OPS[op], group=ref)
        want = ((want / n) if op == "avg" else want).to(dtype) + 1
        f = _compiled(op)
        tag = f"all_reduce[{numel} {str(dtype)[6:]} {op}]"
        for launch in ("checked", "replayed"):
            got = f(x.to(dev))  # type: ignore[operator]
            assert got.device.type == "spyre", f"{tag}: result on {got.device}"
            got = got.cpu()
            torch.testing.assert_close(got, want, msg=lambda m: f"{tag} {launch} rank {rank}: {m}")
            every = [torch.empty_like(got) for _ in range(n)]
            dist.all_gather(every, got, group=ref)
            assert all(torch.equal(every[0], e) for e in every), f"{tag} {launch}: ranks hold different results"
        checked.append(tag)
    programs = [p for p in report.programs.values() if p.kind == "collective"]
    summary = report.to_dict()
    result = {
        "rank": rank, "checked": checked, "ops": sorted({p.plan.op for p in programs}),
        "algorithms": sorted({p.plan.algorithm for p in programs}),
        "stages": sorted({p.plan.stages for p in programs}),
        "mnemonics": sorted({isa.describe(i)[0].split()[0] for p in programs for c in p.cores for i in c.steps}),
        "fallbacks": summary["fallbacks"], "collectives": summary["collectives"], "link_ns": summary["link_ns"],
    }
    Path(os.environ["CHECK_OUT"], f"rank{rank}.json").write_text(json.dumps(result))
    dist.barrier(group=ref)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    finish(main())
