"""Translate Inductor's scheduled nodes into the stable Kernel IR.

A node's LoopBody is replayed with :class:`_Recorder` installed as Inductor's ops
handler; every ``ops.*`` call becomes one :class:`~spyre_shims.kernel_ir.Instr`.
Index expressions are rewritten from Inductor's own sympy functions into
:mod:`spyre_shims.index`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import sympy
import torch

from .. import index as sidx
from ..errors import UnsupportedKernelError
from ..kernel_ir import BufferSpec, Instr, LoopKernel, Ref
from ..ops import POINTWISE, REDUCTION_ARITY, REDUCTIONS, dtype_name, result_dtype
from . import inductor as ind

# ------------------------------------------------------------------ index rewriting

def _convert_symbol(s: sympy.Symbol) -> sympy.Expr:
    # A precomputed size (``ps0``: Inductor's pad lowering names a symbolic bound
    # this way) is defined only where a wrapper line computes it; the kernel IR
    # carries the expression it stands for, in the graph's own size symbols.
    defined = ind.precomputed_size(s)
    if defined is not None:
        return convert_index(defined)
    return sidx.index_symbol(s.name)


_FN_RULES: dict[str, Callable[..., sympy.Expr]] = {
    "FloorDiv": lambda a, b: sidx.FloorDiv(a, b),
    "CleanDiv": lambda a, b: sidx.FloorDiv(a, b),
    "IntTrueDiv": lambda a, b: sidx.FloorDiv(a, b),
    "ModularIndexing": lambda x, d, m: sidx.IndexMod(sidx.FloorDiv(x, d), m),
    "PythonMod": lambda a, b: sidx.IndexMod(a, b),
    "Mod": lambda a, b: sidx.IndexMod(a, b),
    "Identity": lambda x: x,
    "Abs": lambda a: sympy.Abs(a),
    "Min": lambda *a: sympy.Min(*a),
    "Max": lambda *a: sympy.Max(*a),
}


def convert_index(expr: Any, node: str = "") -> sympy.Expr:
    """Inductor index expression -> stable index expression."""
    if isinstance(expr, int):
        return sympy.Integer(expr)
    expr = sidx.as_expr(expr)
    if expr.is_Integer:
        return expr
    if expr.is_Symbol:
        return _convert_symbol(expr)
    if expr.is_Add:
        return sympy.Add(*(convert_index(a, node) for a in expr.args))
    if expr.is_Mul:
        return sympy.Mul(*(convert_index(a, node) for a in expr.args))
    if expr.is_Pow:
        return sympy.Pow(convert_index(expr.base, node), convert_index(expr.exp, node))
    rule = _FN_RULES.get(type(expr).__name__)
    if rule is None:
        raise UnsupportedKernelError(f"index function {type(expr).__name__}", node, str(expr))
    return rule(*(convert_index(a, node) for a in expr.args))


# ------------------------------------------------------------------ ops recorder

class _Recorder:
    """An Inductor ops handler that records a LoopBody replay as Kernel IR."""

    def __init__(self, node: str, dtype_of: Callable[[str], torch.dtype], rename: Callable[[str], str]) -> None:
        self.node = node
        self.body: list[Instr] = []
        self.dtypes: list[str | None] = []
        self._dtype_of = dtype_of
        self._rename = rename
        self._masks: list[Ref] = []
        self._n_indirect = 0
        #: The scan axis's variable: what torch <= 2.7's cummax/cummin index values name "rindex".
        self.scan_var: sympy.Symbol | None = None

    # -- helpers
    def _emit(self, op: str, args: tuple[Any, ...], dtype: str | None) -> Ref:
        mask = self._masks[-1] if self._masks and op in ("load", "indirect", "check_bounds") else None
        self.body.append(Instr(op, args, dtype, mask))
        self.dtypes.append(dtype)
        return Ref(len(self.body) - 1)

    def _value(self, x: Any) -> Any:
        """Operands: Refs pass through; python scalars become constants."""
        if isinstance(x, Ref):
            return x
        if isinstance(x, bool):
            return self._emit("constant", (x, "bool"), "bool")
        if isinstance(x, int):
            return self._emit("constant", (x, "int64"), "int64")
        if isinstance(x, float):
            return self._emit("constant", (x, "float32"), "float32")
        if isinstance(x, sympy.Expr):
            return self._emit("index_expr", (convert_index(x, self.node), "int64"), "int64")
        if x == "rindex" and self.scan_var is not None:
            # torch <= 2.7 lowers cummax/cummin with the index along the scan as the
            # literal name Triton gives that variable; later releases as ops.index_expr
            return self._emit("index_expr", (self.scan_var, "int64"), "int64")
        raise UnsupportedKernelError(f"operand of type {type(x).__name__}", self.node, repr(x))

    def dtype(self, r: Any) -> str | None:
        return self.dtypes[r.id] if isinstance(r, Ref) else None

    # -- memory
    def load(self, name: str, index: Any) -> Ref:
        real = self._rename(name)
        return self._emit("load", (real, convert_index(index, self.node)), dtype_name(self._dtype_of(name)))

    def load_seed(self, name: str, offset: Any) -> Ref:
        """The seed of a random op: one int64 of the seed buffer."""
        idx = offset if not isinstance(offset, Ref) else None
        if idx is None:
            raise UnsupportedKernelError("load_seed with a computed offset", self.node)
        return self._emit("load", (self._rename(name), convert_index(idx, self.node)), "int64")

    def frexp(self, x: Any) -> tuple[Ref, Ref]:
        v = self._value(x)
        r = self._emit("frexp", (v,), self.dtype(v))
        return self._emit("getitem", (r, 0), self.dtype(v)), self._emit("getitem", (r, 1), "int32")

    def store(self, name: str, index: Any, value: Any, mode: Any = None) -> None:
        if mode not in (None, "atomic_add"):
            raise UnsupportedKernelError(f"store mode {mode}", self.node)
        self._emit("store", (self._rename(name), convert_index(index, self.node), self._value(value), mode), None)

    def store_reduction(self, name: str, index: Any, value: Any) -> None:
        self._emit("store_reduction", (self._rename(name), convert_index(index, self.node), self._value(value)), None)

    # -- values
    def constant(self, value: Any, dtype: torch.dtype) -> Ref:
        if isinstance(value, sympy.Basic):
            value = int(value) if value.is_Integer else float(value)
        return self._emit("constant", (value, dtype_name(dtype)), dtype_name(dtype))

    def index_expr(self, expr: Any, dtype: torch.dtype) -> Ref:
        return self._emit("index_expr", (convert_index(expr, self.node), dtype_name(dtype)), dtype_name(dtype))

    def value_expr(self, expr: Any, dtype: torch.dtype) -> Ref:
        return self.index_expr(expr, dtype)

    def to_dtype(self, x: Any, dtype: torch.dtype, src_dtype: Any = None, use_compute_types: bool = True) -> Ref:
        return self._emit("to_dtype", (self._value(x), dtype_name(dtype)), dtype_name(dtype))

    def to_dtype_bitcast(self, x: Any, dtype: torch.dtype, src_dtype: torch.dtype) -> Ref:
        return self._emit("to_dtype_bitcast", (self._value(x), dtype_name(dtype), dtype_name(src_dtype)),
                          dtype_name(dtype))

    def where(self, cond: Any, a: Any, b: Any) -> Ref:
        a, b = self._value(a), self._value(b)
        return self._emit("where", (self._value(cond), a, b), result_dtype("add", [self.dtype(a), self.dtype(b)]))

    def masked(self, mask: Any, body: Callable[[], Any], other: Any) -> Ref:
        m = self._value(mask)
        # Loads in nested regions may only run where every enclosing mask holds.
        self._masks.append(self._emit("logical_and", (self._masks[-1], m), "bool") if self._masks else m)
        try:
            inner = self._value(body())
        finally:
            self._masks.pop()
        o = self._value(other)
        return self._emit("masked", (m, inner, o), self.dtype(inner))

    def indirect_indexing(self, x: Any, size: Any, check: bool = True, wrap_neg: bool = True) -> sympy.Symbol:
        name = f"v{self._n_indirect}"
        self._n_indirect += 1
        self._emit("indirect", (self._value(x), convert_index(size, self.node), bool(check), bool(wrap_neg), name),
                   "int64")
        return sidx.index_symbol(name)

    def check_bounds(self, expr: Any, size: Any, lower: bool, upper: bool) -> None:
        self._emit("check_bounds", (convert_index(expr, self.node), convert_index(size, self.node)), None)

    def device_assert_async(self, cond: Any, msg: str) -> Ref:
        return self._emit("device_assert", (self._value(cond), str(msg)), None)

    def reduction(self, dtype: torch.dtype, src_dtype: torch.dtype, reduction_type: str, value: Any) -> Any:
        if reduction_type not in REDUCTIONS:
            raise UnsupportedKernelError(f"reduction {reduction_type}", self.node)
        v = tuple(self._value(x) for x in value) if isinstance(value, (tuple, list)) else self._value(value)
        dt = dtype_name(dtype)
        r = self._emit("reduction", (dt, dtype_name(src_dtype), reduction_type, v), dt)
        n = REDUCTION_ARITY.get(reduction_type)
        if n is None:
            return r
        return tuple(self._emit("getitem", (r, k), "float32" if reduction_type != "online_softmax_reduce" else dt)
                     for k in range(n))

    def scan(self, dtypes: Sequence[torch.dtype], combine_fn: Callable[..., Any], values: Any) -> tuple[Ref, ...]:
        """An inclusive scan along the reduction dimension: ``combine_fn`` is
        traced into the instruction's own body (its arguments ``scan_arg``)."""
        vals = tuple(self._value(v) for v in values)
        names = tuple(dtype_name(d) for d in dtypes)
        n = len(vals)
        sub = _Recorder(self.node, self._dtype_of, self._rename)
        args = [sub._emit("scan_arg", (k,), names[k % n]) for k in range(2 * n)]
        with ind.ops_handler(sub):
            out = combine_fn(tuple(args[:n]), tuple(args[n:]))
        result = tuple(sub._value(getattr(o, "value", o)) for o in out)
        sub._emit("scan_result", result, None)
        bad = [i.op for i in sub.body if i.op in ("load", "store", "indirect", "reduction", "index_expr", "masked")]
        if bad or len(result) != n:
            raise UnsupportedKernelError(f"scan combining with {bad[0] if bad else 'a different arity'}", self.node)
        r = self._emit("scan", (names, vals, tuple(sub.body)), None)
        return tuple(self._emit("getitem", (r, k), names[k]) for k in range(n))

    # -- pointwise math
    def __getattr__(self, op: str) -> Callable[..., Ref]:
        if op.startswith("_"):
            raise AttributeError(op)
        spec = POINTWISE.get(op)
        if spec is None:
            raise UnsupportedKernelError(f"op {op}", self.node, "not in the stable op set")

        def emit(*args: Any, **kwargs: Any) -> Ref:
            if kwargs.get("dtype") is not None and op.endswith("_to_int"):
                vals = (self._value(args[0]),)
                return self._emit(op, vals, dtype_name(kwargs["dtype"]))
            if op.endswith("_to_int") and len(args) == 2:
                return self._emit(op, (self._value(args[0]),), dtype_name(args[1]))
            vals = tuple(self._value(a) for a in args)
            if len(vals) != spec.arity:
                raise UnsupportedKernelError(f"op {op} with {len(vals)} operands", self.node)
            return self._emit(op, vals, result_dtype(op, [self.dtype(v) for v in vals]))

        return emit


