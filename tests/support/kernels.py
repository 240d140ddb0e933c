"""Kernel IR built by hand for scheduler/emulator tests, and running a program
against the reference semantics."""

from __future__ import annotations

import json
from collections.abc import Mapping

import sympy
import torch

from spyre_shims import index as sidx
from spyre_shims import kernel_ir as kir
from spyre_shims.kernel_ir import BufferSpec, ExternKernel, Instr, KernelGroup, LoopKernel, Ref
from spyre_shims.ops import torch_dtype
from spyre_shims.reference import run_kernel

from spyre_adapter.emulator import Card, execute
from spyre_adapter.model.buffer_specs import contiguous_buffer
from spyre_adapter.model.machine import DEFAULT, Machine
from spyre_adapter.model.program import Program

I0, I1, I2, R0 = (sidx.index_symbol(n) for n in ("i0", "i1", "i2", "r0"))


def buf(name: str, shape: tuple[int, ...], dtype: str = "float16", role: str = "input") -> BufferSpec:
    return contiguous_buffer(name, shape, dtype, role)


def add(rows: int, cols: int, dtype: str = "float16", out: str = "c") -> KernelGroup:
    idx = cols * I0 + I1
    body = (Instr("load", ("a", idx), dtype), Instr("load", ("b", idx), dtype), Instr("add", (Ref(0), Ref(1)), dtype),
            Instr("store", (out, idx, Ref(2), None)))
    lk = LoopKernel("op0", (sympy.Integer(rows), sympy.Integer(cols)), (), body)
    return KernelGroup("add", (lk,), (buf("a", (rows, cols), dtype), buf("b", (rows, cols), dtype),
                                      buf(out, (rows, cols), dtype, "output")), ("a", "b", out))


def scale(rows: int, cols: int, src: str, dst: str, dtype: str = "float16") -> KernelGroup:
    idx = cols * I0 + I1
    body = (Instr("load", (src, idx), dtype), Instr("constant", (2.0, dtype), dtype),
            Instr("mul", (Ref(0), Ref(1)), dtype), Instr("store", (dst, idx, Ref(2), None)))
    lk = LoopKernel("op1", (sympy.Integer(rows), sympy.Integer(cols)), (), body)
    return KernelGroup("scale", (lk,), (buf(src, (rows, cols), dtype), buf(dst, (rows, cols), dtype, "output")),
                       (src, dst))


def row_sum(rows: int, cols: int, dtype: str = "float32") -> KernelGroup:
    body = (Instr("load", ("a", cols * I0 + R0), dtype),
            Instr("reduction", ("float32", dtype, "sum", Ref(0)), "float32"),
            Instr("store_reduction", ("c", I0, Ref(1))))
    lk = LoopKernel("op0", (sympy.Integer(rows),), (sympy.Integer(cols),), body)
    return KernelGroup("rowsum", (lk,), (buf("a", (rows, cols), dtype), buf("c", (rows,), "float32", "output")),
                       ("a", "c"))


def exp_chain(rows: int, cols: int, depth: int) -> KernelGroup:
    idx = cols * I0 + I1
    body = [Instr("load", ("a", idx), "float16")]
    for k in range(depth):
        body.append(Instr("exp", (Ref(k),), "float16"))
    body.append(Instr("store", ("c", idx, Ref(depth), None)))
    lk = LoopKernel("op0", (sympy.Integer(rows), sympy.Integer(cols)), (), tuple(body))
    return KernelGroup("exps", (lk,), (buf("a", (rows, cols)), buf("c", (rows, cols), role="output")), ("a", "c"))


def transpose_copy(a: int, b: int, c: int, dtype: str = "float16") -> KernelGroup:
    """out[i0, i1, i2] = x[i2, i1, i0]: ``x.permute(2, 1, 0).contiguous()`` of x (c, b, a)."""
    body = (Instr("load", ("x", I2 * (b * a) + I1 * a + I0), dtype),
            Instr("store", ("out", I0 * (b * c) + I1 * c + I2, Ref(0), None)))
    lk = LoopKernel("op0", (sympy.Integer(a), sympy.Integer(b), sympy.Integer(c)), (), body)
    return KernelGroup("transpose", (lk,), (buf("x", (c, b, a), dtype), buf("out", (a, b, c), dtype, "output")),
                       ("x", "out"))


