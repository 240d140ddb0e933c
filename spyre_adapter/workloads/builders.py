"""Turn a :class:`~.spec.CaseSpec` into a callable and a deterministic argument
factory. Anything that cannot be built raises :class:`CaseError` naming the
case and the reason (the runner reports it; the run goes on)."""

from __future__ import annotations

import dataclasses
import math
import operator
from collections.abc import Callable
from typing import Any

import torch

from spyre_shims.device import registered_device, wrap_host

from spyre_adapter.workloads.differential import Args, place
from spyre_adapter.workloads.literals import parse_literal
from spyre_adapter.workloads.spec import CaseSpec, Defaults

#: Names the files use that are Python operators, not torch functions: the
#: capture names ``a | b`` ``torch.or_``, the operator module's name for
#: ``Tensor.__or__``. Every operator function whose dunder a tensor has:
#: arithmetic, comparisons, bitwise and/or/xor/invert, shifts, getitem and the
#: in-place forms (``ior`` is ``a |= b``).
_OPERATORS: dict[str, Callable[..., Any]] = {
    name: getattr(operator, name) for name in dir(operator)
    if not name.startswith("_") and f"__{name.rstrip('_')}__" in dir(torch.Tensor)}
#: Operators a tensor also has reflected (``__ror__``: the tensor on the right).
_REFLECTED = frozenset(n.rstrip("_") for n in _OPERATORS if f"__r{n.rstrip('_')}__" in dir(torch.Tensor))
_DTYPE_ALIASES = {"fp16": "float16", "half": "float16", "fp32": "float32", "float": "float32", "bf16": "bfloat16",
                  "fp64": "float64", "double": "float64", "int": "int32", "long": "int64"}
#: Capture devices in the files mean "the device under test".
_CAPTURE_DEVICES = ("cuda", "xpu", "mps", "spyre", "npu", "hpu")
#: Ops whose result depends on write order when an index repeats: indices are
#: drawn without repetition so CPU and device results are both well defined.
_UNIQUE_INDEX_OPS = {"index_copy", "index_copy_"}


class CaseError(ValueError):
    """A case that cannot be built."""


@dataclasses.dataclass
class BuiltCase:
    spec: CaseSpec
    fn: Callable[..., Any]
    make_args: Callable[[str], Args]
    #: Largest storage of any input tensor, in elements (memory guard).
    max_numel: int
    #: Shapes, dtypes, strides and values: equal signatures reuse one compiled function.
    signature: str
    notes: tuple[str, ...] = ()
    #: Bytes of all input tensors' storage (memory guard).
    input_bytes: int = 0


# ------------------------------------------------------------------ ops

def resolve_op(name: str) -> Callable[..., Any]:
    """The callable an op name denotes: ``torch.getitem`` -> ``operator.getitem``,
    ``torch.or_`` -> ``operator.or_``, ``torch.rtruediv`` -> ``Tensor.__rtruediv__``,
    ``torch.to``/``torch.float``/``torch.add_`` -> the Tensor method,
    ``torch.ops.aten.view``, ``torch.nn.functional.silu``, ``torch.Tensor.expand``."""
    parts = name.split(".")
    if not name or parts[0] != "torch":
        raise CaseError(f"unknown op {name!r} (expected a torch.* name)")
    if len(parts) == 2 and parts[1] in _OPERATORS and not callable(getattr(torch, parts[1], None)):
        return _OPERATORS[parts[1]]
    obj: Any = torch
    for p in parts[1:]:
        obj = getattr(obj, p, None)
        if obj is None:
            break
    if callable(obj) and not isinstance(obj, (torch.dtype, type)):
        return obj
    if len(parts) == 2 and callable(getattr(torch.Tensor, parts[1], None)):
        return getattr(torch.Tensor, parts[1])
    if len(parts) == 2 and parts[1][:1] == "r" and parts[1][1:] in _REFLECTED:
        return getattr(torch.Tensor, f"__{parts[1]}__")  # a reflected operator: ``torch.ror`` is ``2 | t``
    raise CaseError(f"unknown op {name!r}")


# ------------------------------------------------------------------ values

