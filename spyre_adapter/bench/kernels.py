"""Kernel IR of the operators torch-spyre measures for its cost model.

torch-spyre's sweep (``../shared/reference/torch-spyre-cost-model/sweep_plan.json``)
names each measured kernel by an operator (``neg``, ``bcast``, ``sumrow``,
``softmax_row_tiling``, ``mmwd``...) and a shape; its harness defines each one as a
small torch function on fp16 tensors (``profile_ops.py``: ``neg`` is ``-x``,
``bcast`` is ``a[R, C] + b[1, C]``, ``sumrow`` and ``read`` are ``x.sum(-1)``...).
Here each is built directly as the Kernel IR Inductor hands this backend for that
function (the same loads, stores, iteration spaces and fused groups, checked
against compiled captures in the tests), so thousands of configurations can be
planned and simulated without compiling each one.
"""

from __future__ import annotations

from collections.abc import Sequence

import sympy

from spyre_shims import index as sidx
from spyre_shims import kernel_ir as kir

from spyre_adapter.model.buffer_specs import contiguous_buffer

__all__ = ["dense_buffer", "OPS", "kernels", "mm", "bmm", "UnknownOp"]

F16, F32 = "float16", "float32"
I0, I1, I2, R0 = (sidx.index_symbol(n) for n in ("i0", "i1", "i2", "r0"))


class UnknownOp(KeyError):
    """An operator this module has no Kernel IR for."""


def dense_buffer(name: str, shape: Sequence[int], dtype: str = F16, role: str = "input") -> kir.BufferSpec:
    """A contiguous buffer of ``shape``."""
    return contiguous_buffer(name, shape, dtype, role)


class _Body:
    """Appends Kernel IR instructions and hands back references to their values."""

    def __init__(self) -> None:
        self.ins: list[kir.Instr] = []

    def __call__(self, op: str, args: tuple, dtype: str | None = None) -> kir.Ref:
        self.ins.append(kir.Instr(op, args, dtype))
        return kir.Ref(len(self.ins) - 1)

    def load(self, buf: str, idx: sympy.Expr, dtype: str = F16) -> kir.Ref:
        return self("load", (buf, idx), dtype)

    def f32(self, v: kir.Ref) -> kir.Ref:
        return self("to_dtype", (v, F32), F32)

    def store(self, buf: str, idx: sympy.Expr, v: kir.Ref) -> None:
        self("store", (buf, idx, v, None))

    def reduce(self, kind: str, v: kir.Ref, dtype: str, out: str, idx: sympy.Expr) -> None:
        r = self("reduction", (dtype, dtype, kind, v), dtype)
        self("store_reduction", (out, idx, r))


def _loop(name: str, ranges: Sequence[int], body: _Body, red: Sequence[int] = ()) -> kir.LoopKernel:
    return kir.LoopKernel(name, tuple(map(sympy.Integer, ranges)), tuple(map(sympy.Integer, red)), tuple(body.ins))


def _group(name: str, loops: Sequence[kir.LoopKernel], buffers: Sequence[kir.BufferSpec]) -> kir.KernelGroup:
    args = tuple(b.name for b in buffers if b.role != "internal")
    return kir.KernelGroup(name, tuple(loops), tuple(buffers), args)


# ------------------------------------------------------------------ pointwise

def _unary(op: str, rows: int, cols: int) -> list[kir.Kernel]:
    n = rows * cols
    b = _Body()
    x = b.load("x", I0)
    if op == "neg":
        y = b("neg", (x,), F16)
    elif op == "relu":
        y = b("relu", (x,), F16)
    elif op == "copy":  # x + 1.0
        y = b("add", (x, b("constant", (1.0, F16), F16)), F16)
    elif op in ("exp", "sigmoid"):
        y = b("to_dtype", (b(op, (b.f32(x),), F32), F16), F16)
    elif op == "gelu":  # 0.5 * x * (1 + erf(x / sqrt(2))), as Inductor writes it
        xf = b.f32(x)
        half = b("mul", (xf, b("constant", (0.5, F32), F32)), F32)
        e = b("erf", (b("mul", (xf, b("constant", (0.7071067811865476, F32), F32)), F32),), F32)
        y = b("to_dtype", (b("mul", (half, b("add", (e, b("constant", (1.0, F32), F32)), F32)), F32), F16), F16)
    else:
        raise UnknownOp(op)
    b.store("out", I0, y)
    return [_group(op, [_loop("op0", (n,), b)],
                   [dense_buffer("x", (rows, cols)), dense_buffer("out", (rows, cols), role="output")])]


def _sum_of(names: Sequence[str], op: str, rows: int, cols: int, name: str, out: str = "out") -> kir.KernelGroup:
    b = _Body()
    acc = b.load(names[0], I0)
    for x in names[1:]:
        acc = b(op, (acc, b.load(x, I0)), F16)
    b.store(out, I0, acc)
    bufs = [dense_buffer(x, (rows, cols)) for x in names]
    return _group(name, [_loop("op0", (rows * cols,), b)], bufs + [dense_buffer(out, (rows, cols), role="output")])