def rotate_half(rows: int, heads: int, dim: int, dtype: str = "float32") -> KernelGroup:
    """Rotary embedding as Inductor lowers it: out = x * cos + rotate_half(x) * sin,
    the halves selected by masks built from index expressions (``x`` is
    (rows, heads, dim), ``cos``/``sin`` are (rows, dim))."""
    half = dim // 2
    row, col = heads * dim * I0 + dim * I1 + I2, dim * I0 + I2
    body = (
        Instr("load", ("x", row), dtype), Instr("load", ("cos", col), dtype), Instr("mul", (Ref(0), Ref(1)), dtype),
        Instr("index_expr", (I2, "int64"), "int64"), Instr("constant", (half, "int64"), "int64"),
        Instr("lt", (Ref(3), Ref(4)), "bool"),
        Instr("load", ("x", row + half), dtype, Ref(5)), Instr("neg", (Ref(6),), dtype),
        Instr("constant", (0.0, dtype), dtype), Instr("masked", (Ref(5), Ref(7), Ref(8)), dtype),
        Instr("ge", (Ref(3), Ref(4)), "bool"),
        Instr("load", ("x", row - half), dtype, Ref(10)), Instr("masked", (Ref(10), Ref(11), Ref(8)), dtype),
        Instr("where", (Ref(5), Ref(9), Ref(12)), dtype),
        Instr("load", ("sin", col), dtype), Instr("mul", (Ref(13), Ref(14)), dtype), Instr("add", (Ref(2), Ref(15)), dtype),
        Instr("store", ("out", row, Ref(16), None)))
    lk = LoopKernel("rope", (sympy.Integer(rows), sympy.Integer(heads), sympy.Integer(dim)), (), body)
    return KernelGroup("rope", (lk,), (buf("x", (rows, heads, dim), dtype), buf("cos", (rows, dim), dtype),
                                       buf("sin", (rows, dim), dtype), buf("out", (rows, heads, dim), dtype, "output")),
                       ("x", "cos", "sin", "out"))


def gather_scale_row_sum(rows: int, cols: int, choices: int = 4) -> KernelGroup:
    """A MoE combine followed by a norm's reduction, as Inductor fuses them:
    t[i0, i1] = x[i0, i1] * w[i0, idx[i0]] (a tiny routing-weight buffer read at
    every point through a data-dependent index), then s[i0] = sum_i1 t[i0, i1]."""
    v0 = sidx.index_symbol("v0")
    op0 = LoopKernel("op0", (sympy.Integer(rows), sympy.Integer(cols)), (), (
        Instr("load", ("x", cols * I0 + I1), "float32"), Instr("load", ("idx", I0), "int64"),
        Instr("indirect", (Ref(1), choices, True, False, "v0"), "int64"),
        Instr("load", ("w", choices * I0 + v0), "float32"), Instr("mul", (Ref(0), Ref(3)), "float32"),
        Instr("store", ("t", cols * I0 + I1, Ref(4), None))))
    op1 = LoopKernel("op1", (sympy.Integer(rows),), (sympy.Integer(cols),), (
        Instr("load", ("t", cols * I0 + R0), "float32"),
        Instr("reduction", ("float32", "float32", "sum", Ref(0)), "float32"),
        Instr("store_reduction", ("s", I0, Ref(1)))))
    return KernelGroup("gather_row_sum", (op0, op1), (
        buf("x", (rows, cols), "float32"), buf("idx", (rows,), "int64"), buf("w", (rows, choices), "float32"),
        buf("t", (rows, cols), "float32", "internal"), buf("s", (rows,), "float32", "output")), ("x", "idx", "w", "s"))


#: The run-time size symbol of :func:`rows_times_row`.
S0 = sidx.index_symbol("s0")


