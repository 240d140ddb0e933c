"""Roofline figures of an executed program.

eta = T_bound / T_modeled with T_bound = max(work / peak, compulsory bytes /
bandwidth), against the datasheet roof (1536 MAC/ns/core, 204.8 GB/s) and the
sustained roof (1140 MAC/ns/core, the DRAM mix's sustained bandwidth). The
simulator runs at the sustained rates, so eta against them only measures the
overheads the model itself adds (fill, contention, setup); the datasheet figure
is the one to compare with hardware. rho = DRAM bytes the program's DMA
descriptors moved / compulsory bytes, where compulsory bytes come from the
kernel's reference semantics (:func:`spyre_adapter.model.traffic.compulsory_bytes`),
not from the program.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from spyre_adapter.model.machine import Machine
from spyre_adapter.model.program import Program
from spyre_adapter.model.timing import Timeline

__all__ = ["Metrics", "compute"]


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
    plan: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        """Plain-dict form for JSON reports."""
        return dataclasses.asdict(self)


def compute(p: Program, tl: Timeline, m: Machine, compulsory: int, lx_peak: int, work: tuple[str, float],
            name: str | None = None) -> Metrics:
    """Metrics of program ``p`` simulated as ``tl`` on ``m``, against ``compulsory``
    bytes and the kernel's ``work`` (("pe", FLOPs) or ("vec", vector ops), from its
    kind: :attr:`spyre_adapter.model.kinds.KernelKind.work`), named ``name``
    (default: the program's)."""
    kind, amount = work
    comp = max(compulsory, 1)
    writes = tl.dram_write_bytes
    reads = max(compulsory - min(writes, compulsory), 0)
    dram_bound = compulsory / m.dram_gbps(reads, writes)
    if kind == "pe":
        macs = amount / 2
        work_sus = macs / (m.cores * m.sustained_mac_per_ns_per_core)
        work_peak = macs / (m.cores * m.peak_mac_per_ns_per_core)
    else:
        epc = m.vector_bytes_per_cycle / 2
        work_sus = work_peak = amount / (m.cores * epc * m.clock_ghz)
    bound_sus = max(work_sus, dram_bound)
    bound_peak = max(work_peak, compulsory / m.dram_nominal_gbps)
    t = max(tl.total_ns, 1e-9)
    ends = [tl.core_time(c.core) for c in p.cores if c.instrs]
    balance = (sum(ends) / len(ends)) / max(ends) if ends and max(ends) > 0 else 1.0
    return Metrics(
        name=p.name if name is None else name, kind=p.kind, modeled_ns=t, bound_sustained_ns=bound_sus, bound_datasheet_ns=bound_peak,
        dram_bound_ns=dram_bound, eta_sustained=bound_sus / t, eta_datasheet=bound_peak / t,
        eta_dram=dram_bound / t, rho=tl.dram_bytes / comp, dram_bytes=tl.dram_bytes,
        compulsory_bytes=compulsory, ring_bytes=tl.ring_bytes, flops=amount, cores_used=p.cores_used,
        core_balance=balance, lx_peak=lx_peak, plan=dataclasses.asdict(p.plan),
    )
