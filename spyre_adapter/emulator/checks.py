"""Hardware limits every program must respect; each violation is an error that
names the kernel, the core and the buffer.

* LX capacity: a core's peak scratchpad use (plus what stays resident from
  earlier kernels) fits the usable LX.
* Stick alignment: every core's share of an output starts on a 128-byte stick.
* Span: a core touches at most 256 MB of one tensor.
* Write conflicts: no two cores write the same element (atomic adds excepted).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping

import sympy
import torch

from spyre_shims import index as sidx
from spyre_shims.kernel_ir import KernelGroup

from ..machine import Machine
from ..program import Program
from ..scheduler.analysis import analyse, boxes, itemsize


class EmulatorError(RuntimeError):
    """A program broke a hardware rule."""

    def __init__(self, kind: str, kernel: str, core: int, buffer: str, detail: str) -> None:
        self.kind, self.kernel, self.core, self.buffer = kind, kernel, core, buffer
        super().__init__(f"{kind} in kernel {kernel}, core {core}, buffer {buffer}: {detail}")


@dataclasses.dataclass
class Extent:
    lo: int
    hi: int  # inclusive


def _store_extents(p: Program, sizes: Mapping[sympy.Symbol, int]) -> dict[str, dict[int, list[tuple[object, int, int, int]]]]:
    """buffer -> core -> [(kernel info, flat a, flat b, access idx)] for every store."""
    group = p.kernel
    assert isinstance(group, KernelGroup)
    dtypes = {b.name: b.dtype for b in group.buffers}
    out: dict[str, dict[int, list]] = {}
    infos = [analyse(k, dtypes, sizes) for k in group.kernels]
    internal = {b.name for b in group.buffers if b.role == "internal"}
    for s in p.cores:
        if not s.instrs:
            continue
        for k, info in enumerate(infos):
            a, b = s.ranges[k]
            for j, acc in enumerate(info.accesses):
                # LX-only buffers are per core; a split reduction's result is
                # written by the first core of its row group.
                if acc.buffer in internal or (acc.reduced and s.rchunk[0] != 0):
                    continue
                if acc.store:
                    out.setdefault(acc.buffer, {}).setdefault(s.core, []).append((info, a, b, j))
    return out


def _addr_bounds(info, acc, a: int, b: int) -> Extent | None:
    ivars, rvars = info.kernel.index_vars()
    vars_ = list(ivars) + list(rvars)
    aff = sidx.affine(acc.expr, vars_)
    if aff is None:
        return None
    off, coeffs = aff
    lo, hi = math.inf, -math.inf
    for box in boxes(list(info.ranges), a, b):
        full = list(box) + ([(0, 1)] * len(info.red) if acc.reduced else [(0, r) for r in info.red])
        if any(h <= l0 for l0, h in full):
            continue
        blo = off + sum(c * (l0 if c > 0 else h - 1) for c, (l0, h) in zip(coeffs, full))
        bhi = off + sum(c * (h - 1 if c > 0 else l0) for c, (l0, h) in zip(coeffs, full))
        lo, hi = min(lo, blo), max(hi, bhi)
    return None if lo == math.inf else Extent(int(lo), int(hi))


def _addresses(info, acc, a: int, b: int) -> torch.Tensor:
    ivars, rvars = info.kernel.index_vars()
    vars_ = list(ivars) + list(rvars)
    parts = []
    for box in boxes(list(info.ranges), a, b):
        full = list(box) + ([(0, 1)] * len(info.red) if acc.reduced else [(0, r) for r in info.red])
        env = {}
        nd = len(full)
        for k, (v, (l0, h)) in enumerate(zip(vars_, full)):
            view = [1] * nd
            view[k] = h - l0
            env[v] = torch.arange(l0, h, dtype=torch.int64).view(view)
        idx = torch.as_tensor(sidx.compile_index(acc.expr)(env))
        parts.append(idx.expand(*[h - l0 for l0, h in full]).reshape(-1))
    return torch.unique(torch.cat(parts)) if parts else torch.empty(0, dtype=torch.int64)


def check_program(p: Program, m: Machine, sizes: Mapping[sympy.Symbol, int], resident: Mapping[int, int] | None = None) -> None:
    """Raise :class:`EmulatorError` on the first rule ``p`` breaks."""
    resident = resident or {}
    for s in p.cores:
        used = s.lx_peak + resident.get(s.core, 0)
        if used > m.lx_usable_bytes:
            big = max(((i.buffer, i.bytes) for i in s.instrs if i.op in ("dma_in", "dma_out")),
                      key=lambda t: t[1], default=("?", 0))
            raise EmulatorError("LX capacity exceeded", p.name, s.core, big[0],
                                f"needs {used} B of {m.lx_usable_bytes} B usable")
    if p.kind == "matmul":
        if p.kernel is not None:  # a hand-written kernel's program carries no IR: its plan owns its blocks
            _check_matmul(p, m)
        return
    stick = m.stick_bytes
    for buf, per_core in _store_extents(p, sizes).items():
        extents: dict[int, Extent] = {}
        for core, items in per_core.items():
            for info, a, b, j in items:
                if a >= b:
                    continue
                acc = info.accesses[j]
                ext = _addr_bounds(info, acc, a, b)
                if ext is None:
                    continue
                span = (ext.hi - ext.lo + 1) * acc.itemsize
                if span > m.span_bytes_per_core:
                    raise EmulatorError("per-core span exceeded", p.name, core, buf,
                                        f"{span} B > {m.span_bytes_per_core} B")
                if core > 0 and len(p.cores) > 1 and (ext.lo * acc.itemsize) % stick and a > 0:
                    first = p.cores[0].ranges
                    if first and first[0][0] != a:  # not the buffer's first row
                        raise EmulatorError("stick misalignment", p.name, core, buf,
                                            f"share starts at byte {ext.lo * acc.itemsize}, not a multiple of {stick}")
                prev = extents.get(core)
                extents[core] = ext if prev is None else Extent(min(prev.lo, ext.lo), max(prev.hi, ext.hi))
        _check_conflicts(p, buf, per_core, extents)


def _check_conflicts(p: Program, buf: str, per_core, extents: dict[int, Extent]) -> None:
    cores = sorted(extents, key=lambda c: extents[c].lo)
    for c1, c2 in zip(cores, cores[1:]):
        if extents[c2].lo > extents[c1].hi:
            continue
        # Bounding ranges overlap: compare the exact address sets.
        sets = []
        for c in (c1, c2):
            addrs = [_addresses(info, info.accesses[j], a, b) for info, a, b, j in per_core[c] if a < b]
            sets.append(torch.unique(torch.cat(addrs)) if addrs else torch.empty(0, dtype=torch.int64))
        both = torch.isin(sets[0], sets[1])
        if bool(both.any()):
            raise EmulatorError("cross-core write conflict", p.name, c2, buf,
                                f"cores {c1} and {c2} both write element {int(sets[0][both][0])}")


def _check_matmul(p: Program, m: Machine) -> None:
    stick = m.stick_elems(itemsize(p.kernel.output.dtype))
    seen: list[tuple[int, tuple, tuple, tuple, tuple]] = []
    for s in p.cores:
        if not s.instrs:
            continue
        bat, rows, cols, ks = (tuple(r) for r in s.ranges)
        if cols[0] % stick and cols[0] != 0:
            raise EmulatorError("stick misalignment", p.name, s.core, p.kernel.output.name,
                                f"columns start at {cols[0]}, not a multiple of {stick}")
        for core, b2, r2, c2, k2 in seen:
            overlap = all(x[0] < y[1] and y[0] < x[1] for x, y in ((bat, b2), (rows, r2), (cols, c2)))
            if overlap and ks == k2:
                raise EmulatorError("cross-core write conflict", p.name, s.core, p.kernel.output.name,
                                    f"output block shared with core {core}")
        seen.append((s.core, bat, rows, cols, ks))
