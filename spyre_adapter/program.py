"""Spyre programs: what the scheduler emits and the emulator runs.

A program holds one instruction stream per core. Instructions move data
between DRAM and a core's LX scratchpad (``dma_in``/``dma_out``), between cores
over the ring (``ring``), compute on LX-resident tiles (``vec`` on the
vector/SFU path, ``pe`` on the PE arrays) and synchronise (``barrier``). The
Kernel IR the program implements travels with it, so the emulator can compute
real numerics and check every access against the plan.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from spyre_shims import kernel_ir as kir

__all__ = ["Instr", "CoreStream", "Program", "program_to_json", "program_from_json", "listing"]


@dataclasses.dataclass
class Instr:
    """One instruction of a core's stream.

    ``op``: dma_in | dma_out | ring | vec | pe | barrier. ``bytes`` moved (DMA,
    ring) and ``cycles`` of compute. ``tile`` numbers the LX tile the
    instruction belongs to (double buffering pairs tile t's DMA with tile t-1's
    compute). ``resident``: a dma_in served from LX (no DRAM traffic) or a
    dma_out elided because the value stays in LX for a later kernel.
    """

    op: str
    buffer: str = ""
    bytes: int = 0
    cycles: float = 0.0
    tile: int = 0
    note: str = ""
    resident: bool = False
    peer: int = -1
    #: ring all-gather: the cores whose DMA-loaded slices this transfer collects
    peers: tuple[int, ...] = ()
    #: a ring transfer whose source core holds the data in LX from an earlier
    #: kernel (ready at once; no DRAM read behind it)
    from_lx: bool = False


@dataclasses.dataclass
class CoreStream:
    """A core's instructions plus what it owns."""

    core: int
    instrs: list[Instr]
    lx_peak: int = 0
    #: per loop kernel of the group: flat iteration range [a, b) this core runs
    ranges: list[tuple[int, int]] = dataclasses.field(default_factory=list)
    #: for reductions split over cores: which reduction chunk this core owns
    rchunk: tuple[int, int] = (0, 1)


@dataclasses.dataclass
class Program:
    """A compiled kernel for the Spyre card."""

    name: str
    kind: str  # "loop" | "matmul"
    kernel: Any  # the Kernel IR (KernelGroup or ExternKernel)
    cores: list[CoreStream]
    division: dict[str, Any]
    sizes: dict[str, int]
    flops: float = 0.0
    compulsory_bytes: int = 0
    #: buffer -> bytes each core keeps resident in LX after the kernel (for the
    #: graph-level residency planner)
    lx_outputs: dict[str, list[int]] = dataclasses.field(default_factory=dict)
    #: loop kernels reduce in this many chunks across cores (1: no split)
    rsplit: int = 1
    #: matmul: K is split into this many partial sums reduced over the ring
    ksplit: int = 1

    @property
    def cores_used(self) -> int:
        """Cores with at least one instruction."""
        return sum(1 for c in self.cores if c.instrs)


def program_to_json(p: Program) -> str:
    """Serialise a program (the Kernel IR is embedded in its stable JSON form)."""
    d = {
        "name": p.name, "kind": p.kind, "kernel": json.loads(kir.to_json(p.kernel)),
        "cores": [dataclasses.asdict(c) for c in p.cores], "division": p.division, "sizes": p.sizes,
        "flops": p.flops, "compulsory_bytes": p.compulsory_bytes, "lx_outputs": p.lx_outputs,
        "rsplit": p.rsplit, "ksplit": p.ksplit,
    }
    return json.dumps(d, separators=(",", ":"))


def program_from_json(text: str) -> Program:
    """Inverse of :func:`program_to_json`."""
    d = json.loads(text)
    cores = []
    for c in d["cores"]:
        instrs = [Instr(**{**i, "peers": tuple(i.get("peers", ()))}) for i in c.pop("instrs")]
        c["ranges"] = [tuple(r) for r in c["ranges"]]
        c["rchunk"] = tuple(c["rchunk"])
        cores.append(CoreStream(instrs=instrs, **c))
    kernel = kir.from_json(json.dumps(d.pop("kernel")))
    d.pop("cores")
    return Program(kernel=kernel, cores=cores, **d)


def listing(p: Program, max_instrs: int = 12) -> str:
    """A human-readable listing: division, then each core's first instructions."""
    lines = [f"program {p.name} ({p.kind}) on {p.cores_used} cores: "
             + ", ".join(f"{k}={v}" for k, v in p.division.items())]
    for c in p.cores:
        if not c.instrs:
            continue
        lines.append(f"  core {c.core:2d}  lx_peak={c.lx_peak / 1024:.1f} KiB  ranges={c.ranges}")
        for ins in c.instrs[:max_instrs]:
            extra = f" {ins.bytes}B" if ins.bytes else ""
            extra += f" {ins.cycles:.0f}cyc" if ins.cycles else ""
            res = " (LX-resident)" if ins.resident else ""
            peer = f" peer={ins.peer}" if ins.peer >= 0 else ""
            lines.append(f"    t{ins.tile:<3d} {ins.op:8s} {ins.buffer:14s}{extra}{peer}{res}  {ins.note}")
        if len(c.instrs) > max_instrs:
            lines.append(f"    ... {len(c.instrs) - max_instrs} more")
    return "\n".join(lines)
