"""Collectives for host-backed devices (``spyre_shims.distributed``): the c10d
backend is the device's default, runs on the device tensors' memory through gloo,
and announces each call. One rank here, on an in-memory store; several ranks
under torchrun are in tests/adapter/backend/test_collectives.py."""

from __future__ import annotations

from datetime import timedelta

import torch
import torch.distributed as dist

from spyre_shims.device import registered_device
from spyre_shims.distributed import CollectiveCall, register_host_collectives


def _group(calls: list[CollectiveCall]) -> dist.ProcessGroup:
    from spyre_shims._torch.c10d import HostBackedGroup
    from spyre_shims.device import _device

    def listener(**fields: object) -> None:
        calls.append(CollectiveCall(**fields))  # type: ignore[arg-type]

    return HostBackedGroup(dist.HashStore(), 0, 1, timedelta(seconds=30), "test", _device(), listener)


def test_the_backend_is_the_devices_default() -> None:
    register_host_collectives("sccl")
    assert dist.Backend.default_device_backend_map[registered_device()] == "sccl"
    assert "sccl" in dist.Backend.backend_list
    register_host_collectives("sccl")  # again: nothing changes
    assert dist.Backend.backend_list.count("sccl") == 1


def test_collectives_run_on_the_device_memory_and_are_announced() -> None:
    calls: list[CollectiveCall] = []
    pg = _group(calls)
    x = torch.arange(6.0).to("spyre:2")
    opts = dist.AllreduceOptions()
    opts.reduceOp = dist.ReduceOp.AVG  # gloo has none: a sum divided on completion
    work = pg.allreduce([x], opts)
    work.wait()
    assert work.is_completed()
    assert x.device == torch.device("spyre", 2) and torch.equal(x.cpu(), torch.arange(6.0))
    out = torch.empty(6, device="spyre:2")
    pg._allgather_base(out, x).wait()
    torch.testing.assert_close(out.cpu(), torch.arange(6.0))
    assert [(c.op, c.nbytes, c.ranks, c.rank, c.card) for c in calls] == \
        [("all_reduce", 24, 1, 0, 2), ("all_gather", 24, 1, 0, 2)]


def test_an_average_of_integers_is_refused() -> None:
    pg = _group([])
    opts = dist.AllreduceOptions()
    opts.reduceOp = dist.ReduceOp.AVG
    try:
        pg.allreduce([torch.ones(3, dtype=torch.int32, device="spyre")], opts)
    except RuntimeError as exc:
        assert "ReduceOp.AVG needs floating-point tensors, got torch.int32" in str(exc)
    else:
        raise AssertionError("an integer average ran")
