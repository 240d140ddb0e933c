"""Run under torchrun by tests/adapter/backend/test_collectives.py: every
collective of torch.distributed on spyre tensors through the ``sccl`` backend,
each compared with the same collective on CPU tensors through a separate gloo
group (the reference), at a random size, dtype and reduce op per collective.

Prints one JSON line per rank: the collectives checked and the card's report.
Exits non-zero with the first mismatch."""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import torch
import torch.distributed as dist

import spyre_adapter
from spyre_adapter.harness.rank_exit import finish

spyre_adapter.register()

OPS = {"sum": dist.ReduceOp.SUM, "avg": dist.ReduceOp.AVG, "max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN,
       "product": dist.ReduceOp.PRODUCT}
DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.int32, torch.int64]


def main() -> int:
    seed = int(os.environ.get("CHECK_SEED", "0"))
    dist.init_process_group()  # the spyre default (sccl) and gloo for CPU
    rank, n = dist.get_rank(), dist.get_world_size()
    card = torch.spyre.current_device()
    dev = f"spyre:{card}"
    ref = dist.new_group(backend="gloo")
    rng = random.Random(seed)  # the same draws on every rank
    checked: list[str] = []

    def data(numel: int, dtype: torch.dtype, salt: int = 0) -> torch.Tensor:
        g = torch.Generator().manual_seed(seed * 1000 + rank * 10 + salt)
        if dtype.is_floating_point:
            return (torch.rand(numel, generator=g) + 0.5).to(dtype)  # products stay in range
        return torch.randint(1, 4, (numel,), generator=g, dtype=dtype)

    def same(name: str, got: torch.Tensor, want: torch.Tensor) -> None:
        assert got.device.type == "spyre", f"{name}: result on {got.device}"
        torch.testing.assert_close(got.cpu(), want, msg=lambda m: f"{name} rank {rank}: {m}")
        checked.append(name)

    for round_ in range(2):
        numel = n * rng.randint(1, 700)
        dtype = rng.choice(DTYPES[:3] if round_ == 0 else DTYPES)  # a float first, so that avg can be drawn
        opname = rng.choice(list(OPS))
        if opname == "avg" and not dtype.is_floating_point:
            opname = "sum"
        op = OPS[opname]
        tag = f"[{numel} {str(dtype)[6:]} {opname}]"
        x = data(numel, dtype)

        # all_reduce, async: the work completes, then the result is there
        y, r = x.to(dev), x.clone()
        work = dist.all_reduce(y, op=op, async_op=True)
        work.wait()
        assert work.is_completed()
        if opname == "avg":  # gloo has no average: the reference sums and divides
            dist.all_reduce(r, group=ref)
            r = r / n
        else:
            dist.all_reduce(r, op=op, group=ref)
        same(f"all_reduce{tag}", y, r)
        for other in ("sum", "max", "min", "product"):  # every reduce op at least once
            y, r = x.to(dev), x.clone()
            dist.all_reduce(y, op=OPS[other])
            dist.all_reduce(r, op=OPS[other], group=ref)
            same(f"all_reduce[{other}]", y, r)

        root = rng.randrange(n)
        y, r = x.to(dev), x.clone()
        dist.broadcast(y, src=root)
        dist.broadcast(r, src=root, group=ref)
        same(f"broadcast{tag}", y, r)

        y, r = x.to(dev), x.clone()
        red = op if opname != "avg" else dist.ReduceOp.SUM
        dist.reduce(y, dst=root, op=red)
        dist.reduce(r, dst=root, op=red, group=ref)
        if rank == root:
            same(f"reduce{tag}", y, r)

        outs = [torch.empty(numel, dtype=dtype, device=dev) for _ in range(n)]
        refs = [torch.empty(numel, dtype=dtype) for _ in range(n)]
        dist.all_gather(outs, x.to(dev))
        dist.all_gather(refs, x, group=ref)
        same(f"all_gather{tag}", torch.stack(outs), torch.stack(refs))

        out, rout = torch.empty(numel * n, dtype=dtype, device=dev), torch.empty(numel * n, dtype=dtype)
        dist.all_gather_into_tensor(out, x.to(dev))
        dist.all_gather_into_tensor(rout, x, group=ref)
        same(f"all_gather_into_tensor{tag}", out, rout)

        out, rout = torch.empty(numel // n, dtype=dtype, device=dev), torch.empty(numel // n, dtype=dtype)
        dist.reduce_scatter_tensor(out, x.to(dev), op=op)
        if opname == "avg":
            dist.reduce_scatter_tensor(rout, x, group=ref)
            rout = rout / n
        else:
            dist.reduce_scatter_tensor(rout, x, op=op, group=ref)
        same(f"reduce_scatter_tensor{tag}", out, rout)

        gathered = [torch.empty(numel, dtype=dtype, device=dev) for _ in range(n)] if rank == root else None
        rgathered = [torch.empty(numel, dtype=dtype) for _ in range(n)] if rank == root else None
        dist.gather(x.to(dev), gathered, dst=root)
        dist.gather(x, rgathered, dst=root, group=ref)
        if rank == root:
            same(f"gather{tag}", torch.stack(gathered), torch.stack(rgathered))

        pieces = [data(numel, dtype, salt=k + 1) for k in range(n)]
        out, rout = torch.empty(numel, dtype=dtype, device=dev), torch.empty(numel, dtype=dtype)
        dist.scatter(out, [p.to(dev) for p in pieces] if rank == root else None, src=root)
        dist.scatter(rout, pieces if rank == root else None, src=root, group=ref)
        same(f"scatter{tag}", out, rout)

        out, rout = torch.empty(numel, dtype=dtype, device=dev), torch.empty(numel, dtype=dtype)
        dist.all_to_all_single(out, x.to(dev))
        dist.all_to_all_single(rout, x, group=ref)
        same(f"all_to_all_single{tag}", out, rout)

        # send/recv around the ring; the reference is what the sender holds
        dst, src = (rank + 1) % n, (rank - 1) % n
        got = torch.empty(numel, dtype=dtype, device=dev)
        sending = dist.isend(x.to(dev), dst)
        dist.recv(got, src)
        sending.wait()
        rgot = torch.empty(numel, dtype=dtype)
        rsend = dist.isend(x, dst, group=ref)
        dist.recv(rgot, src, group=ref)
        rsend.wait()
        same(f"send/recv{tag}", got, rgot)

    dist.barrier()
    checked.append("barrier")
    report = torch.spyre.report().to_dict()
    # One file per rank: lines the ranks print to one pipe can interleave.
    out = Path(os.environ["CHECK_OUT"]) / f"rank{rank}.json"
    out.write_text(json.dumps({"rank": rank, "card": card, "checked": checked, "link_ns": report["link_ns"],
                               "collectives": report["collectives"]}))
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    finish(main())
