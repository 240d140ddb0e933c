"""Small Kernel IR bodies the planners make for vector steps of their own
(matmul epilogues, partial-sum adds, hand-written kernels' softmax steps).

Their buffers are labels for LX operands (bound by body position), indexed in
the step's local coordinates; the program's DMA instructions say which DRAM
elements those operands hold."""

from __future__ import annotations

import functools

import sympy

from spyre_shims import index as sidx
from spyre_shims.kernel_ir import Instr, LoopKernel, Ref

__all__ = ["epilogue", "accumulate"]

I0, I1 = sidx.index_symbol("i0"), sidx.index_symbol("i1")


@functools.lru_cache(maxsize=256)
def epilogue(rows: int, cols: int, out_dtype: str, alpha: float, beta: float, bias: str) -> LoopKernel:
    """``out = (alpha * acc + beta * bias).to(out_dtype)`` over a (rows, cols)
    tile: ``acc`` fp32 row-major, ``bias`` "" (none), "row" (one value per
    column) or "full" (a tile), ``out`` row-major."""
    idx = I0 * cols + I1
    body: list[Instr] = [Instr("load", ("acc", idx), "float32")]
    v = Ref(0)
    if alpha != 1:
        body.append(Instr("constant", (float(alpha), "float32"), "float32"))
        body.append(Instr("mul", (v, Ref(len(body) - 1)), "float32"))
        v = Ref(len(body) - 1)
    if bias and beta != 0:
        body.append(Instr("load", ("bias", I1 if bias == "row" else idx), out_dtype))
        b = Ref(len(body) - 1)
        body.append(Instr("to_dtype", (b, "float32"), "float32"))
        b = Ref(len(body) - 1)
        if beta != 1:
            body.append(Instr("constant", (float(beta), "float32"), "float32"))
            body.append(Instr("mul", (b, Ref(len(body) - 1)), "float32"))
            b = Ref(len(body) - 1)
        body.append(Instr("add", (v, b), "float32"))
        v = Ref(len(body) - 1)
    body.append(Instr("to_dtype", (v, out_dtype), out_dtype))
    body.append(Instr("store", ("out", idx, Ref(len(body) - 1), None)))
    return LoopKernel(f"epilogue_{rows}x{cols}_{out_dtype}", (sympy.Integer(rows), sympy.Integer(cols)), (),
                      tuple(body))


@functools.lru_cache(maxsize=256)
def accumulate(n: int) -> LoopKernel:
    """``acc += part`` over ``n`` fp32 values (partial sums of a K split)."""
    body = (Instr("load", ("acc", I0), "float32"), Instr("load", ("part", I0), "float32"),
            Instr("add", (Ref(0), Ref(1)), "float32"), Instr("store", ("acc", I0, Ref(2), None)))
    return LoopKernel(f"accumulate_{n}", (sympy.Integer(n),), (), body)
