"""The IBM Spyre machine model: every parameter the scheduler and the emulator
use, with its source, overridable for what-if studies.

Every default names one source (``SOURCES``; the category of each is in
:data:`spyre_adapter.bench.calibration.CATEGORIES`):
  [datasheet]    IBM Research, "Lifting the cover on the IBM Spyre accelerator"
  [architecture] torch-spyre docs (architecture, work division, scratchpad planning);
                 RaPiD, ISCA 2021 (the core Spyre descends from)
  [measured]     a published torch-spyre measurement of the real card, used as the value
  [fit]          fitted by :mod:`spyre_adapter.bench.calibration` on its named fit points
  [assumed]      no measurement constrains it; its effect on the held-out predictions
                 is reported by ``spyre-adapter calibrate``
"""

from __future__ import annotations

import dataclasses
from typing import Any

from spyre_adapter.model.machine_spec import MachineSpecError, checked, read_file

__all__ = ["Machine", "MachineSpecError", "SOURCES", "DEFAULT"]


#: Parameters that may be zero (latencies); every other one must be positive.
NON_NEGATIVE = frozenset({"kernel_launch_ns", "dma_setup_ns", "sync_ns", "link_latency_ns",
                          "lane_reduce_cycles_per_stick"})

#: How the cards of an ensemble reach each other: every pair peer to peer through
#: the drawer's PCIe switch (each card's own x16 link is its bottleneck), or a ring
#: (each card talks to its two neighbours; farther cards are reached hop by hop).
TOPOLOGIES = ("switch", "ring")


