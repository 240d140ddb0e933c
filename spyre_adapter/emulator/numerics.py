"""Numerics of a program: the Kernel IR evaluated vectorised over whole tiles,
with the reduction order the program's division implies (split reductions and
K-split matmuls combine per-core partials, as the card does)."""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping

import sympy
import torch

from spyre_shims.reference import buffer_view, run_kernel

from ..program import Program


def run(p: Program, buffers: MutableMapping[str, torch.Tensor], sizes: Mapping[sympy.Symbol, int]) -> None:
    """Execute ``p``'s numerics on flat host buffers."""
    if p.kind == "loop":
        run_kernel(p.kernel, buffers, sizes, reduction_splits=p.rsplit)
    else:
        _matmul(p, buffers, sizes)


def _matmul(p: Program, buffers: Mapping[str, torch.Tensor], sizes: Mapping[sympy.Symbol, int]) -> None:
    k = p.kernel
    views = [buffer_view(buffers[b.name], b, sizes) for b in k.inputs]
    out = buffer_view(buffers[k.output.name], k.output, sizes)
    a, b = views[-2], views[-1]
    alpha, beta = (k.attr("alpha", 1), k.attr("beta", 1)) if k.op in ("addmm", "baddbmm") else (1, 0)
    if out.dtype in (torch.float16, torch.bfloat16) and a.dtype == out.dtype and b.dtype == out.dtype:
        # The PE arrays multiply 16-bit operands and accumulate in fp32; torch's
        # CPU matmul of 16-bit tensors does the same (fp32 accumulation, one
        # rounding of the result). Partial sums of a K split are fp32 on the card
        # too, so their order changes nothing at 16-bit output precision.
        if k.op in ("addmm", "baddbmm") and beta != 0:
            res = torch.baddbmm(views[0], a, b, beta=beta, alpha=alpha) if a.dim() == 3 else \
                torch.addmm(views[0].expand(out.shape), a, b, beta=beta, alpha=alpha)
        else:
            res = torch.matmul(a, b)
            if alpha != 1:
                res = res * alpha
        out.copy_(res)
        return
    acc = torch.float64 if out.dtype == torch.float64 else torch.float32
    # fp32 accumulation per K chunk, chunks summed in core order (ring reduction).
    total = None
    for chunk_a, chunk_b in zip(torch.tensor_split(a, p.ksplit, dim=-1), torch.tensor_split(b, p.ksplit, dim=-2)):
        if chunk_a.shape[-1] == 0:
            continue
        part = torch.matmul(chunk_a.to(acc), chunk_b.to(acc))
        total = part if total is None else total + part
    if total is None:
        total = torch.zeros(out.shape, dtype=acc)
    if alpha != 1:
        total = total * alpha
    if k.op in ("addmm", "baddbmm") and beta != 0:
        total = total + beta * views[0].to(acc)
    out.copy_(total.to(out.dtype))