def capture_loop_kernel(
    snode: Any,
    dtype_of: Callable[[str], torch.dtype],
    rename: Callable[[str], str],
) -> LoopKernel:
    """Replay one SchedulerNode's LoopBody into a :class:`LoopKernel`."""
    name = snode.get_name()
    sizes, rsizes = snode.get_ranges()
    ivars = [sidx.index_symbol(f"i{k}") for k in range(len(sizes))]
    rvars = [sidx.index_symbol(f"r{k}") for k in range(len(rsizes))]
    rec = _Recorder(name, dtype_of, rename)
    rec.scan_var = rvars[0] if len(rvars) == 1 else None
    ind.replay_body(snode, rec, ivars, rvars)
    origins = tuple(sorted({str(o.target) for o in getattr(snode.node, "origins", ()) if o.op == "call_function"}))
    return LoopKernel(
        name=name,
        ranges=tuple(convert_index(s, name) for s in sizes),
        reduction_ranges=tuple(convert_index(s, name) for s in rsizes),
        body=tuple(rec.body),
        origins=origins,
    )


def buffer_spec(name: str, layout: Any, role: str) -> BufferSpec:
    """A :class:`BufferSpec` from an Inductor layout."""
    size = tuple(convert_index(s, name) for s in layout.size)
    stride = tuple(convert_index(s, name) for s in layout.stride)
    offset = convert_index(layout.offset, name)
    extent = offset + sum(((s - 1) * st for s, st in zip(size, stride)), sympy.Integer(0)) + 1
    if any(s == 0 for s in size):
        extent = sympy.Integer(0)
    return BufferSpec(name, dtype_name(layout.dtype), size, stride, offset, sympy.expand(extent), role)  # type: ignore[arg-type]


def symbols_of(exprs: Iterable[Any]) -> tuple[str, ...]:
    """Run-time size symbols (not index/reduction/indirect vars) used by ``exprs``."""
    names: set[str] = set()
    for e in exprs:
        if isinstance(e, sympy.Basic):
            for s in e.free_symbols:
                if not (s.name[:1] in "irv" and s.name[1:].isdigit()):
                    names.add(s.name)
    return tuple(sorted(names))


def kernel_exprs(kernels: Sequence[LoopKernel], buffers: Sequence[BufferSpec]) -> list[Any]:
    """Every sympy expression in ``kernels`` and ``buffers`` (for symbol discovery)."""
    out: list[Any] = []
    for k in kernels:
        out += list(k.ranges) + list(k.reduction_ranges)
        for ins in k.body:
            out += [a for a in ins.args if isinstance(a, sympy.Basic)]
    for b in buffers:
        out += list(b.size) + list(b.stride) + [b.offset]
    return out
