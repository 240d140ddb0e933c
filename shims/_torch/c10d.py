"""A c10d process group for a host-backed device: every collective runs through
gloo on the host views of the device tensors (the same memory, so results land
in the device tensors with no copy), and each call is announced to a listener
(the vendor's link model) before it runs.

A Python ``ProcessGroup`` subclass, as torch's own Python process groups are
(torch >= 2.x calls its overridden collectives through a pybind trampoline):
c10d's ``Backend`` has no Python constructor. ``init_process_group`` takes such a
group as the whole group, so it serves CPU tensors as well (through the same
gloo group). Works are gloo's, async (``wait``/``is_completed``), their
transport errors turned into one-line :class:`CollectiveError`s; an average,
which gloo lacks, is a sum whose work divides when it completes. Before a
collective runs, the ranks check that they agree on it (op, dtype, size).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import AllgatherOptions, _create_work_from_future

from .eager import HostBackedDevice

#: Called with keywords ``op``, ``nbytes`` (nccl-tests' size), ``ranks``, ``rank``, ``peer``
#: (the root, source or destination rank, if any) and ``card`` (the device index, if any).
Listener = Callable[..., None]

_AVG = dist.ReduceOp.AVG


#: Collectives whose ranks must agree on what they call (the agreement check's op codes).
_CHECKED_OPS = ("all_reduce", "broadcast", "reduce", "all_gather", "reduce_scatter", "gather", "scatter",
                "all_to_all")
_DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int64, torch.int32, torch.int16,
           torch.int8, torch.uint8, torch.bool, torch.complex64, torch.complex128)


def _bytes(tensors: Sequence[torch.Tensor]) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def _dtype_code(dtype: torch.dtype) -> int:
    return _DTYPES.index(dtype) if dtype in _DTYPES else len(_DTYPES)


def _dtype_name(code: int) -> str:
    return str(_DTYPES[code]).removeprefix("torch.") if code < len(_DTYPES) else "another dtype"


def _transport_reason(exc: BaseException) -> str:
    """gloo's message without its source location and its advice."""
    text = " ".join(str(exc).split())
    if text.startswith("[") and "] " in text:
        text = text.split("] ", 1)[1]
    return text.split(" This is typically caused")[0].rstrip(".")


class CollectiveError(RuntimeError):
    """A collective that cannot complete: a rank that is gone or does not answer
    within the group's timeout, or ranks that disagree on the call (one line)."""


def _failed(what: str, exc: BaseException) -> CollectiveError:
    return CollectiveError(f"{what} failed: another rank is gone or did not answer within the group's timeout "
                           f"({_transport_reason(exc)})")


