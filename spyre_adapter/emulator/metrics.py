"""Roofline figures of a simulated program.

eta = T_bound / T_modeled with T_bound = max(work / peak, compulsory bytes /
bandwidth), against the sustained roof (1140 MAC/ns/core, the DRAM mix's
sustained bandwidth) and the datasheet roof (1536 MAC/ns/core, 204.8 GB/s).
rho = modeled DRAM bytes / compulsory bytes.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ..machine import Machine
from ..program import Program
from .timing import Timeline


@dataclasses.dataclass(frozen=True)
class Metrics:
    """Figures of one program on one machine."""

    name: str
    kind: str
    modeled_ns: float
    bound_sustained_ns: float
    bound_datasheet_ns: float
    dram_bound_ns: float
    eta_sustained: float
    eta_datasheet: float
    eta_dram: float
    rho: float
    dram_bytes: int
    compulsory_bytes: int
    ring_bytes: int
    flops: float
    cores_used: int
    core_balance: float
    lx_peak: int
    division: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        """Plain-dict form for JSON reports."""
        return dataclasses.asdict(self)


def compute(p: Program, tl: Timeline, m: Machine) -> Metrics:
    """Metrics of program ``p`` simulated as ``tl`` on ``m``."""
    comp = max(p.compulsory_bytes, 1)
    writes = sum(i.bytes for s in p.cores for i in s.instrs if i.op == "dma_out")
    reads = max(p.compulsory_bytes - writes, 0)
    bw_sus = m.dram_gbps(reads, writes)
    dram_bound = p.compulsory_bytes / bw_sus
    if p.kind == "matmul":
        macs = p.flops / 2
        work_sus = macs / (m.cores * m.sustained_mac_per_ns_per_core)
        work_peak = macs / (m.cores * m.peak_mac_per_ns_per_core)
    else:
        epc = m.vector_bytes_per_cycle / 2
        work_sus = work_peak = p.flops / (m.cores * epc * m.clock_ghz)
    bound_sus = max(work_sus, dram_bound)
    bound_peak = max(work_peak, p.compulsory_bytes / m.dram_nominal_gbps)
    t = max(tl.total_ns, 1e-9)
    ends = [tl.core_time(s.core) for s in p.cores if s.instrs]
    balance = (sum(ends) / len(ends)) / max(ends) if ends and max(ends) > 0 else 1.0
    return Metrics(
        name=p.name, kind=p.kind, modeled_ns=t, bound_sustained_ns=bound_sus, bound_datasheet_ns=bound_peak,
        dram_bound_ns=dram_bound, eta_sustained=bound_sus / t, eta_datasheet=bound_peak / t,
        eta_dram=dram_bound / t, rho=tl.dram_bytes / comp, dram_bytes=tl.dram_bytes,
        compulsory_bytes=p.compulsory_bytes, ring_bytes=tl.ring_bytes, flops=p.flops, cores_used=p.cores_used,
        core_balance=balance, lx_peak=max((s.lx_peak for s in p.cores), default=0), division=dict(p.division),
    )
