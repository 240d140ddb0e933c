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
import functools
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Literal, Union

import sympy

from . import index as _index
from . import jsonform

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
    "FusionCandidate",
    "to_json",
    "from_json",
]

#: Bumped when the JSON form changes; readers reject newer versions and read
#: version 1 (index expressions as ``srepr`` text, graph outputs in ``meta``).
IR_VERSION = 2


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
    reduced values with ``store_reduction`` - or, when its body holds a
    ``scan`` (one reduction dimension), the scanned value of every point with
    ``store``.
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
        return _index_vars(len(self.ranges), len(self.reduction_ranges))

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
    ``outputs`` the buffers that must reach memory: those the graph returns
    (read by its caller after the last kernel) and those written through a view
    of another buffer's storage (a cat realised in place: read later under the
    other buffer's name); ``meta`` carries free-form extras.
    """

    name: str
    device: str
    kernels: tuple[Kernel, ...] = ()
    fallbacks: tuple[str, ...] = ()
    ir_version: int = IR_VERSION
    meta: tuple[tuple[str, Any], ...] = field(default_factory=tuple)
    outputs: tuple[str, ...] = ()


@dataclass(frozen=True)
class FusionCandidate:
    """A scheduled node (or fused group) Inductor proposes to fuse.

    ``numel`` x ``reduction_numel`` is its iteration space as Inductor groups it;
    ``kernels`` names its loop kernels; ``reads``/``writes`` its buffers.
    """

    kernels: tuple[str, ...]
    numel: sympy.Expr
    reduction_numel: sympy.Expr
    reads: frozenset[str]
    writes: frozenset[str]

    @property
    def is_reduction(self) -> bool:
        """True when the candidate reduces."""
        return bool(self.reduction_numel != 1)


def _unique(items: Iterator[Any] | Any) -> tuple[Any, ...]:
    return tuple(dict.fromkeys(items))


# ----------------------------------------------------------------------------- JSON

_TYPES = (Ref, Instr, BufferSpec, LoopKernel, KernelGroup, ExternKernel, GraphIR)

#: Index expressions: their JSON tree (version 2) and srepr text (version 1, read only).
_LEAVES = (
    jsonform.Leaf("$x", sympy.Expr, _index.to_tree, _index.from_tree),
    jsonform.Leaf("$e", sympy.Expr, None, _index.from_srepr),
)

#: Instruction operands that are index expressions, by op.
_INDEX_OPERANDS: dict[str, tuple[int, ...]] = {
    "load": (1,), "store": (1,), "store_reduction": (1,), "index_expr": (0,), "indirect": (1,),
    "check_bounds": (0, 1),
}
#: Instruction operands that name a buffer, by op.
_BUFFER_OPERANDS: dict[str, tuple[int, ...]] = {"load": (0,), "store": (0,), "store_reduction": (0,)}


def _refs(value: Any) -> Iterator[Ref]:
    if isinstance(value, Ref):
        yield value
    elif isinstance(value, tuple):
        for v in value:
            yield from _refs(v)


def _check(obj: Any) -> None:
    """What the annotations cannot say: operands of the right kind, SSA order."""
    if isinstance(obj, Instr):
        if obj.op == "scan":
            _check_scan(obj)
        for pos in _INDEX_OPERANDS.get(obj.op, ()):
            if pos >= len(obj.args) or not isinstance(obj.args[pos], sympy.Expr):
                raise ValueError(f"operand {pos} of {obj.op} must be an index expression")
        for pos in _BUFFER_OPERANDS.get(obj.op, ()):
            if pos >= len(obj.args) or not isinstance(obj.args[pos], str):
                raise ValueError(f"operand {pos} of {obj.op} must be a buffer name")
    elif isinstance(obj, LoopKernel):
        for k, ins in enumerate(obj.body):
            for ref in (*_refs(ins.args), *_refs(ins.mask)):
                if not 0 <= ref.id < k:
                    raise ValueError(f"instruction {k} ({ins.op}) refers to {ref.id}, not an earlier instruction")


def _check_scan(ins: Instr) -> None:
    """``scan(dtypes, values, combine)``: n dtype names, n value refs, and a
    combine body whose first 2n instructions are ``scan_arg`` 0..2n-1, whose
    references point to earlier instructions of its own, and whose last
    instruction is ``scan_result`` of n values."""
    if len(ins.args) != 3 or not all(isinstance(a, tuple) for a in ins.args):
        raise ValueError("scan takes (dtypes, values, combine)")
    dtypes, values, combine = ins.args
    n = len(dtypes)
    if n == 0 or len(values) != n or not all(isinstance(v, Ref) for v in values) \
            or not all(isinstance(d, str) for d in dtypes):
        raise ValueError("scan: one dtype name and one value reference per component")
    if len(combine) < 2 * n + 1 or not all(isinstance(c, Instr) for c in combine):
        raise ValueError("scan: the combine body holds 2n arguments and a result")
    for k, c in enumerate(combine):
        if (k < 2 * n) != (c.op == "scan_arg") or (k < 2 * n and c.args != (k,)):
            raise ValueError(f"scan: combine instructions 0..{2 * n - 1} are scan_arg 0..{2 * n - 1}, no others")
        if c.op in ("load", "store", "store_reduction", "indirect", "reduction", "scan", "index_expr", "masked"):
            raise ValueError(f"scan: combine instruction {k} ({c.op}) is not a pointwise op")
        for ref in (*_refs(c.args), *_refs(c.mask)):
            if not 0 <= ref.id < k:
                raise ValueError(f"scan: combine instruction {k} refers to {ref.id}, not an earlier instruction")
    last = combine[-1]
    if last.op != "scan_result" or len(last.args) != n or not all(isinstance(r, Ref) for r in last.args) \
            or any(c.op == "scan_result" for c in combine[:-1]):
        raise ValueError("scan: the combine body ends with scan_result of one value per component")


def to_json(obj: Any, *, indent: int | None = None) -> str:
    """Serialise any Kernel IR object."""
    return json.dumps(jsonform.encode(obj, _LEAVES), indent=indent, sort_keys=False)


def from_json(text: str) -> Any:
    """Rebuild a Kernel IR object from :func:`to_json` output (this version or
    version 1). Loading runs nothing: see :mod:`spyre_shims.jsonform`. Raises
    :class:`~spyre_shims.jsonform.FormatError` (a :class:`ValueError`) naming
    the place of the first problem, or when the IR is newer than this reader."""
    obj = jsonform.loads(text, Union[_TYPES], _TYPES, _LEAVES, what="Kernel IR", check=_check)
    if isinstance(obj, GraphIR):
        if obj.ir_version > IR_VERSION:
            raise jsonform.FormatError(f"Kernel IR version {obj.ir_version} is newer than this reader ({IR_VERSION})")
        if obj.ir_version < 1:
            raise jsonform.FormatError(f"Kernel IR version {obj.ir_version} does not exist")
        if obj.ir_version == 1:
            obj = _from_version_1(obj)
    return obj


def _from_version_1(graph: GraphIR) -> GraphIR:
    """Version 1 kept the graph's outputs in ``meta``."""
    meta = dict(graph.meta)
    outputs = meta.pop("outputs", ())
    if not isinstance(outputs, tuple) or not all(isinstance(o, str) for o in outputs):
        raise jsonform.FormatError("Kernel IR: GraphIR.meta: version-1 outputs must be a list of buffer names")
    return dataclasses.replace(graph, outputs=outputs, meta=tuple(meta.items()), ir_version=IR_VERSION)


@functools.lru_cache(maxsize=64)
def _index_vars(dims: int, reduction_dims: int) -> tuple[tuple[sympy.Symbol, ...], tuple[sympy.Symbol, ...]]:
    return (tuple(_index.index_symbol(f"i{k}") for k in range(dims)),
            tuple(_index.index_symbol(f"r{k}") for k in range(reduction_dims)))
