"""The stable Kernel IR: what a vendor backend receives from Inductor.

Frozen dataclasses only, no torch internals: Inductor's scheduled nodes are
translated into these by the shims, so their shape does not change when
Inductor's do. Every object round-trips through JSON (:func:`to_json` /
:func:`from_json`) unchanged.

A kernel body is a list of SSA instructions (:class:`Instr`) over the
iteration space ``ranges`` x ``reduction_ranges``; an instruction refers to an
earlier one with :class:`Ref`. Index arguments are sympy expressions over the
symbols described in :mod:`spyre_shims.index`. Op names and their semantics are
listed in :mod:`spyre_shims.ops`.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Literal, Union

import sympy

from . import index as _index

__all__ = [
    "IR_VERSION",
    "Ref",
    "Instr",
    "BufferSpec",
    "LoopKernel",
    "KernelGroup",
    "ExternKernel",
    "Kernel",
    "GraphIR",
    "to_json",
    "from_json",
]

#: Bumped when the JSON form changes; readers reject newer versions.
IR_VERSION = 1


@dataclass(frozen=True)
class Ref:
    """Reference to the result of instruction number ``id`` in the same body."""

    id: int


@dataclass(frozen=True)
class Instr:
    """One SSA instruction: ``op(*args)`` producing a value of ``dtype``.

    ``args`` hold :class:`Ref`, python literals (int, float, bool, str, None),
    sympy index expressions, and tuples of those. ``dtype`` is a torch dtype name
    such as ``"float16"`` (``None`` for stores). ``mask`` is set on loads inside a
    masked region: lanes where the referenced mask is false may index out of
    bounds and must not fault.
    """

    op: str
    args: tuple[Any, ...] = ()
    dtype: str | None = None
    mask: Ref | None = None


Role = Literal["input", "output", "inout", "internal"]


@dataclass(frozen=True)
class BufferSpec:
    """A buffer a kernel touches, with its layout in elements.

    Loads and stores index the buffer's flat storage starting at the element the
    tensor's data pointer refers to; ``storage_numel`` bounds those indices.
    ``internal`` buffers are produced and consumed inside one fused group and are
    never allocated by the host program.
    """

    name: str
    dtype: str
    size: tuple[sympy.Expr, ...]
    stride: tuple[sympy.Expr, ...]
    offset: sympy.Expr = sympy.Integer(0)
    storage_numel: sympy.Expr = sympy.Integer(0)
    role: Role = "input"


@dataclass(frozen=True)
class LoopKernel:
    """A loop nest: ``body`` runs once per point of ``ranges`` x ``reduction_ranges``.

    Index symbols ``i0..`` span ``ranges`` and ``r0..`` span
    ``reduction_ranges`` (row-major). A kernel with reduction ranges stores its
    reduced values with ``store_reduction``.
    """

    name: str
    ranges: tuple[sympy.Expr, ...]
    reduction_ranges: tuple[sympy.Expr, ...]
    body: tuple[Instr, ...]
    origins: tuple[str, ...] = ()

    @property
    def is_reduction(self) -> bool:
        """True when the kernel reduces over ``reduction_ranges``."""
        return len(self.reduction_ranges) > 0

    def index_vars(self) -> tuple[tuple[sympy.Symbol, ...], tuple[sympy.Symbol, ...]]:
        """The symbols of the iteration and the reduction dimensions."""
        return (
            tuple(_index.index_symbol(f"i{k}") for k in range(len(self.ranges))),
            tuple(_index.index_symbol(f"r{k}") for k in range(len(self.reduction_ranges))),
        )

    def reads(self) -> tuple[str, ...]:
        """Buffers loaded, in first-use order."""
        return _unique(i.args[0] for i in self.body if i.op == "load")

    def writes(self) -> tuple[str, ...]:
        """Buffers stored, in first-use order."""
        return _unique(i.args[0] for i in self.body if i.op in ("store", "store_reduction"))


@dataclass(frozen=True)
class KernelGroup:
    """Loop kernels Inductor fused; they run in order as one device kernel.

    ``buffers`` lists every buffer the group touches (internal ones included);
    ``args`` is the call signature of the host program (non-internal buffers in
    order), ``symbols`` the size symbols whose values are passed at run time.
    """

    name: str
    kernels: tuple[LoopKernel, ...]
    buffers: tuple[BufferSpec, ...]
    args: tuple[str, ...]
    symbols: tuple[str, ...] = ()

    def buffer(self, name: str) -> BufferSpec:
        """The spec of buffer ``name``."""
        for b in self.buffers:
            if b.name == name:
                return b
        raise KeyError(name)


@dataclass(frozen=True)
class ExternKernel:
    """A library kernel Inductor calls as a unit (the matmul family).

    ``op`` is one of ``mm``, ``bmm``, ``addmm``, ``baddbmm``. ``inputs`` follow
    aten's argument order (``addmm``: bias, mat1, mat2); each is the operand's
    view (size, stride, offset) over the argument buffer of the same name.
    ``attrs`` hold the scalar arguments (``alpha``, ``beta``).
    """

    name: str
    op: str
    inputs: tuple[BufferSpec, ...]
    output: BufferSpec
    args: tuple[str, ...]
    attrs: tuple[tuple[str, Any], ...] = ()
    symbols: tuple[str, ...] = ()

    @property
    def buffers(self) -> tuple[BufferSpec, ...]:
        """Operand views followed by the output."""
        return (*self.inputs, self.output)

    def attr(self, key: str, default: Any = None) -> Any:
        """Scalar argument ``key``."""
        return dict(self.attrs).get(key, default)


Kernel = Union[KernelGroup, ExternKernel]


@dataclass(frozen=True)
class GraphIR:
    """Everything one compiled graph ran on the device, in program order.

    ``fallbacks`` names the aten ops of that graph that ran on the host instead;
    ``meta`` carries ``("outputs", names)``: the buffers the graph returns.
    """

    name: str
    device: str
    kernels: tuple[Kernel, ...] = ()
    fallbacks: tuple[str, ...] = ()
    ir_version: int = IR_VERSION
    meta: tuple[tuple[str, Any], ...] = field(default_factory=tuple)


def _unique(items: Iterator[Any] | Any) -> tuple[Any, ...]:
    return tuple(dict.fromkeys(items))


# ----------------------------------------------------------------------------- JSON

_TYPES: dict[str, type] = {
    c.__name__: c for c in (Ref, Instr, BufferSpec, LoopKernel, KernelGroup, ExternKernel, GraphIR)
}


def _enc(obj: Any) -> Any:
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        out: dict[str, Any] = {"$t": type(obj).__name__}
        for f in dataclasses.fields(obj):
            out[f.name] = _enc(getattr(obj, f.name))
        return out
    if isinstance(obj, sympy.Basic):
        return {"$e": _index.to_json(obj)}
    if isinstance(obj, tuple):
        return [_enc(x) for x in obj]
    if isinstance(obj, float) and not math.isfinite(obj):
        return {"$f": repr(obj)}
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    raise TypeError(f"cannot serialise {type(obj).__name__} in the Kernel IR: {obj!r}")


def _dec(obj: Any) -> Any:
    if isinstance(obj, list):
        return tuple(_dec(x) for x in obj)
    if isinstance(obj, dict):
        if "$e" in obj:
            return _index.parse(obj["$e"])
        if "$f" in obj:
            return float(obj["$f"])
        cls = _TYPES[obj["$t"]]
        return cls(**{k: _dec(v) for k, v in obj.items() if k != "$t"})
    return obj


def to_json(obj: Any, *, indent: int | None = None) -> str:
    """Serialise any Kernel IR object."""
    return json.dumps(_enc(obj), indent=indent, sort_keys=False)


def from_json(text: str) -> Any:
    """Rebuild a Kernel IR object from :func:`to_json` output."""
    obj = _dec(json.loads(text))
    if isinstance(obj, GraphIR) and obj.ir_version > IR_VERSION:
        raise ValueError(f"Kernel IR version {obj.ir_version} is newer than this reader ({IR_VERSION})")
    return obj
