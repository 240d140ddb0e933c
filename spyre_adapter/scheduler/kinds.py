"""The kernel kinds the Spyre backend plans (records of
:class:`spyre_adapter.model.kinds.KernelKind`, registered on import):

* ``scan``: a loop kernel with a scan (cumsum, cumprod, cummax...): per-core
  chunk scans and a carry pass over the ring (:mod:`.scan_program`);
* ``loops``: a fused group of Kernel IR loop kernels (pointwise, reductions,
  gathers), divided over the cores' rows (:mod:`.loops`);
* ``matmul``: the extern matmul family (:data:`~spyre_adapter.model.kinds.MATMUL_OPS`)
  on the PE arrays (:mod:`.matmul`);
* ``attention``: the hand-written flash-attention call (:mod:`.attention`);
* ``collective``: a compiled functional ``all_reduce_`` as this card's part of
  a group's collective: link exchanges and a reduction on the cores (:mod:`.collectives`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import sympy

from spyre_shims import kernel_ir as kir
from spyre_shims.ops import POINTWISE
from spyre_shims.reference import concrete

from spyre_adapter.model.costs import op_counts
from spyre_adapter.model.gc_pause import gc_paused
from spyre_adapter.model.kinds import MATMUL_OPS, KernelKind, kind_of, register_kind
from spyre_adapter.model.machine import Machine
from spyre_adapter.model.program import Program
from spyre_adapter.model.scalars import scalar_instrs
from spyre_adapter.scheduler import attention
from spyre_adapter.scheduler.collectives import COLLECTIVE_OPS, REDUCE_OPS, collective_work, plan_collective
from spyre_adapter.scheduler.loops import plan_group
from spyre_adapter.scheduler.matmul import plan_matmul
from spyre_adapter.scheduler.scan_program import is_scan, plan_scan
from spyre_adapter.scheduler.scan_program import unsupported as scan_unsupported

__all__ = ["SCAN", "LOOPS", "MATMUL", "ATTENTION", "UNSUPPORTED_OPS", "UNSUPPORTED_DTYPES", "PE_DTYPES", "kind_of", "work_of"]

#: Pointwise ops without a Spyre vector/SFU implementation: kernels using them
#: run on the host reference evaluator (with a fallback warning).
UNSUPPORTED_OPS = frozenset({
    n for n in POINTWISE if n.startswith(("bessel_", "modified_bessel_", "scaled_modified_bessel_",
                                           "spherical_bessel_", "chebyshev_", "shifted_chebyshev_",
                                           "hermite_", "laguerre_", "legendre_"))
} | {"airy_ai", "zeta", "igamma", "igammac", "gammainc", "gammaincc", "erfcx", "i0", "i0e", "i1", "i1e",
     "ndtri", "log_ndtr", "polygamma", "digamma", "lgamma", "nextafter"})
#: dtypes the card computes in (no 64-bit floating point, no complex).
UNSUPPORTED_DTYPES = frozenset({"float64", "complex64", "complex128"})
#: dtypes the vector units compute in.
VECTOR_DTYPES = frozenset({"float16", "bfloat16", "float32", "int8", "uint8", "int16", "int32", "int64", "bool"})
#: dtypes the PE arrays multiply (16-bit floats natively, fp32 emulated).
PE_DTYPES = frozenset({"float16", "bfloat16", "float32"})


# ------------------------------------------------------------------ scans (before loops: both take kernel groups)

def _scan_unsupported(kernel: kir.KernelGroup) -> tuple[str, str, str] | None:
    why = scan_unsupported(kernel)
    if why is not None:
        return "op scan", kernel.name, f"no Spyre scan program for {why}"
    return _loops_unsupported(kernel)


@gc_paused
def _plan_scan(kernel: kir.KernelGroup, m: Machine, sizes: Mapping[sympy.Symbol, int]) -> Program:
    return plan_scan(kernel, m, sizes, kernel.name)


# ------------------------------------------------------------------ loops

def _loops_unsupported(kernel: kir.KernelGroup) -> tuple[str, str, str] | None:
    buffers = {b.name: b for b in kernel.buffers}
    for lk in kernel.kernels:
        # float64 launch parameters (Dynamo's unspecialized floats) are evaluated by
        # the host at launch and enter the card converted (see model/scalars.py).
        host_scalars = scalar_instrs(lk, buffers)
        for k, ins in enumerate(lk.body):
            if ins.op in UNSUPPORTED_OPS:
                return f"op {ins.op}", lk.name, "no Spyre vector/SFU implementation"
            if ins.dtype in UNSUPPORTED_DTYPES and not (ins.dtype == "float64" and k in host_scalars):
                return f"dtype {ins.dtype}", lk.name, f"{ins.op} computes in {ins.dtype}"
    return None


def _loops_work(kernel: kir.KernelGroup, sizes: Mapping[sympy.Symbol, int]) -> tuple[str, float]:
    """Vector ops of the group: per point before its reductions, per output point after."""
    total = 0.0
    for lk in kernel.kernels:
        c = op_counts(lk.body)
        n = math.prod(concrete(r, sizes) for r in lk.ranges)
        r = math.prod(concrete(x, sizes) for x in lk.reduction_ranges)
        total += n * (r * c.vec_pre + c.vec_post)
    return "vec", float(total)


def _plan_loops(kernel: kir.KernelGroup, m: Machine, sizes: Mapping[sympy.Symbol, int]) -> Program:
    return plan_group(kernel, m, sizes, kernel.name)


SCAN = register_kind(KernelKind(
    name="scan", program_kind="loop", matches=lambda k: isinstance(k, kir.KernelGroup) and is_scan(k),
    plan=_plan_scan, dtypes=VECTOR_DTYPES, work=lambda kernel, sizes: _loops_work(kernel, sizes),
    unsupported=_scan_unsupported))

LOOPS = register_kind(KernelKind(
    name="loops", program_kind="loop", matches=lambda k: isinstance(k, kir.KernelGroup), plan=_plan_loops,
    dtypes=VECTOR_DTYPES, work=_loops_work, unsupported=_loops_unsupported))


# ------------------------------------------------------------------ extern kernels

def _extern_unsupported(allowed: frozenset[str], why: str) -> Any:
    def unsupported(kernel: kir.ExternKernel) -> tuple[str, str, str] | None:
        bad = [b.dtype for b in kernel.buffers if b.dtype not in allowed]
        return (f"dtype {bad[0]}", kernel.name, why.format(op=kernel.op, dtype=bad[0])) if bad else None
    return unsupported


def _matmul_work(kernel: kir.ExternKernel, sizes: Mapping[sympy.Symbol, int]) -> tuple[str, float]:
    """2 FLOPs per multiply-add of the product (a bias operand adds no products)."""
    dims = [[concrete(x, sizes) for x in b.size] for b in kernel.inputs]
    a, b = (dims[1], dims[2]) if kernel.op in ("addmm", "baddbmm") else (dims[0], dims[1])
    batch = a[0] if len(a) == 3 else 1
    return "pe", 2.0 * batch * a[-2] * a[-1] * b[-1]


def _plan_matmul(kernel: kir.ExternKernel, m: Machine, sizes: Mapping[sympy.Symbol, int]) -> Program:
    return plan_matmul(kernel, m, sizes, kernel.name)


MATMUL = register_kind(KernelKind(
    name="matmul", program_kind="matmul",
    matches=lambda k: isinstance(k, kir.ExternKernel) and k.op in MATMUL_OPS, plan=_plan_matmul,
    dtypes=PE_DTYPES, work=_matmul_work, unsupported=_extern_unsupported(PE_DTYPES, "the PE arrays do not multiply {dtype}")))


def _attention_work(kernel: kir.ExternKernel, sizes: Mapping[sympy.Symbol, int]) -> tuple[str, float]:
    """The two products ``Q K^T`` and ``P V``: 4 FLOPs per (query, key, head-dim) point."""
    q, k = ([concrete(x, sizes) for x in b.size] for b in kernel.inputs[:2])
    return "pe", 4.0 * math.prod(q[:-1]) * k[-2] * q[-1]


@gc_paused
def _plan_attention(kernel: kir.ExternKernel, m: Machine, sizes: Mapping[sympy.Symbol, int]) -> Program:
    return attention.program_for(kernel, m, sizes)


#: The hand-written kernel is a call the device made itself: no host fallback at
#: run time (its device implementation falls back before it launches) and no
#: Kernel IR reference semantics (its reference is the generic path).
ATTENTION = register_kind(KernelKind(
    name="attention", program_kind="attention",
    matches=lambda k: isinstance(k, kir.ExternKernel) and k.op == "attention", plan=_plan_attention,
    dtypes=PE_DTYPES, work=_attention_work, unsupported=_extern_unsupported(PE_DTYPES, "{op} in {dtype}"),
    host_fallback=False, reference=False))


def _collective_unsupported(kernel: kir.ExternKernel) -> tuple[str, str, str] | None:
    dtype = kernel.inputs[0].dtype if kernel.inputs else "?"
    if dtype not in VECTOR_DTYPES:
        return f"dtype {dtype}", kernel.name, f"the vector unit does not move {dtype}"
    op = kernel.attr("reduce_op")
    if op is None:  # an all-gather: nothing to reduce
        return None
    if op not in REDUCE_OPS:
        return f"reduce_op {op}", kernel.name, f"no Spyre program reduces with it (programs: {', '.join(REDUCE_OPS)})"
    if op == "avg" and not dtype.startswith(("float", "bfloat")):
        return f"reduce_op {op}", kernel.name, f"an average of {dtype} values"
    return None


#: A functional collective of a group of cards (one program per card; a group or
#: size no program fits runs the collective on the host through torch.distributed).
#: Its reference semantics are torch.distributed's (spyre_shims.reference.COLLECTIVE_OPS).
COLLECTIVE = register_kind(KernelKind(
    name="collective", program_kind="collective",
    matches=lambda k: isinstance(k, kir.ExternKernel) and k.op in COLLECTIVE_OPS, plan=plan_collective,
    dtypes=VECTOR_DTYPES, work=collective_work, unsupported=_collective_unsupported))


def work_of(kernel: Any, sizes: Mapping[sympy.Symbol, int] | None = None) -> tuple[str, float]:
    """("pe", FLOPs) or ("vec", vector ops) of a kernel, from its Kernel IR alone."""
    kind = kind_of(kernel)
    if kind is None:
        raise ValueError(f"no kernel kind takes {type(kernel).__name__} {getattr(kernel, 'name', '')}")
    return kind.work(kernel, sizes or {})