def rows_times_row(cols: int, dtype: str = "float32") -> KernelGroup:
    """out[i0, i1] = a[i0, i1] * w[i1] over ``s0`` rows known at run time only
    (a decode loop's growing dimension)."""
    body = (Instr("load", ("a", cols * I0 + I1), dtype), Instr("load", ("w", I1), dtype),
            Instr("mul", (Ref(0), Ref(1)), dtype), Instr("store", ("out", cols * I0 + I1, Ref(2), None)))
    lk = LoopKernel("op0", (S0, sympy.Integer(cols)), (), body)

    def spec(name: str, role: str) -> BufferSpec:
        return BufferSpec(name, dtype, (S0, sympy.Integer(cols)), (sympy.Integer(cols), sympy.Integer(1)),
                          sympy.Integer(0), S0 * cols, role)
    return KernelGroup("rows_times_row", (lk,), (spec("a", "input"), buf("w", (cols,), dtype),
                                                 spec("out", "output")), ("a", "w", "out"), ("s0",))


def mm_rows(n: int, k: int, dtype: str = "float16") -> ExternKernel:
    """c = a @ b with ``s0`` rows of ``a`` known at run time only."""
    def spec(name: str, cols: int, role: str) -> BufferSpec:
        return BufferSpec(name, dtype, (S0, sympy.Integer(cols)), (sympy.Integer(cols), sympy.Integer(1)),
                          sympy.Integer(0), S0 * cols, role)
    return ExternKernel("mm_rows", "mm", (spec("a", k, "input"), buf("b", (k, n), dtype)), spec("c", n, "output"),
                        ("a", "b", "c"), symbols=("s0",))


def sized_buffers(kernel: KernelGroup | ExternKernel, sizes: Mapping[sympy.Symbol, int], seed: int = 0) -> dict[str, torch.Tensor]:
    """Random flat tensors for every argument buffer at run-time ``sizes``."""
    g = torch.Generator().manual_seed(seed)
    return {b.name: torch.randn(int(b.storage_numel.xreplace(dict(sizes))), generator=g).to(torch_dtype(b.dtype))
            for b in kernel.buffers if b.role != "internal"}


def mm(m: int, n: int, k: int, dtype: str = "float16") -> ExternKernel:
    return ExternKernel("mm", "mm", (buf("a", (m, k), dtype), buf("b", (k, n), dtype)),
                        buf("c", (m, n), dtype, "output"), ("a", "b", "c"))


def buffers(kernel: KernelGroup | ExternKernel, seed: int = 0) -> dict[str, torch.Tensor]:
    """Random flat tensors for every argument buffer."""
    g = torch.Generator().manual_seed(seed)
    out = {}
    for b in kernel.buffers:
        if b.role == "internal" or b.name in out:
            continue
        n = int(b.storage_numel)
        out[b.name] = torch.randn(n, generator=g).to(torch_dtype(b.dtype))
    return out


def run_program(p: Program, kernel: KernelGroup | ExternKernel, m: Machine = DEFAULT, seed: int = 0,
                card: Card | None = None) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """(what the program computed, what the reference computed) on the same inputs."""
    got = buffers(kernel, seed)
    want = {k: v.clone() for k, v in got.items()}
    run_kernel(kernel, want)
    execute(p, got, card or Card(m))
    return got, want


def outputs(kernel: KernelGroup | ExternKernel) -> list[str]:
    if isinstance(kernel, ExternKernel):
        return [kernel.output.name]
    return [b.name for b in kernel.buffers if b.role in ("output", "inout")]


def assert_same(got: Mapping[str, torch.Tensor], want: Mapping[str, torch.Tensor], names: list[str],
                atol: float = 1e-2, rtol: float = 1e-2) -> None:
    for n in names:
        torch.testing.assert_close(got[n].float(), want[n].float(), atol=atol, rtol=rtol)


def renamed(kernel: KernelGroup | ExternKernel, names: Mapping[str, str], name: str) -> KernelGroup | ExternKernel:
    """The same kernel with its buffers (``names``: old -> new) and itself renamed:
    another layer of a model, identical in structure."""
    def walk(doc: object) -> object:
        if isinstance(doc, dict):
            return {k: (name if k == "name" and doc.get("$t") in ("KernelGroup", "ExternKernel") else walk(v))
                    for k, v in doc.items()}
        if isinstance(doc, list):
            return [walk(x) for x in doc]
        return names.get(doc, doc) if isinstance(doc, str) else doc
    out = kir.from_json(json.dumps(walk(json.loads(kir.to_json(kernel)))))
    assert isinstance(out, (KernelGroup, ExternKernel))
    return out
