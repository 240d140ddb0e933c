"""Launch-invariant scalar arithmetic in a kernel body.

With dynamic shapes Dynamo passes Python floats (an RMSNorm epsilon, a rotary
scaling factor, a Granite multiplier) as 0-d float64 host tensors, and Inductor
loads them inside the kernels that use them, converting to the compute dtype
right away (``to_dtype(load(eps), float32)``). Such a value depends on no loop
index and no tensor data: it is a launch parameter, which a real Spyre host
runtime evaluates once per launch on the CPU and hands to the kernel in a dtype
the card computes in. Inductor's CPU backend computes exactly that
(``static_cast<float>(double)``), and so do the emulator's numerics.

:func:`scalar_instrs` finds those instructions, so the backend can accept
float64 there while still declining float64 anywhere it would touch tensor data.
"""

from __future__ import annotations

import sympy

from spyre_shims import kernel_ir as kir

__all__ = ["scalar_instrs"]

#: Ops that never make a value launch-invariant, whatever their operands.
_DATA_OPS = frozenset({"reduction", "indirect", "masked", "store", "store_reduction", "scan", "sort", "getitem",
                       "check_bounds", "device_assert", "load_seed", "rand", "randn", "randint64"})


def _loop_free(expr: sympy.Basic) -> bool:
    """No iteration, reduction or indirect index variable (only size symbols)."""
    return not any(s.name[:1] in "irv" and s.name[1:].isdigit() for s in expr.free_symbols)


def _one_element(b: kir.BufferSpec) -> bool:
    return all(s == 1 for s in b.size)


def scalar_instrs(kernel: kir.LoopKernel, buffers: dict[str, kir.BufferSpec]) -> frozenset[int]:
    """Positions of ``kernel``'s instructions whose value is the same at every
    point of its iteration space and derives only from constants, size symbols
    and one-element buffers."""
    out: set[int] = set()
    for k, ins in enumerate(kernel.body):
        if ins.op in _DATA_OPS:
            continue
        if ins.op == "load":
            # A mask only guards lanes that would index out of bounds: a
            # loop-free index into a one-element buffer never does.
            b = buffers.get(ins.args[0])
            if b is not None and _one_element(b) and _loop_free(ins.args[1]):
                out.add(k)
            continue
        if ins.op == "index_expr":
            if _loop_free(ins.args[0]):
                out.add(k)
            continue
        refs = [a for a in ins.args if isinstance(a, kir.Ref)]
        exprs = [a for a in ins.args if isinstance(a, sympy.Basic)]
        if all(r.id in out for r in refs) and all(_loop_free(e) for e in exprs):
            out.add(k)
    return frozenset(out)