class HostBackedGroup(dist.ProcessGroup):
    """The process group of backend ``name`` for host-backed ``device`` (see the module docstring)."""

    def __init__(self, store: Any, rank: int, size: int, timeout: timedelta, name: str, device: HostBackedDevice,
                 listener: Listener | None) -> None:
        super().__init__(rank, size)
        self._gloo = dist.ProcessGroupGloo(store, rank, size, timeout)
        self._name = name
        self._device = device
        self._listener = listener
        self._rank, self._size = rank, size
        self._group_name = ""

    def getBackendName(self) -> str:  # noqa: N802 - the c10d name
        return self._name

    # c10d names a group after making it; a Python group keeps the name itself
    # (DeviceMesh and the functional collectives look groups up by it)
    def _set_group_name(self, name: str) -> None:
        self._group_name = name
        super()._set_group_name(name)

    @property
    def group_name(self) -> str:
        if not self._group_name:
            raise RuntimeError("ProcessGroup name not set")
        return self._group_name

    def __repr__(self) -> str:
        return f"HostBackedGroup({self._name}, rank {self._rank} of {self._size})"

    # ---------------------------------------------------------------- helpers
    def _h(self, t: torch.Tensor) -> torch.Tensor:
        return self._device.host_view(t) if t.device.type == self._device.name else t

    def _hs(self, ts: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        return [self._h(t) for t in ts]

    def _card(self, ts: Sequence[torch.Tensor]) -> int | None:
        for t in ts:
            if t.device.type == self._device.name:
                return t.device.index
        return None

    def _announce(self, op: str, nbytes: int, tensors: Sequence[torch.Tensor], peer: int | None = None) -> None:
        if self._listener is not None:
            self._listener(op=op, nbytes=nbytes, ranks=self._size, rank=self._rank, peer=peer,
                           card=self._card(tensors))

    def _failed(self, op: str, exc: BaseException) -> CollectiveError:
        return _failed(f"{self._name} {op} on rank {self._rank} of {self._size}", exc)

    def _agree(self, op: str, t: torch.Tensor | None, numel: bool = True) -> None:
        """Every rank calls the same collective with the same dtype and size, or
        every rank gets a one-line error naming who differs (gloo would abort the
        process or hang on a mismatch). One small gloo all_gather, not charged on
        the modeled link."""
        if self._size == 1:
            return
        mine = torch.tensor([_CHECKED_OPS.index(op), _dtype_code(t.dtype) if t is not None else -1,
                             t.numel() if t is not None and numel else -1], dtype=torch.int64)
        rows = [torch.empty_like(mine) for _ in range(self._size)]
        try:
            self._gloo.allgather([rows], [mine]).wait()
        except RuntimeError as exc:
            raise self._failed(op, exc) from None
        if all(torch.equal(r, rows[0]) for r in rows):
            return

        def what(r: torch.Tensor) -> str:
            code, dtype, n = (int(v) for v in r)
            shown = _CHECKED_OPS[code] if 0 <= code < len(_CHECKED_OPS) else "another collective"
            return shown + (f" of {_dtype_name(dtype)}" if dtype >= 0 else "") + (f"[{n}]" if n >= 0 else "")

        seen = ", ".join(f"rank {k}: {what(r)}" for k, r in enumerate(rows))
        raise CollectiveError(f"{self._name} {op}: the ranks disagree ({seen}); every rank must call the same "
                              "collective with tensors of the same dtype and size")

    def _checked(self, op: str, work: Any) -> Any:
        """``work``, its transport errors turned into one-line :class:`CollectiveError`s."""
        try:
            fut = work.get_future()
        except RuntimeError:
            return work  # no future on this work: gloo's own error at wait

        # the callback runs on a gloo thread: it must not hold the group (whose last
        # reference dropped there would join that very thread)
        what = f"{self._name} {op} on rank {self._rank} of {self._size}"

        def check(f: Any) -> Any:
            try:
                return f.value()
            except RuntimeError as exc:
                raise _failed(what, exc) from None

        return _create_work_from_future(fut.then(check))

    def _averaged(self, work: Any, tensors: list[torch.Tensor]) -> Any:
        """The work of a sum that divides ``tensors`` by the group size once it completes."""
        for t in tensors:
            if not (t.is_floating_point() or t.is_complex()):
                raise RuntimeError(f"{self._name}: ReduceOp.AVG needs floating-point tensors, got {t.dtype}")
        size = self._size

        def divide(fut: Any) -> Any:
            fut.value()  # raises the sum's error, if any
            for t in tensors:
                t.div_(size)
            return tensors

        try:
            fut = work.get_future()
        except RuntimeError:  # some gloo works have no future: divide once the sum is done
            work.wait()
            fut = torch.futures.Future()
            fut.set_result(tensors)
        return _create_work_from_future(fut.then(divide))

    # ---------------------------------------------------------------- collectives
    def allreduce(self, tensors: list[torch.Tensor], opts: Any = None) -> Any:
        opts = opts if opts is not None else dist.AllreduceOptions()
        self._agree("all_reduce", tensors[0])
        self._announce("all_reduce", _bytes(tensors[:1]), tensors)
        host = self._hs(tensors)
        if opts.reduceOp.op == _AVG:
            summed = dist.AllreduceOptions()
            summed.reduceOp, summed.timeout = dist.ReduceOp.SUM, opts.timeout
            return self._averaged(self._checked("all_reduce", self._gloo.allreduce(host, summed)), host)
        return self._checked("all_reduce", self._gloo.allreduce(host, opts))

    def allreduce_coalesced(self, tensors: list[torch.Tensor], opts: Any = None) -> Any:
        self._announce("all_reduce", _bytes(tensors), tensors)
        return self._gloo.allreduce_coalesced(self._hs(tensors), opts or dist.AllreduceCoalescedOptions())

    def broadcast(self, tensors: list[torch.Tensor], opts: Any = None) -> Any:
        opts = opts if opts is not None else dist.BroadcastOptions()
        self._agree("broadcast", tensors[0])
        self._announce("broadcast", _bytes(tensors[:1]), tensors, opts.rootRank)
        return self._checked("broadcast", self._gloo.broadcast(self._hs(tensors), opts))

    def reduce(self, tensors: list[torch.Tensor], opts: Any = None) -> Any:
        opts = opts if opts is not None else dist.ReduceOptions()
        self._agree("reduce", tensors[0])
        self._announce("reduce", _bytes(tensors[:1]), tensors, opts.rootRank)
        host = self._hs(tensors)
        if opts.reduceOp.op == _AVG:
            summed = dist.ReduceOptions()
            summed.reduceOp, summed.rootRank, summed.timeout = dist.ReduceOp.SUM, opts.rootRank, opts.timeout
            work = self._gloo.reduce(host, summed)
            return self._averaged(work, host) if self._rank == opts.rootRank else work
        return self._checked("reduce", self._gloo.reduce(host, opts))

    def allgather(self, outputs: list[list[torch.Tensor]], inputs: list[torch.Tensor], opts: Any = None) -> Any:
        self._agree("all_gather", inputs[0])
        self._announce("all_gather", _bytes(outputs[0]) if outputs else 0, inputs)
        return self._checked("all_gather", self._gloo.allgather([self._hs(o) for o in outputs], self._hs(inputs),
                                                                 opts or AllgatherOptions()))

    def _allgather_base(self, output: torch.Tensor, input: torch.Tensor, opts: Any = None) -> Any:
        self._agree("all_gather", input)
        self._announce("all_gather", _bytes([output]), [input])
        return self._checked("all_gather", self._gloo._allgather_base(self._h(output), self._h(input),
                                                                       opts or AllgatherOptions()))

    all_gather_single = _allgather_base

    def _reduce_scatter_base(self, output: torch.Tensor, input: torch.Tensor, opts: Any = None) -> Any:
        opts = opts if opts is not None else dist.ReduceScatterOptions()
        self._agree("reduce_scatter", input)
        self._announce("reduce_scatter", _bytes([input]), [input])
        out = self._h(output)
        if opts.reduceOp.op == _AVG:
            summed = dist.ReduceScatterOptions()
            summed.reduceOp, summed.timeout = dist.ReduceOp.SUM, opts.timeout
            return self._averaged(self._gloo._reduce_scatter_base(out, self._h(input), summed), [out])
        return self._gloo._reduce_scatter_base(out, self._h(input), opts)

    reduce_scatter_single = _reduce_scatter_base

    def reduce_scatter(self, outputs: list[torch.Tensor], inputs: list[list[torch.Tensor]], opts: Any = None) -> Any:
        opts = opts if opts is not None else dist.ReduceScatterOptions()
        self._agree("reduce_scatter", outputs[0])
        self._announce("reduce_scatter", _bytes(inputs[0]) if inputs else 0, outputs)
        outs = self._hs(outputs)
        if opts.reduceOp.op == _AVG:
            summed = dist.ReduceScatterOptions()
            summed.reduceOp, summed.timeout = dist.ReduceOp.SUM, opts.timeout
            return self._averaged(self._gloo.reduce_scatter(outs, [self._hs(i) for i in inputs], summed), outs)
        return self._gloo.reduce_scatter(outs, [self._hs(i) for i in inputs], opts)

    def gather(self, outputs: list[list[torch.Tensor]], inputs: list[torch.Tensor], opts: Any = None) -> Any:
        opts = opts if opts is not None else dist.GatherOptions()
        self._agree("gather", inputs[0])
        self._announce("gather", _bytes(inputs) * self._size, inputs, opts.rootRank)
        return self._checked("gather", self._gloo.gather([self._hs(o) for o in outputs], self._hs(inputs), opts))

    def scatter(self, outputs: list[torch.Tensor], inputs: list[list[torch.Tensor]], opts: Any = None) -> Any:
        opts = opts if opts is not None else dist.ScatterOptions()
        self._agree("scatter", outputs[0])
        self._announce("scatter", _bytes(outputs) * self._size, outputs, opts.rootRank)
        return self._checked("scatter", self._gloo.scatter(self._hs(outputs), [self._hs(i) for i in inputs], opts))

    def alltoall_base(self, output: torch.Tensor, input: torch.Tensor, output_split_sizes: list[int],
                      input_split_sizes: list[int], opts: Any = None) -> Any:
        even = not output_split_sizes and not input_split_sizes
        self._agree("all_to_all", input, numel=even)
        self._announce("all_to_all", _bytes([input]), [input])
        return self._checked("all_to_all", self._gloo.alltoall_base(
            self._h(output), self._h(input), output_split_sizes, input_split_sizes, opts or dist.AllToAllOptions()))

    all_to_all_single = alltoall_base

    def alltoall(self, outputs: list[torch.Tensor], inputs: list[torch.Tensor], opts: Any = None) -> Any:
        self._agree("all_to_all", inputs[0] if inputs else None, numel=False)
        self._announce("all_to_all", _bytes(inputs), inputs)
        return self._gloo.alltoall(self._hs(outputs), self._hs(inputs), opts or dist.AllToAllOptions())

    def send(self, tensors: list[torch.Tensor], dst: int, tag: int = 0) -> Any:
        self._announce("send", _bytes(tensors), tensors, dst)
        return self._checked("send", self._gloo.send(self._hs(tensors), dst, tag))

    def recv(self, tensors: list[torch.Tensor], src: int, tag: int = 0) -> Any:
        self._announce("recv", _bytes(tensors), tensors, src)
        return self._checked("recv", self._gloo.recv(self._hs(tensors), src, tag))

    def recv_anysource(self, tensors: list[torch.Tensor], tag: int = 0) -> Any:
        self._announce("recv", _bytes(tensors), tensors)
        return self._gloo.recv_anysource(self._hs(tensors), tag)

    def barrier(self, opts: Any = None) -> Any:
        self._announce("barrier", 0, [])
        return self._checked("barrier", self._gloo.barrier(opts or dist.BarrierOptions()))


def group_named(name: str) -> Any:
    """The process group the functional collectives call ``name`` (one-line
    :class:`CollectiveError` when there is none)."""
    import torch.distributed.distributed_c10d as c10d_mod

    resolve = getattr(c10d_mod, "_resolve_process_group", None)
    if resolve is None:
        raise CollectiveError(f"torch {torch.__version__} cannot look a process group up by name "
                              "(torch.distributed.distributed_c10d._resolve_process_group is missing)")
    if not dist.is_initialized():
        raise CollectiveError(f"process group {name!r}: torch.distributed is not initialised "
                              "(call init_process_group first)")
    try:
        return resolve(name)
    except (RuntimeError, ValueError, KeyError) as exc:
        raise CollectiveError(f"no process group named {name!r} ({_transport_reason(exc)})") from None


def exchange(group: Any, sends: Sequence[tuple[int, torch.Tensor]], recvs: Sequence[tuple[int, torch.Tensor]],
             tag: int) -> None:
    """Send each ``(peer, tensor)`` of ``sends`` and fill each of ``recvs`` from its
    peer (group ranks), every send posted before the first receive waits, so ranks
    that all exchange at once never wait on each other. Raw bytes through gloo:
    nothing is announced to the listener (the caller charges the link itself)."""
    transport = group._gloo if isinstance(group, HostBackedGroup) else group
    try:
        works = [transport.send([t.contiguous()], peer, tag) for peer, t in sends]
        for peer, t in recvs:
            transport.recv([t], peer, tag).wait()
        for w in works:
            w.wait()
    except RuntimeError as exc:
        raise _failed(f"link exchange #{tag}", exc) from None


def register(name: str, device: HostBackedDevice, listener: Listener | None) -> None:
    """Register c10d backend ``name`` as the default of ``device`` (``init_process_group()``
    on its tensors, or ``backend="cpu:gloo,<device>:<name>"``)."""

    def create(store: Any, rank: int, size: int, timeout: timedelta) -> HostBackedGroup:
        return HostBackedGroup(store, rank, size, timeout, name, device, listener)

    if name.upper() in dist.Backend._plugins:
        return
    dist.Backend.register_backend(name, create, devices=[device.name])
    _functional_without_autograd()


_LIBS: list[Any] = []


def _functional_without_autograd() -> None:
    """The functional collectives (``_c10d_functional::all_reduce`` ... what DTensor and
    tensor-parallel layers call) have no autograd formula. Up to torch 2.9 the autograd
    fallback that passes them through is not computed for PrivateUse1 (feature
    detection: no computed kernel for its autograd key), so every call on the device
    fails to dispatch; they fall through to the device's kernel as on CPU."""
    key = "AutogradPrivateUse1"
    missing = [n.split("::", 1)[1] for n in torch._C._dispatch_get_all_op_names()
               if n.startswith("_c10d_functional::")
               and not torch._C._dispatch_has_computed_kernel_for_dispatch_key(n, key)]
    if missing:
        lib = torch.library.Library("_c10d_functional", "IMPL")  # noqa: TOR901
        for op in missing:
            lib.impl(op, torch.library.fallthrough_kernel, key)
        _LIBS.append(lib)
