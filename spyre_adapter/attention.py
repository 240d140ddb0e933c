"""Hand-written attention for Spyre: flash-style, tiled through LX.

The generic path for ``scaled_dot_product_attention`` writes the full score
matrix (batch x heads x queries x keys) to DRAM between its matmul, softmax and
second matmul. This kernel keeps a block of queries resident in a core's LX,
streams key/value blocks past it, and keeps a running (online) softmax, so
scores never leave the core: DRAM sees Q, K, V once per query block and O once.

Registered through the stable API (:func:`spyre_shims.kernels.register_kernel`);
the generic path stays the checked reference (:func:`reference`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import math
from collections.abc import Iterator
from typing import Any

import torch
import torch.nn.functional as F

from spyre_shims.device import host_view, wrap_host
from spyre_shims.kernels import register_kernel

from .emulator import metrics, timing
from .machine import Machine
from .program import CoreStream, Instr, Program
from .report import REPORT

SCHEMA = "(Tensor q, Tensor k, Tensor v, bool causal, float scale) -> Tensor"
_enabled = True


@contextlib.contextmanager
def generic_path() -> Iterator[None]:
    """Compile attention through the generic path inside the block (comparison)."""
    global _enabled
    old, _enabled = _enabled, False
    try:
        yield
    finally:
        _enabled = old


def bind(query: Any, key: Any, value: Any, attn_mask: Any = None, dropout_p: float = 0.0, is_causal: bool = False,
         scale: float | None = None, enable_gqa: bool = False) -> tuple[Any, ...] | None:
    """The kernel's arguments for an SDPA call it handles (no mask tensor, no
    dropout, equal heads, 4-d), else None."""
    if attn_mask is not None or dropout_p != 0.0 or enable_gqa:
        return None
    if query.dim() != 4 or key.dim() != 4 or key.shape != value.shape or key.shape[:2] != query.shape[:2]:
        return None
    if query.dtype not in (torch.float16, torch.bfloat16, torch.float32) or not (query.dtype == key.dtype == value.dtype):
        return None
    return (query, key, value, bool(is_causal), float(scale) if scale is not None else 1.0 / math.sqrt(query.shape[-1]))


def reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, scale: float) -> torch.Tensor:
    """The generic semantics (math SDPA, float32 accumulation)."""
    return F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=causal,
                                          scale=scale).to(q.dtype)


# ------------------------------------------------------------------ numerics

def flash(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, scale: float, block: int) -> torch.Tensor:
    """Blockwise attention with an online softmax, vectorised over batch, heads
    and queries; one step per key/value block, as the cores run it."""
    qf = q.float() * scale
    b, h, lq, d = q.shape
    lk = k.shape[2]
    m = torch.full((b, h, lq, 1), float("-inf"))
    den = torch.zeros((b, h, lq, 1))
    acc = torch.zeros((b, h, lq, v.shape[-1]))
    rows = torch.arange(lq).view(lq, 1)
    for j0 in range(0, lk, block):
        kb, vb = k[:, :, j0:j0 + block].float(), v[:, :, j0:j0 + block].float()
        s = torch.matmul(qf, kb.transpose(-1, -2))
        if causal:
            cols = torch.arange(j0, j0 + kb.shape[2]).view(1, -1)
            s = s.masked_fill(cols > rows, float("-inf"))
        m_new = torch.maximum(m, s.amax(-1, keepdim=True))
        safe = torch.where(torch.isfinite(m_new), m_new, torch.zeros_like(m_new))
        p = torch.exp(s - safe)
        corr = torch.exp(torch.where(torch.isfinite(m), m - safe, torch.full_like(m, float("-inf"))))
        den = den * corr + p.sum(-1, keepdim=True)
        acc = acc * corr + torch.matmul(p, vb)
        m = m_new
    return (acc / den).to(q.dtype)


# ------------------------------------------------------------------ program

@dataclasses.dataclass(frozen=True)
class Shape:
    batch: int
    heads: int
    lq: int
    lk: int
    d: int
    isz: int
    causal: bool


def plan(s: Shape, m: Machine) -> Program:
    """Per-core streams: units of (batch, head, query block) spread over the
    cores; each streams the key/value blocks it needs (a causal block above the
    diagonal is skipped) and keeps K and V resident when the next unit of the
    same head follows on the same core and they fit."""
    bq = min(128, s.lq)
    bk = min(128, s.lk)
    nq = -(-s.lq // bq)
    units = [(bh, i) for bh in range(s.batch * s.heads) for i in range(nq)]
    cores = min(m.cores, len(units))
    kv_bytes = 2 * s.lk * s.d * s.isz
    lx_tile = bq * s.d * s.isz + bq * s.d * 4 + bq * bk * 4 + 2 * 2 * bk * s.d * s.isz
    resident_kv = lx_tile + kv_bytes <= m.lx_usable_bytes
    streams = []
    epc = m.vector_bytes_per_cycle / max(2, s.isz)
    for c in range(cores):
        mine = units[c * len(units) // cores:(c + 1) * len(units) // cores]
        st = CoreStream(c, [], lx_peak=lx_tile + (kv_bytes if resident_kv else 0),
                        ranges=[(mine[0][0] * nq + mine[0][1], mine[-1][0] * nq + mine[-1][1] + 1)] if mine else [])
        tile = 0
        loaded_head, loaded_blocks = -1, 0  # K/V blocks of that head already in LX
        for bh, i in mine:
            q_rows = min(bq, s.lq - i * bq)
            st.instrs.append(Instr("dma_in", "q", q_rows * s.d * s.isz, tile=tile))
            last = -(-min(s.lk, (i + 1) * bq) // bk) if s.causal else -(-s.lk // bk)
            if not (resident_kv and loaded_head == bh):
                loaded_blocks = 0
            for j in range(last):
                k_rows = min(bk, s.lk - j * bk)
                # A causal unit needs one more block than the previous query block of its head.
                if j >= loaded_blocks:
                    st.instrs.append(Instr("dma_in", "k", k_rows * s.d * s.isz, tile=tile))
                    st.instrs.append(Instr("dma_in", "v", k_rows * s.d * s.isz, tile=tile))
                macs = -(-q_rows // m.pe_rows) * m.pe_rows * k_rows * s.d
                rate = m.sustained_mac_per_ns_per_core * m.pe_efficiency(q_rows) / (4.0 if s.isz >= 4 else 1.0)
                st.instrs.append(Instr("pe", "", 0, macs / rate * m.clock_ghz, tile=tile, note="S = Q K^T"))
                # online softmax on the block: scale, max, sub, exp (SFU), sum, rescale
                vec = q_rows * k_rows * (5 + (m.sfu_cycles_per_stick - 1)) + q_rows * s.d * 2
                st.instrs.append(Instr("vec", "", 0, vec / epc, tile=tile, note="online softmax"))
                st.instrs.append(Instr("pe", "", 0, macs / rate * m.clock_ghz, tile=tile, note="O += P V"))
                tile += 1
            loaded_head, loaded_blocks = bh, max(loaded_blocks, last) if resident_kv else 0
            st.instrs.append(Instr("vec", "", 0, q_rows * s.d / epc, tile=tile - 1, note="O / l"))
            st.instrs.append(Instr("dma_out", "out", q_rows * s.d * s.isz, tile=tile - 1))
        if cores > 1 and st.instrs:
            st.instrs.append(Instr("barrier", note="end of kernel"))
        streams.append(st)
    pairs = s.lq * s.lk if not s.causal else sum(min(s.lk, r + 1) for r in range(s.lq))
    flops = 4.0 * s.batch * s.heads * pairs * s.d
    compulsory = s.batch * s.heads * (2 * s.lq * s.d + 2 * s.lk * s.d) * s.isz
    name = f"attention[{s.batch}x{s.heads}x{s.lq}x{s.lk}x{s.d}{' causal' if s.causal else ''}]"
    return Program(name, "matmul", None, streams,
                   {"cores": cores, "block_q": bq, "block_kv": bk, "kv_resident": resident_kv, "units": len(units)},
                   {}, flops=flops, compulsory_bytes=compulsory)


def program_for(kernel: Any, m: Machine) -> Program:
    """The program of a recorded call of this kernel (Kernel IR ``attention`` op:
    inputs q, k, v; constant arguments causal, scale), as the device runs it."""
    from .scheduler.analysis import itemsize

    q, k = kernel.inputs[0], kernel.inputs[1]
    b, h, lq, d = (int(x) for x in q.size)
    s = Shape(b, h, lq, int(k.size[2]), d, itemsize(q.dtype), bool(kernel.attr("arg0", False)))
    p = plan(s, m)
    p.name = kernel.name
    return p


@functools.lru_cache(maxsize=64)
def _analysed(s: Shape, m: Machine) -> tuple[Program, timing.Timeline, metrics.Metrics]:
    p = plan(s, m)
    tl = timing.simulate(p, m)
    return p, tl, metrics.compute(p, tl, m)


def device_impl(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, scale: float) -> torch.Tensor:
    """Run the kernel on the emulated card: real numerics, modeled time."""
    from .backend import current_machine

    m = current_machine()
    s = Shape(q.shape[0], q.shape[1], q.shape[2], k.shape[2], q.shape[3], q.element_size(), bool(causal))
    p, tl, mt = _analysed(s, m)
    out = flash(host_view(q), host_view(k), host_view(v), causal, scale, p.division["block_kv"])
    REPORT.record(p.name, mt, tl)
    return wrap_host(out.contiguous())


def register(device: str = "spyre") -> None:
    """Register the kernel for ``device`` (idempotent per process)."""
    register_kernel(device, "attention", replaces=F.scaled_dot_product_attention, schema=SCHEMA, bind=bind,
                    reference=reference, device_impl=device_impl, enabled=lambda: _enabled)