def _binary(op: str, rows: int, cols: int) -> list[kir.Kernel]:
    return [_sum_of(("x0", "x1"), op, rows, cols, op)]


def _nary(n: int):
    def build(op: str, rows: int, cols: int) -> list[kir.Kernel]:
        return [_sum_of([f"x{k}" for k in range(n)], "add", rows, cols, op)]
    return build


def _add_indep2(op: str, rows: int, cols: int) -> list[kir.Kernel]:
    # (a + b, c + d): Inductor emits two kernels
    return [_sum_of(("x0", "x1"), "add", rows, cols, "add_indep2_a", "out0"),
            _sum_of(("x2", "x3"), "add", rows, cols, "add_indep2_b", "out1")]


# ------------------------------------------------------------------ broadcasts

def _broadcast(op: str, rows: int, cols: int) -> list[kir.Kernel]:
    b = _Body()
    if op == "write":  # b[1, C] + c[R, 1]: both operands broadcast
        y = b("add", (b.load("brow", I1), b.load("bcol", I0)), F16)
        bufs = [dense_buffer("brow", (1, cols)), dense_buffer("bcol", (rows, 1))]
    else:
        x = b.load("x", cols * I0 + I1)
        if op == "bcastcol":  # x[R, C] + b[R, 1]
            v, vb = b.load("b", I0), dense_buffer("b", (rows, 1))
        else:  # bcast / mulbcast: x[R, C] (+|*) b[1, C]
            v, vb = b.load("b", I1), dense_buffer("b", (1, cols))
        y = b("mul" if op == "mulbcast" else "add", (x, v), F16)
        bufs = [dense_buffer("x", (rows, cols)), vb]
    b.store("out", cols * I0 + I1, y)
    return [_group(op, [_loop("op0", (rows, cols), b)], bufs + [dense_buffer("out", (rows, cols), role="output")])]


# ------------------------------------------------------------------ reductions

def _row_reduction(op: str, rows: int, cols: int) -> list[kir.Kernel]:
    """``read``/``sumrow``: x.sum(-1); ``amax``: x.amax(-1); ``mean``: x.mean(-1)
    (an fp32 row sum, then a small kernel dividing it)."""
    b = _Body()
    x = b.load("x", cols * I0 + R0)
    if op == "mean":
        b.reduce("sum", b.f32(x), F32, "s", I0)
        g = _group("mean_sum", [_loop("op0", (rows,), b, (cols,))],
                   [dense_buffer("x", (rows, cols)), dense_buffer("s", (rows,), F32, "output")])
        d = _Body()
        q = d("truediv", (d.load("s", I0, F32), d("constant", (float(cols), F32), F32)), F32)
        d.store("out", I0, d("to_dtype", (q, F16), F16))
        return [g, _group("mean_div", [_loop("op1", (rows,), d)],
                          [dense_buffer("s", (rows,), F32), dense_buffer("out", (rows,), role="output")])]
    b.reduce("max" if op == "amax" else "sum", x, F16, "out", I0)
    return [_group(op, [_loop("op0", (rows,), b, (cols,))],
                   [dense_buffer("x", (rows, cols)), dense_buffer("out", (rows,), role="output")])]


def _column_reduction(kind: str):
    """Reductions over dim 0 (``sumcol``, and ``ctsum``/``ctamax``/``ctamin``)."""
    def build(op: str, rows: int, cols: int) -> list[kir.Kernel]:
        b = _Body()
        b.reduce(kind, b.load("x", I0 + cols * R0), F16, "out", I0)
        return [_group(op, [_loop("op0", (cols,), b, (rows,))],
                       [dense_buffer("x", (rows, cols)), dense_buffer("out", (cols,), role="output")])]
    return build


def _sumall(op: str, rows: int, cols: int) -> list[kir.Kernel]:
    b = _Body()
    b.reduce("sum", b.load("x", R0), F16, "out", sympy.Integer(0))
    return [_group(op, [_loop("op0", (), b, (rows * cols,))],
                   [dense_buffer("x", (rows, cols)), dense_buffer("out", (), role="output")])]