@dataclasses.dataclass(frozen=True)
class Machine:
    """Spyre card parameters (units in the field names)."""

    cores: int = 32
    corelets_per_core: int = 2
    pe_rows: int = 8
    pe_cols: int = 8
    clock_ghz: float = 1.5
    peak_mac_per_ns_per_core: float = 1536.0
    sustained_mac_per_ns_per_core: float = 1140.0
    pe_full_rows: int = 64
    lx_bytes: int = 2 * 1024 * 1024
    lx_usable_bytes: int = 1_600_000
    dram_bytes: int = 128 * 1024**3
    dram_nominal_gbps: float = 204.8
    dram_read_gbps: float = 150.0
    dram_mixed_gbps: float = 105.0
    core_dma_gbps: float = 93.4
    ring_bytes_per_cycle: int = 128
    stick_bytes: int = 128
    span_bytes_per_core: int = 256 * 1024**2
    vector_bytes_per_cycle: int = 512
    sfu_cycles_per_stick: float = 2.0
    lane_reduce_cycles_per_stick: float = 13.3
    kernel_launch_ns: float = 0.0
    dma_setup_ns: float = 120.0
    sync_ns: float = 400.0
    cards: int = 8
    link_gbps: float = 50.0
    link_latency_ns: float = 3000.0
    link_topology: str = "switch"

    # ------------------------------------------------------------ derived
    @property
    def dram_write_gbps(self) -> float:
        """Pure-write bandwidth implied by the read and the 50/50 mixed figures
        (harmonic mixing: 1/mixed = 0.5/read + 0.5/write)."""
        return 1.0 / (2.0 / self.dram_mixed_gbps - 1.0 / self.dram_read_gbps)

    def dram_gbps(self, read_bytes: float, write_bytes: float) -> float:
        """Sustained DRAM bandwidth for a traffic mix (harmonic in time)."""
        total = read_bytes + write_bytes
        if total <= 0:
            return self.dram_read_gbps
        return total / (read_bytes / self.dram_read_gbps + write_bytes / self.dram_write_gbps)

    @property
    def ring_gbps(self) -> float:
        """Bandwidth of one ring link in one direction."""
        return self.ring_bytes_per_cycle * self.clock_ghz

    def stick_elems(self, itemsize: int) -> int:
        """Elements per 128-byte stick for an element size."""
        return max(self.stick_bytes // itemsize, 1)

    def pe_efficiency(self, rows_per_core: int) -> float:
        """PE-array efficiency for a per-core M extent: full with >= 64 rows
        (8 passes of 8), else sqrt(passes / 8) [tsd]."""
        passes = max(1, -(-rows_per_core // self.pe_rows))
        full = self.pe_full_rows // self.pe_rows
        return 1.0 if passes >= full else (passes / full) ** 0.5

    # ------------------------------------------------------------ overrides
    def replace(self, **changes: Any) -> "Machine":
        """A copy with some parameters changed; ``lx_kib`` sets ``lx_bytes`` (and
        scales ``lx_usable_bytes``). Raises :class:`MachineSpecError` for an unknown
        name, a value that is not a number, not whole where a count is needed, or
        out of range."""
        names = {f.name for f in dataclasses.fields(self)}
        unknown = sorted(set(changes) - names - {"lx_kib"})
        if unknown:
            raise MachineSpecError(f"{unknown[0]!r} is not accepted: expected a machine parameter "
                                   f"({', '.join(sorted(names | {'lx_kib'}))})")
        if "lx_kib" in changes:
            kib = int(checked("lx_kib", changes.pop("lx_kib"), integer=True))
            changes["lx_bytes"] = kib * 1024
            changes.setdefault("lx_usable_bytes", int(kib * 1024 * self.lx_usable_bytes / self.lx_bytes))
        typed: dict[str, Any] = {}
        if "link_topology" in changes:
            topo = str(changes.pop("link_topology")).strip()
            if topo not in TOPOLOGIES:
                raise MachineSpecError(f"link_topology={topo!r} is not accepted: expected one of "
                                       f"{', '.join(TOPOLOGIES)}")
            typed["link_topology"] = topo
        for f in dataclasses.fields(self):
            if f.name in changes:
                typed[f.name] = checked(f.name, changes[f.name], integer=isinstance(getattr(self, f.name), int),
                                        zero_ok=f.name in NON_NEGATIVE)
        out = dataclasses.replace(self, **typed)
        if out.lx_usable_bytes > out.lx_bytes:
            raise MachineSpecError(f"lx_usable_bytes={out.lx_usable_bytes} is not accepted: expected at most "
                                   f"lx_bytes ({out.lx_bytes})")
        return out

    @classmethod
    def from_spec(cls, spec: str | None) -> "Machine":
        """``"cores=8,lx_kib=1024"`` or a path to a JSON/YAML file holding an object
        of overrides. Raises :class:`MachineSpecError` (one line) for anything else."""
        if not spec:
            return DEFAULT
        if "=" not in spec:
            return DEFAULT.replace(**read_file(spec))
        changes: dict[str, Any] = {}
        for item in spec.split(","):
            key, sep, value = item.partition("=")
            if not sep or not key.strip():
                raise MachineSpecError(f"{item!r} is not accepted: expected name=value pairs separated by commas "
                                       "(e.g. cores=8,lx_kib=1024) or a .json/.yaml file")
            changes[key.strip()] = value.strip()
        return DEFAULT.replace(**changes)

    def to_dict(self) -> dict[str, Any]:
        """Parameters as a plain dict."""
        return dataclasses.asdict(self)


DEFAULT = Machine()

#: Where each default comes from (see the module docstring for the tags).
SOURCES: dict[str, str] = {
    "cores": "[datasheet] 32 AI cores per card",
    "corelets_per_core": "[architecture] torch-spyre work_division_planning.md: 2 corelets per core sharing one LX",
    "pe_rows": "[architecture] torch-spyre work_division_planning.md: 8x8 PE array per corelet (8 PT rows)",
    "pe_cols": "[architecture] torch-spyre work_division_planning.md: 8x8 PE array per corelet",
    "clock_ghz": "[architecture] ~1.5 GHz: the datasheet's 1536 MAC/ns per core over 1024 MAC per cycle per core",
    "peak_mac_per_ns_per_core": "[datasheet] 98.3 TFLOPS fp16 per card / 32 cores / 2 FLOP per MAC",
    "sustained_mac_per_ns_per_core": "[measured] torch-spyre cost_model.py mac_peak_per_core_ns: 1140 MAC/ns/core "
                                     "fitted there on compute-dominant matmuls at 4-8 cores",
    "pe_full_rows": "[architecture] torch-spyre cost model: full PE efficiency needs >= 64 rows of M per core "
                    "(8 passes of 8)",
    "lx_bytes": "[datasheet] 2 MB scratchpad per core",
    "lx_usable_bytes": "[architecture] torch-spyre scratchpad_planning.md: ~1.55 MB usable per core "
                       "((2 MB - 64 KB) x 0.8)",
    "dram_bytes": "[datasheet] 128 GB LPDDR5",
    "dram_nominal_gbps": "[datasheet] 204.8 GB/s LPDDR5",
    "dram_read_gbps": "[measured] torch-spyre cost_model.py bw_peak_gbps: read-only reductions and read probes "
                      "~145-155 GB/s at 32 cores",
    "dram_mixed_gbps": "[measured] torch-spyre cost_model.py: balanced 1 read + 1 write (neg) ~105 GB/s at 32 cores",
    "core_dma_gbps": "[fit] one core's DMA streaming rate, fitted on the 1-core softmax of torch-spyre's "
                     "scratchpad_planning.md (23.67 us); see spyre_adapter.bench.calibration",
    "ring_bytes_per_cycle": "[architecture] torch-spyre docs: bidirectional ring, 128 B/cycle per direction",
    "stick_bytes": "[architecture] 128-byte stick: the unit of layout and per-core work",
    "span_bytes_per_core": "[architecture] torch-spyre work_division_planning.md: 255.996 MiB per-core span",
    "vector_bytes_per_cycle": "[assumed] 256 16-bit lanes per core for elementwise work; no published figure, and "
                              "the fit points are DMA-bound in the model (sensitivity in the calibration report)",
    "sfu_cycles_per_stick": "[assumed] 2 cycles per stick for a transcendental (exp, rsqrt, div...); no published "
                            "figure (sensitivity in the calibration report)",
    "lane_reduce_cycles_per_stick": "[fit] vector cycles per stick of values a core reduces across its lanes "
                                    "(x.sum(-1), not x.sum(0)), fitted on torch-spyre's row-reduction bandwidth on "
                                    "1, 2 and 4 cores (red_bw_cores_g); see spyre_adapter.bench.calibration",
    "kernel_launch_ns": "[fit] per-kernel fixed time, fitted with core_dma_gbps on torch-spyre's 32-core add "
                        "(64,16384) probe (52 us); lands at 0, as torch-spyre found for device kernel time "
                        "(cost_model.py: 'no fixed term')",
    "dma_setup_ns": "[assumed] per-DMA-descriptor setup; no published figure (sensitivity in the calibration report)",
    "sync_ns": "[assumed] cross-core barrier; no published figure (sensitivity in the calibration report)",
    "cards": "[datasheet] up to 8 Spyre cards per ensemble in one I/O drawer (8 x 128 GB = 1 TB)",
    "link_gbps": "[datasheet] PCIe Gen5 x16 per card: 32 GT/s x 16 lanes = 63 GB/s per direction raw; 50 GB/s "
                 "taken as the effective rate after protocol overhead (128b/130b, TLP headers)",
    "link_latency_ns": "[assumed] per-message card-to-card latency through the PCIe switch; no published figure "
                       "(a few us is typical of PCIe peer-to-peer)",
    "link_topology": "[datasheet] cards reach each other peer to peer through the drawer's PCIe switch "
                     "('switch'); 'ring' models neighbour-only links",
}
