"""What the mutation bench mutates, each with its CPU eager oracle.

Compiled functions (a matmul, a softmax, an RMSNorm, a fused pointwise chain, a
reduction split over cores, an ``index_put``, and the small Llama decoder block
with its attention) give the programs real compiles produce: matmuls with ring
sharing, split reductions with their ring messages and combines, data-indexed
scatters, attention. Real compiles
of these sizes emit no barriers, so programs planned directly add them: a group
whose second kernel reads transposed what the first wrote (its cores ordered by
a barrier between phases), a row sum split four ways per row, and an add on one
core in many tiles (allocations that reuse each other's bytes).
"""

from __future__ import annotations

import sympy
import torch

from spyre_shims import index as sidx
from spyre_shims.kernel_ir import Instr, KernelGroup, LoopKernel, Ref

from spyre_adapter.bench.mutation_runs import Case, KernelCase
from spyre_adapter.model.buffer_specs import contiguous_buffer
from spyre_adapter.model.machine import Machine
from spyre_adapter.scheduler.loop_estimates import Division
from spyre_adapter.scheduler.loops import plan_group
from spyre_adapter.zoo import blocks as models

__all__ = ["function_cases", "kernel_cases"]

_I0, _I1, _R0 = (sidx.index_symbol(n) for n in ("i0", "i1", "r0"))


def _rmsnorm(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    x32 = x.float()
    return w * (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + 1e-5)).half()


def function_cases(quick: bool = False) -> list[Case]:
    """The compiled functions (fp16, as models run them; ``quick``: the block left out)."""
    g = torch.Generator().manual_seed(0)

    def r(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=g).half()

    cases = [
        Case("matmul", lambda a, b: a @ b, (r(256, 512), r(512, 256))),
        Case("softmax", lambda x: torch.softmax(x, -1), (r(128, 1024),)),
        Case("rmsnorm", _rmsnorm, (r(128, 512), r(512))),
        Case("add_relu", lambda x, y: torch.relu(x + y), (r(256, 512), r(256, 512))),
        Case("sum_all", lambda x: x.float().sum(), (r(512, 1024),)),
        Case("index_put", lambda x, i, v: x.index_put((i,), v),
             (torch.randn(4096, 64, generator=g), torch.randperm(4096, generator=g)[:1024],
              torch.randn(1024, 64, generator=g))),
    ]
    if not quick:
        cfg = models.ModelConfig(hidden=128, heads=2, kv_heads=1, intermediate=256, seq=64)
        cases.append(Case("llama_block", models.build("llama-block", cfg).eval(),
                          (models.example_inputs("llama-block", cfg),)))
    return cases


def _transpose_group(n: int) -> KernelGroup:
    """``t = a``, then ``c = t`` transposed: every core reads what the others wrote."""
    k0 = LoopKernel("op0", (sympy.Integer(n), sympy.Integer(n)), (), (
        Instr("load", ("a", _I0 * n + _I1), "float32"), Instr("store", ("t", _I0 * n + _I1, Ref(0), None))))
    k1 = LoopKernel("op1", (sympy.Integer(n), sympy.Integer(n)), (), (
        Instr("load", ("t", _I1 * n + _I0), "float32"), Instr("store", ("c", _I0 * n + _I1, Ref(0), None))))
    return KernelGroup("phased_transpose", (k0, k1), (
        contiguous_buffer("a", (n, n), "float32", "input"), contiguous_buffer("t", (n, n), "float32", "internal"),
        contiguous_buffer("c", (n, n), "float32", "output")), ("a", "c"))


def _row_sum(rows: int, cols: int) -> KernelGroup:
    body = (Instr("load", ("a", cols * _I0 + _R0), "float32"),
            Instr("reduction", ("float32", "float32", "sum", Ref(0)), "float32"),
            Instr("store_reduction", ("c", _I0, Ref(1))))
    lk = LoopKernel("op0", (sympy.Integer(rows),), (sympy.Integer(cols),), body)
    return KernelGroup("split_row_sum", (lk,), (contiguous_buffer("a", (rows, cols), "float32", "input"),
                                                contiguous_buffer("c", (rows,), "float32", "output")), ("a", "c"))


def _add(rows: int, cols: int) -> KernelGroup:
    """``c = a + b`` (fp32): on one core, in many tiles whose allocations reuse each other's bytes."""
    idx = cols * _I0 + _I1
    body = (Instr("load", ("a", idx), "float32"), Instr("load", ("b", idx), "float32"),
            Instr("add", (Ref(0), Ref(1)), "float32"), Instr("store", ("c", idx, Ref(2), None)))
    lk = LoopKernel("op0", (sympy.Integer(rows), sympy.Integer(cols)), (), body)
    return KernelGroup("tiled_add", (lk,), tuple(contiguous_buffer(n, (rows, cols), "float32", r)
                                                 for n, r in (("a", "input"), ("b", "input"), ("c", "output"))),
                       ("a", "b", "c"))


def kernel_cases(m: Machine) -> list[KernelCase]:
    """The directly planned programs, with their inputs and eager oracles."""
    g = torch.Generator().manual_seed(1)
    n, rows, cols = 128, 64, 4096
    a = torch.randn(n * n, generator=g)
    x = torch.randn(rows * cols, generator=g)
    tr, tc = 32, 4096
    ta, tb = torch.randn(tr * tc, generator=g), torch.randn(tr * tc, generator=g)
    return [
        KernelCase("tiled_add", plan_group(_add(tr, tc), m, {}, "tiled_add", force=Division(1)),
                   {"a": ta, "b": tb, "c": torch.full((tr * tc,), float("nan"))},
                   lambda b: {"c": b["a"] + b["b"]}),
        KernelCase("phased_transpose", plan_group(_transpose_group(n), m, {}, "phased_transpose", force=Division(4)),
                   {"a": a, "c": torch.full((n * n,), float("nan"))},
                   lambda b: {"c": b["a"].view(n, n).t().reshape(-1)}),
        KernelCase("split_row_sum", plan_group(_row_sum(rows, cols), m, {}, "split_row_sum", force=Division(2, 4)),
                   {"a": x, "c": torch.full((rows,), float("nan"))},
                   lambda b: {"c": b["a"].view(rows, cols).sum(-1)}),
    ]
