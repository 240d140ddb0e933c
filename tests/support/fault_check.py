"""One rank of a fault scenario, launched as plain processes (not torchrun, whose
agent would stop the survivors itself) by tests/adapter/backend/test_collectives.py.

``dies``: the last rank kills itself in the middle of an all_reduce; ``hangs``: it
never calls the collective; ``mismatch``: rank 1 calls it with another size and
dtype. Survivors print the error they got as their last line and exit 3."""

from __future__ import annotations

import os
import signal
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist

import spyre_adapter

spyre_adapter.register()


def main(scenario: str, timeout_s: float) -> int:
    dist.init_process_group(timeout=timedelta(seconds=timeout_s))
    rank, n = dist.get_rank(), dist.get_world_size()
    x = torch.ones(1 << 22, device="spyre")  # 16 MiB: a collective that takes a while
    dist.all_reduce(x)
    if rank == n - 1 and scenario == "dies":
        dist.all_reduce(x, async_op=True)
        time.sleep(0.01)
        os.kill(os.getpid(), signal.SIGKILL)
    if rank == n - 1 and scenario == "hangs":
        time.sleep(10 * timeout_s)
        return 0
    if rank == 1 and scenario == "mismatch":
        x = torch.ones(100, device="spyre", dtype=torch.float16)
    try:
        for _ in range(20):
            dist.all_reduce(x)
    except RuntimeError as exc:
        print(f"{type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
        return 3
    return 0


if __name__ == "__main__":
    code = main(sys.argv[1], float(sys.argv[2]))
    sys.stderr.flush()
    os._exit(code)  # no teardown: the group has a dead or hung member