def parse_dtype(name: Any) -> torch.dtype:
    text = str(name).removeprefix("torch.")
    dt = getattr(torch, _DTYPE_ALIASES.get(text, text), None)
    if not isinstance(dt, torch.dtype):
        raise CaseError(f"unknown dtype {name!r}")
    return dt


def _is_device_name(text: str) -> bool:
    return text.split(":")[0] in (*_CAPTURE_DEVICES, "cpu")


def _convert_value(v: Any, device: str) -> Any:
    """A ``value``/``kwmap`` entry: dtype names, device names (capture devices
    become ``device``), literal strings like ``"(1, 41, -1, 128)"``."""
    if isinstance(v, list):
        return [_convert_value(x, device) for x in v]
    if not isinstance(v, str):
        return v
    text = v.strip()
    if text.startswith("torch.") and isinstance(getattr(torch, text[6:], None), torch.dtype):
        return getattr(torch, text[6:])
    if _is_device_name(text):
        return "cpu" if text.startswith("cpu") else device
    if text[:1] in "([" or text in ("None", "Ellipsis"):
        try:
            return parse_literal(text)
        except ValueError:
            return v
    return v


# ------------------------------------------------------------------ tensors

@dataclasses.dataclass(frozen=True)
class TensorSpec:
    shape: tuple[int, ...]
    stride: tuple[int, ...]
    offset: int
    dtype: torch.dtype
    init: str
    init_args: dict[str, Any]
    on_host: bool  # captured on the CPU: stays on the CPU in the device run too

    @property
    def storage_numel(self) -> int:
        if any(s == 0 for s in self.shape):
            return self.offset
        return self.offset + sum((s - 1) * st for s, st in zip(self.shape, self.stride)) + 1

    def signature(self) -> str:
        where = "host" if self.on_host else "dev"
        return f"T({self.dtype},{list(self.shape)},{list(self.stride)},{self.offset},{where})"


def tensor_spec(raw: Any, defaults: Defaults) -> TensorSpec:
    if not isinstance(raw, dict) or "shape" not in raw:
        raise CaseError(f"tensor input needs a shape: {raw!r}")
    shape = raw["shape"]
    if not isinstance(shape, list) or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in shape):
        raise CaseError(f"bad shape {shape!r}")
    stride = raw.get("stride")
    if stride is None:
        stride = list(torch.empty(shape, device="meta").stride()) if shape else []
    if not isinstance(stride, list) or len(stride) != len(shape) or not all(isinstance(s, int) and s >= 0 for s in stride):
        raise CaseError(f"bad stride {stride!r} for shape {shape!r}")
    offset = raw.get("storage_offset", 0)
    if not isinstance(offset, int) or offset < 0:
        raise CaseError(f"bad storage_offset {offset!r}")
    dtype = parse_dtype(raw.get("dtype", defaults.dtype))
    init = raw.get("init") or ("bool" if dtype == torch.bool else "randint" if not dtype.is_floating_point else "rand")
    if init not in ("rand", "randn", "randint", "xavier", "zeros", "ones", "bool"):
        raise CaseError(f"unknown init {init!r}")
    device = str(raw.get("device", ""))
    return TensorSpec(tuple(shape), tuple(stride), offset, dtype, init, dict(raw.get("init_args") or {}),
                      on_host=device.startswith("cpu"))


def make_tensor(t: TensorSpec, gen: torch.Generator, unique_index: bool = False) -> torch.Tensor:
    """The tensor (on the CPU): its whole storage initialised, then viewed with
    the spec's shape, stride and offset."""
    n = t.storage_numel
    a = t.init_args
    if t.dtype == torch.bool or t.init == "bool":
        flat = (torch.rand(n, generator=gen) < 0.5).to(t.dtype)
    elif t.init == "zeros":
        flat = torch.zeros(n, dtype=t.dtype)
    elif t.init == "ones":
        flat = torch.ones(n, dtype=t.dtype)
    elif t.init == "randint" or not (t.dtype.is_floating_point or t.dtype.is_complex):
        low, high = int(a.get("low", 0)), int(a.get("high", 100 if t.init == "randint" else 10))
        if unique_index and high - low >= n:
            flat = (torch.randperm(high - low, generator=gen)[:n] + low).to(t.dtype)
        else:
            flat = torch.randint(low, high, (n,), generator=gen, dtype=t.dtype)
    elif t.init == "randn":
        flat = torch.randn(n, generator=gen, dtype=t.dtype)
    else:
        if t.init == "xavier":
            fan_in, fan_out = _fans(t.shape)
            bound = math.sqrt(6.0 / max(fan_in + fan_out, 1))
            low, high = -bound, bound
        else:
            low, high = float(a.get("low", 0.0)), float(a.get("high", 1.0))
        flat = torch.rand(n, generator=gen, dtype=t.dtype).mul_(high - low).add_(low)
    return flat.as_strided(t.shape, t.stride, t.offset)