def _softmax(op: str, rows: int, cols: int) -> list[kir.Kernel]:
    """Softmax as one fused group: the row max, the row sum of exp(x - max) and
    the normalised output, over the last dim (``softmax_noexp``: exp replaced by
    a multiply by 0.5, torch-spyre's matched control) or, for ``softmax_dim0``,
    over dim 0: the same group with x read down its columns (each reduction
    combines whole sticks, not the lanes of one)."""
    noexp = "noexp" in op
    n, red = (cols, rows) if op == "softmax_dim0" else (rows, cols)

    def at(i: sympy.Expr, j: sympy.Expr) -> sympy.Expr:  # element (reduced index j) of output line i
        return i + cols * j if op == "softmax_dim0" else cols * i + j

    m = _Body()
    m.reduce("max", m.f32(m.load("x", at(I0, R0))), F32, "rmax", I0)

    def shifted(b: _Body, idx: sympy.Expr) -> kir.Ref:
        d = b("sub", (b.f32(b.load("x", idx)), b.load("rmax", I0, F32)), F32)
        return b("mul", (d, b("constant", (0.5, F32), F32)), F32) if noexp else b("exp", (d,), F32)

    s = _Body()
    s.reduce("sum", shifted(s, at(I0, R0)), F32, "rsum", I0)
    o = _Body()
    q = o("truediv", (shifted(o, at(I0, I1)), o.load("rsum", I0, F32)), F32)
    o.store("out", at(I0, I1), o("to_dtype", (q, F16), F16))
    return [_group(op, [_loop("op0", (n,), m, (red,)), _loop("op1", (n,), s, (red,)),
                        _loop("op2", (n, red), o)],
                   [dense_buffer("x", (rows, cols)), dense_buffer("rmax", (n, 1), F32, "internal"),
                    dense_buffer("rsum", (n, 1), F32, "internal"), dense_buffer("out", (rows, cols), role="output")])]


# ------------------------------------------------------------------ transports

def _transpose(op: str, rows: int, cols: int) -> list[kir.Kernel]:
    b = _Body()  # out[C, R] = x[R, C]
    b.store("out", rows * I0 + I1, b.load("x", I0 + cols * I1))
    return [_group(op, [_loop("op0", (cols, rows), b)],
                   [dense_buffer("x", (rows, cols)), dense_buffer("out", (cols, rows), role="output")])]


def transpose_outer(rows: int, mid: int, cols: int) -> list[kir.Kernel]:
    """x[R, M, C] -> out[M, R, C] (the stick dim C stays innermost)."""
    b = _Body()
    b.store("out", rows * cols * I0 + cols * I1 + I2, b.load("x", cols * I0 + mid * cols * I1 + I2))
    return [_group("transpose_outer", [_loop("op0", (mid, rows, cols), b)],
                   [dense_buffer("x", (rows, mid, cols)), dense_buffer("out", (mid, rows, cols), role="output")])]


def _cat(op: str, rows: int, cols: int) -> list[kir.Kernel]:
    b = _Body()
    if op == "cat0":  # [x; x] along rows: out[2, R*C]
        b.store("out", rows * cols * I0 + I1, b.load("x", I1))
        loop, out = _loop("op0", (2, rows * cols), b), dense_buffer("out", (2, rows, cols), role="output")
    else:  # cat1: [x, x] along the stick dim: out[R, 2, C]
        b.store("out", 2 * cols * I0 + cols * I1 + I2, b.load("x", cols * I0 + I2))
        loop, out = _loop("op0", (rows, 2, cols), b), dense_buffer("out", (rows, 2, cols), role="output")
    return [_group(op, [loop], [dense_buffer("x", (rows, cols)), out])]


# ------------------------------------------------------------------ matmuls

def mm(m: int, k: int, n: int, name: str = "mm") -> kir.ExternKernel:
    """An fp16 ``(m, k) @ (k, n)``."""
    return kir.ExternKernel(name, "mm", (dense_buffer("a", (m, k)), dense_buffer("b", (k, n))),
                            dense_buffer("c", (m, n), role="output"), ("a", "b", "c"))


def bmm(batch: int, m: int, k: int, n: int, name: str = "bmm") -> kir.ExternKernel:
    """An fp16 ``(batch, m, k) @ (batch, k, n)``."""
    return kir.ExternKernel(name, "bmm", (dense_buffer("a", (batch, m, k)), dense_buffer("b", (batch, k, n))),
                            dense_buffer("c", (batch, m, n), role="output"), ("a", "b", "c"))


#: operator -> builder(op, rows, cols) of its kernels (several: Inductor emits
#: several kernels for the function).
OPS = {
    **{op: _unary for op in ("neg", "copy", "gelu", "relu", "sigmoid", "exp")},
    "add": _binary, "mul": _binary,
    **{f"add{n}": _nary(n) for n in (3, 4, 5, 6, 8)},
    "add_indep2": _add_indep2,
    **{op: _broadcast for op in ("bcast", "mulbcast", "bcastcol", "write")},
    **{op: _row_reduction for op in ("read", "sumrow", "amax", "mean")},
    "sumcol": _column_reduction("sum"), "ctsum": _column_reduction("sum"),
    "ctamax": _column_reduction("max"), "ctamin": _column_reduction("min"),
    "sumall": _sumall,
    "softmax": _softmax, "softmax_noexp": _softmax, "softmax_dim0": _softmax,
    "transpose": _transpose, "cat0": _cat, "cat1": _cat,
}


def kernels(op: str, rows: int, cols: int) -> list[kir.Kernel]:
    """The kernels of operator ``op`` on an fp16 ``(rows, cols)`` input."""
    try:
        build = OPS[op]
    except KeyError:
        raise UnknownOp(op) from None
    return build(op, rows, cols)
