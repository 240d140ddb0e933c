"""Eager execution for a host-backed device: every aten op on device tensors
runs on CPU aliases of the same memory.

A boxed fallback covers all ops; explicit kernels handle allocation, copies
across devices, resizing and the metadata-only view ops (redispatched to the
CPU kernels, which only touch sizes/strides and keep the device).
"""

from __future__ import annotations

import collections
import functools
import sys
import threading
from collections.abc import Callable
from typing import Any

import torch
from torch.utils._pytree import tree_flatten, tree_map, tree_unflatten

_aten = torch.ops.aten


class HostBackedDevice:
    """The eager runtime of one host-backed device type."""

    def __init__(self, name: str, adapter: Any, on_op: Callable[[str], None] | None = None,
                 module: Any = None) -> None:
        self.name = name
        self.adapter = adapter
        self.on_op = on_op
        #: the device module (``torch.<name>``): its device_count and current_device
        self.module = module
        self.op_counts: collections.Counter[str] = collections.Counter()
        self._libs: list[torch.library.Library] = []
        # Kernels are registered behind torch.compiler.disable once Dynamo is
        # imported (see install); not while the Python body of one of them runs.
        self._lock = threading.RLock()
        self._running = 0
        self._traced_safe = False
        self._swap_pending = False

    # -------------------------------------------------------------- conversions
    def device(self, index: int | None = 0) -> torch.device:
        return torch.device(self.name, index or 0)

    def index(self, device: Any = None) -> int:
        """The device index ``device`` names (the current device when it names
        none), checked against the module's ``device_count``."""
        idx = None
        if device is not None:
            idx = torch.device(device).index
        current = self.module.current_device() if self.module is not None else 0
        if idx is None or (idx == 0 and getattr(self.adapter, "INDEX_ZERO_MEANS_CURRENT", False)):
            # torch fills a missing index from the device guard, which reports device 0 on
            # this adapter: an index 0 may stand for "the current device" (see the adapter)
            idx = current
        count = self.module.device_count() if self.module is not None else 1
        if not 0 <= idx < count:
            raise RuntimeError(f"{self.name}:{idx} is not accepted: expected a device index 0..{count - 1} "
                               f"({count} {self.name} device{'s' if count != 1 else ''})")
        return idx

    def host_view(self, t: torch.Tensor) -> torch.Tensor:
        """A CPU tensor aliasing the memory of device tensor ``t`` (with its
        lazy conjugate/negative bits)."""
        h = self.adapter.host_view(t)
        if t.is_conj():
            h = h.conj()
        if t.is_neg():
            h = h._neg_view()
        return h

    def wrap(self, host_t: torch.Tensor, owners: dict[int, torch.Tensor] | None = None,
             index: int = 0) -> torch.Tensor:
        """A device tensor on device ``index`` aliasing CPU tensor ``host_t`` (zero
        copy); shares the device storage of an owner of the same memory when one is known."""
        ptr = host_t.untyped_storage().data_ptr()
        like = (owners or {}).get(ptr) if ptr else None
        return self.adapter.wrap(host_t, like, index)

    def empty_strided(self, size: Any, stride: Any, dtype: torch.dtype | None, device: Any = None) -> torch.Tensor:
        index = self.index(device)
        host = torch.empty_strided(size, stride, dtype=dtype or torch.get_default_dtype())
        return self.wrap(host, index=index)

    # -------------------------------------------------------------- kernels
    def _is_dev(self, x: Any) -> bool:
        return isinstance(x, torch.Tensor) and x.device.type == self.name

    def _to_host(self, x: Any) -> Any:
        if self._is_dev(x):
            return self.host_view(x)
        if isinstance(x, torch.device) and x.type == self.name:
            return torch.device("cpu")
        if isinstance(x, str) and x.split(":")[0] == self.name:
            return "cpu"
        return x

    def fallback(self, op: Any, *args: Any, **kwargs: Any) -> Any:
        """Run ``op`` on host aliases; map results back to device tensors."""
        self.op_counts[str(op)] += 1
        if self.on_op is not None:
            self.on_op(str(op))
        flat_in, _ = tree_flatten((args, kwargs))
        # Device inputs by the address of their memory: outputs that alias an
        # input (views) must share its device storage.
        owners = {x.untyped_storage().data_ptr(): x for x in flat_in if self._is_dev(x)}
        indices = {x.device.index for x in flat_in if self._is_dev(x)}
        if len(indices) > 1:
            raise RuntimeError(f"{op}: expected all tensors on one device, found "
                               f"{', '.join(f'{self.name}:{i}' for i in sorted(indices))}")
        explicit = kwargs.get("device")
        explicit_here = explicit is not None and torch.device(explicit).type == self.name
        index = self.index(explicit) if explicit_here else (indices.pop() if indices else self.index())
        # out= tensors get a private host buffer: a CPU kernel may resize (reallocate)
        # it, which must not pull memory from under other views of the device storage.
        outs: list[tuple[torch.Tensor, torch.Tensor]] = []
        out_names = _out_arg_names(op)

        def to_host(key: str | None, x: Any) -> Any:
            if key in out_names and self._is_dev(x):
                tmp = torch.empty_strided(x.size(), x.stride(), dtype=x.dtype)
                outs.append((x, tmp))
                return tmp
            return tree_map(self._to_host, x)

        h_args = tuple(to_host(None, a) for a in args)
        h_kwargs = {k: to_host(k, v) for k, v in kwargs.items()}
        out = _HOST_OP.get(op, op)(*h_args, **h_kwargs)
        if op in _META_STRIDES and isinstance(out, torch.Tensor):
            out = _as_meta_strides(op, out, h_args, h_kwargs)
        for dev_t, tmp in outs:
            if dev_t.shape != tmp.shape or dev_t.stride() != tmp.stride():
                self.adapter.repoint(dev_t, tmp)  # the result's memory becomes the tensor's
            else:
                self.host_view(dev_t).copy_(tmp)
        if explicit is not None and not explicit_here:
            return out  # the op was asked for a result on another device
        schema = op._schema
        if out is None:
            return None
        flat_out, spec = tree_flatten(out)
        returns = list(schema.returns)
        mapped = []
        for k, o in enumerate(flat_out):
            if not isinstance(o, torch.Tensor):
                mapped.append(o)
                continue
            if o.layout != torch.strided:
                raise NotImplementedError(f"{self.name}: {op} produces a {o.layout} tensor; the {self.name} device "
                                          "holds strided tensors only")
            writer = self._written_arg(schema, returns[k] if k < len(returns) else None, args, kwargs)
            mapped.append(writer if writer is not None else self.wrap(o, owners, index))
        return tree_unflatten(mapped, spec)

    @staticmethod
    def _written_arg(schema: Any, ret: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """For in-place/out= returns, the device tensor argument they alias."""
        if ret is None or ret.alias_info is None or not ret.alias_info.is_write:
            return None
        target = set(ret.alias_info.before_set)
        for i, a in enumerate(schema.arguments):
            info = a.alias_info
            if info is None or not info.is_write or not (set(info.before_set) & target):
                continue
            if a.kwarg_only or i >= len(args):
                return kwargs.get(a.name)
            return args[i]
        return None

    def _copy_from(self, src: torch.Tensor, dst: torch.Tensor, non_blocking: bool = False) -> torch.Tensor:
        s = self.host_view(src) if self._is_dev(src) else src
        if self._is_dev(dst):
            self.host_view(dst).copy_(s)
        else:
            dst.copy_(s)
        return dst

    def _convolution(self, input: torch.Tensor, weight: torch.Tensor, bias: Any, stride: Any, padding: Any,
                     dilation: Any, transposed: bool, output_padding: Any, groups: int) -> torch.Tensor:
        """Convolution on the host, in the memory format torch expects of this
        device (what compiled code and fake tensors assume)."""
        backend = torch._C._select_conv_backend(input, weight, bias=bias, stride=stride, padding=padding,
                                                dilation=dilation, transposed=transposed,
                                                output_padding=output_padding, groups=groups, bias_sizes=None)
        fmt = torch._C._conv_determine_backend_memory_format(input, weight, backend)
        out = self.fallback(_aten.convolution_overrideable.default, input, weight, bias, stride, padding, dilation,
                            transposed, output_padding, groups)
        return out if out.is_contiguous(memory_format=fmt) else out.contiguous(memory_format=fmt)

    def _copy_from_lazy_bits(self, src: torch.Tensor, dst: torch.Tensor, non_blocking: bool = False) -> torch.Tensor:
        if self._is_dev(src) or self._is_dev(dst):
            return self._copy_from(src, dst, non_blocking)
        # Other devices: what the generic fallback would do, without re-entering.
        return dst.copy_(src.resolve_conj().resolve_neg(), non_blocking)

    def _copy_from_and_resize(self, src: torch.Tensor, dst: torch.Tensor) -> torch.Tensor:
        if dst.shape != src.shape:
            dst.resize_(src.shape)
        return self._copy_from(src, dst)

    def _resize(self, t: torch.Tensor, size: Any, memory_format: Any = None) -> torch.Tensor:
        """``resize_``: keep the memory when it is large enough (views stay
        aliased), else move to new memory holding the old elements."""
        size = list(size)
        if list(t.shape) == size:
            return t
        host = self.host_view(t)
        strides = torch.empty(size, device="meta").stride()
        numel = 1
        for s in size:
            numel *= s
        if (t.storage_offset() + numel) * t.element_size() <= host.untyped_storage().nbytes():
            new = host.as_strided(size, strides, t.storage_offset())
        else:
            new = torch.empty(size, dtype=t.dtype)
            n = min(new.numel(), host.numel())
            if n and host.is_contiguous():
                new.view(-1)[:n].copy_(host.reshape(-1)[:n])
        self.adapter.repoint(t, new)
        return t

    def install(self) -> None:
        """Register the fallback and explicit kernels for PrivateUse1.

        Host execution is never traced: when torch.compile runs a function
        eagerly (e.g. one it skips), its ops land here inside the compile
        context, and Dynamo must not try to compile the runtime itself, so the
        kernels run behind ``torch.compiler.disable``. That needs Dynamo, which
        takes seconds to import and which nothing can run before it is imported:
        until then the kernels are registered plain, and :meth:`guard_for_dynamo`
        (called right after torch imports Dynamo) registers them again, disabled.
        """
        self._traced_safe = "torch._dynamo" in sys.modules
        no_trace = torch.compiler.disable if self._traced_safe else _plain
        self._register(no_trace)

    def guard_for_dynamo(self) -> None:
        """Register the kernels again behind ``torch.compiler.disable`` (Dynamo is
        imported now). Deferred while a kernel of the device runs (Dynamo can be
        imported from inside one), so that no kernel is unregistered while its
        Python body runs: the last one to return registers them again."""
        with self._lock:
            if self._traced_safe or not self._libs:
                return
            if self._running:
                self._swap_pending = True
                return
            self._swap_locked()

    def _swap_locked(self) -> None:
        self._swap_pending = False
        if not all(hasattr(lib, "_destroy") for lib in self._libs):
            return  # no way to unregister on this release: keep the plain kernels
        for lib in self._libs:
            lib._destroy()
        self._traced_safe = True
        self._register(torch.compiler.disable)

    def _tracked(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        def run(*args: Any, **kwargs: Any) -> Any:
            with self._lock:
                self._running += 1
            try:
                return fn(*args, **kwargs)
            finally:
                with self._lock:
                    self._running -= 1
                    if self._swap_pending and not self._running:
                        self._swap_locked()

        return run

    def _register(self, wrap: Callable[[Callable[..., Any]], Callable[..., Any]]) -> None:
        def no_trace(fn: Callable[..., Any]) -> Callable[..., Any]:
            return wrap(self._tracked(fn))

        fb = torch.library.Library("_", "IMPL")  # noqa: TOR901 - a fallback needs the "_" namespace
        fb.fallback(no_trace(self.fallback), dispatch_key="PrivateUse1")
        lib = torch.library.Library("aten", "IMPL")  # noqa: TOR901
        a = self.adapter

        def empty_memory_format(size, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):  # type: ignore[no-untyped-def]
            fmt = memory_format if memory_format not in (None, torch.preserve_format) else torch.contiguous_format
            return self.empty_strided(size, torch.empty(size, device="meta", memory_format=fmt).stride(), dtype,
                                      device)

        def empty_strided(size, stride, dtype=None, layout=None, device=None, pin_memory=None):  # type: ignore[no-untyped-def]
            return self.empty_strided(size, stride, dtype, device)

        lib.impl("empty.memory_format", no_trace(empty_memory_format), "PrivateUse1")
        lib.impl("empty_strided", no_trace(empty_strided), "PrivateUse1")
        lib.impl("_copy_from", no_trace(self._copy_from), "PrivateUse1")
        lib.impl("_copy_from_and_resize", no_trace(self._copy_from_and_resize), "PrivateUse1")
        # Copies resolve lazy conj/neg bits themselves (on the host); the generic
        # conj/neg fallbacks would clone through this very copy, endlessly.
        for key in ("Conjugate", "Negative"):
            lib.impl("_copy_from", no_trace(self._copy_from_lazy_bits), key)
        # Composite defaults of these raise for custom devices: route them to the host.
        lib.impl("convolution_overrideable", no_trace(self._convolution), "PrivateUse1")
        lib.impl("convolution_backward_overrideable",
                 no_trace(functools.partial(self.fallback, _aten.convolution_backward_overrideable.default)),
                 "PrivateUse1")
        lib.impl("resize_", no_trace(self._resize), "PrivateUse1")
        for name, op in (("as_strided", _aten.as_strided.default), ("view", _aten.view.default),
                         ("_reshape_alias", _aten._reshape_alias.default), ("unfold", _aten.unfold.default)):
            lib.impl(name, no_trace(_redispatch(a, op)), "PrivateUse1")
        self._libs = [fb, lib]


def _plain(fn: Callable[..., Any]) -> Callable[..., Any]:
    return fn


def _conv_backward(grad_output: Any, input: Any, weight: Any, stride: Any, padding: Any, dilation: Any,
                   transposed: bool, output_padding: Any, groups: int, output_mask: Any) -> Any:
    bias_sizes = [weight.shape[1] * groups if transposed else weight.shape[0]]
    return _aten.convolution_backward.default(grad_output, input, weight, bias_sizes, stride, padding, dilation,
                                              transposed, output_padding, groups, output_mask)


def _histc(input: torch.Tensor, bins: int = 100, min: Any = 0, max: Any = 0) -> torch.Tensor:
    """``histc`` for every dtype an accelerator accepts: the CPU kernel has no
    integer variant (MoE routing counts integer expert ids with it), so integer
    input is counted in float64 - exact for every id below 2**53 - and the
    counts are returned in the input's dtype, as accelerators return them."""
    if input.dtype.is_floating_point:
        return _aten.histc.default(input, bins, min, max)
    return _aten.histc.default(input.to(torch.float64), bins, min, max).to(input.dtype)


def _grouped_mm(mat_a: torch.Tensor, mat_b: torch.Tensor, offs: torch.Tensor | None = None,
                bias: torch.Tensor | None = None, out_dtype: Any = None) -> torch.Tensor:
    """``_grouped_mm`` on the host where the CPU has no kernel for it (torch 2.8
    has CUDA's only; transformers' MoE experts call it on any accelerator).
    Groups end at ``offs`` along the dimension the ranks say (2-D x 3-D: rows of
    ``mat_a``; 3-D x 2-D: columns of ``mat_b``; 2-D x 2-D: the shared K; 3-D x
    3-D: a batch), products summed in fp32 and rounded once to the result's
    dtype, as the device kernel does; rows past the last offset are zero."""
    if bias is not None:
        raise RuntimeError("Bias not supported yet")
    dtype = out_dtype or mat_a.dtype
    a, b = mat_a.float(), mat_b.float()
    if a.dim() == 3 and b.dim() == 3:
        return torch.bmm(a, b).to(dtype)
    if offs is None:
        raise RuntimeError("_grouped_mm: offs is required unless both operands are 3-D")
    ends = [int(e) for e in offs.tolist()]
    starts = [0] + ends[:-1]
    if a.dim() == 2 and b.dim() == 3:
        out = a.new_zeros(a.shape[0], b.shape[-1])
        for g, (lo, hi) in enumerate(zip(starts, ends)):
            out[lo:hi] = a[lo:hi] @ b[g]
    elif a.dim() == 3 and b.dim() == 2:
        out = a.new_zeros(a.shape[1], b.shape[-1])
        for g, (lo, hi) in enumerate(zip(starts, ends)):
            out[:, lo:hi] = a[g] @ b[:, lo:hi]
    else:
        out = a.new_zeros(len(ends), a.shape[0], b.shape[-1])
        for g, (lo, hi) in enumerate(zip(starts, ends)):
            out[g] = a[:, lo:hi] @ b[lo:hi]
    return out.to(dtype)


def _cpu_lacks(op: Any, *example: torch.Tensor) -> bool:
    """Whether the CPU has no kernel for ``op`` (tried once on small example inputs)."""
    try:
        op(*example)
    except NotImplementedError:
        return True
    except RuntimeError:
        return False  # it exists and rejected the example
    return False


#: Ops custom devices receive instead of the CPU ones (the "overrideable"
#: entry points, ops whose CPU kernel lacks dtypes accelerators support), run
#: on the host as the op the CPU implements.
_HOST_OP: dict[Any, Any] = {
    _aten.convolution_overrideable.default: _aten.convolution.default,
    _aten.convolution_backward_overrideable.default: _conv_backward,
    _aten.histc.default: _histc,
}
if hasattr(_aten, "_grouped_mm") and _cpu_lacks(_aten._grouped_mm.default, torch.zeros(2, 2, 8), torch.zeros(2, 8, 8)):
    _HOST_OP[_aten._grouped_mm.default] = _grouped_mm


#: Ops whose CPU kernels lay out their result unlike their meta kernels (which
#: compiled code and every non-CPU device follow): results are re-strided.
_META_STRIDES = {_aten.nonzero.default, _aten.nonzero_static.default}


def _as_meta_strides(op: Any, out: torch.Tensor, args: Any, kwargs: Any) -> torch.Tensor:
    meta_args, meta_kwargs = tree_map(lambda x: x.to("meta") if isinstance(x, torch.Tensor) else x, (args, kwargs))
    try:
        want = op(*meta_args, **meta_kwargs).stride() if op is not _aten.nonzero.default else (1, out.shape[0])
    except Exception:  # noqa: BLE001 - no usable meta kernel: keep the CPU layout
        return out
    if out.stride() == tuple(want):
        return out
    return torch.empty_strided(out.shape, want, dtype=out.dtype).copy_(out)


@functools.cache
def _out_arg_names(op: Any) -> frozenset[str]:
    """Keyword-only arguments an op writes (its ``out=`` tensors)."""
    return frozenset(a.name for a in op._schema.arguments
                     if a.kwarg_only and a.alias_info is not None and a.alias_info.is_write)


def _redispatch(adapter: Any, op: Any) -> Any:
    def run(*args: Any, **kwargs: Any) -> Any:
        return adapter.redispatch_cpu(op, *args, **kwargs)

    return run