def _fans(shape: tuple[int, ...]) -> tuple[int, int]:
    """Fan in/out as ``torch.nn.init.xavier_uniform_`` computes them (1-D: numel)."""
    if len(shape) < 2:
        n = math.prod(shape) or 1
        return n, n
    receptive = math.prod(shape[2:])
    return shape[1] * receptive, shape[0] * receptive


# ------------------------------------------------------------------ cases

def build(spec: CaseSpec, defaults: Defaults) -> BuiltCase:
    """Build one case (raises CaseError with the reason)."""
    fn = resolve_op(spec.op)
    base = spec.op.rsplit(".", 1)[-1]
    plan: list[tuple[str, Any]] = []  # ("tensor", TensorSpec) | ("list", [TensorSpec]) | ("value", v)
    for k, inp in enumerate(spec.inputs):
        if not isinstance(inp, dict) or len(inp) != 1:
            raise CaseError(f"input {k}: expected one of tensor/tensor_list/value/py, got {inp!r}")
        (kind, raw), = inp.items()
        if kind == "tensor":
            plan.append(("tensor", tensor_spec(raw, defaults)))
        elif kind == "tensor_list":
            if not isinstance(raw, list):
                raise CaseError(f"input {k}: tensor_list must be a list")
            plan.append(("list", [tensor_spec(r, defaults) for r in raw]))
        elif kind == "value":
            plan.append(("value", raw))
        elif kind == "py":
            try:
                plan.append(("literal", parse_literal(str(raw))))
            except ValueError as exc:
                raise CaseError(f"input {k}: {exc}") from exc
        else:
            raise CaseError(f"input {k}: unknown input kind {kind!r}")
    tensors = [t for kind, x in plan if kind in ("tensor", "list") for t in (x if kind == "list" else [x])]
    unique = base in _UNIQUE_INDEX_OPS
    notes = ("index tensor drawn without repeats (repeated indices make index_copy nondeterministic)",) if unique else ()

    def make_args(device: str) -> Args:
        gen = torch.Generator().manual_seed(defaults.seed * 1_000_003 + spec.index)
        args: list[Any] = []
        for kind, x in plan:
            if kind == "tensor":
                args.append(_placed(make_tensor(x, gen, unique and not x.dtype.is_floating_point), x, device))
            elif kind == "list":
                args.append([_placed(make_tensor(t, gen), t, device) for t in x])
            elif kind == "value":
                args.append(_convert_value(x, device))
            else:
                args.append(x)
        kwargs = {k: _convert_value(v, device) for k, v in spec.kwargs.items()}
        return args, kwargs

    sig = "|".join([spec.op, *(_sig(kind, x) for kind, x in plan), repr(sorted(spec.kwargs.items()))])
    nbytes = sum(t.storage_numel * torch.empty((), dtype=t.dtype).element_size() for t in tensors)
    return BuiltCase(spec, fn, make_args, max((t.storage_numel for t in tensors), default=0), sig, notes, nbytes)


def _placed(t: torch.Tensor, ts: TensorSpec, device: str) -> torch.Tensor:
    if device == "cpu" or ts.on_host:
        return t
    if device == registered_device():
        return wrap_host(t)  # fresh memory nobody else holds: the device tensor aliases it, no second copy
    return place(t, device)


def _sig(kind: str, x: Any) -> str:
    if kind == "tensor":
        return x.signature()
    if kind == "list":
        return "[" + ",".join(t.signature() for t in x) + "]"
    return repr(x)
