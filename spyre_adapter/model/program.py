"""Spyre programs: the addressed per-core instruction streams the scheduler
emits and the emulator executes.

A program implements one kernel on the card. Each core runs its own stream of
typed instructions over its LX scratchpad (byte addresses) and the card's DRAM
(buffers named by the kernel, addressed in elements):

* :class:`DmaLoad` / :class:`DmaStore` copy a strided DRAM :class:`Region`
  to / from an LX view (:class:`Lx`); DRAM moves whole 128-byte sticks.
* :class:`DmaGather` / :class:`DmaScatter` move elements whose DRAM indices a
  vector step computed into LX (gathers through data-dependent indices).
* :class:`RingSend` / :class:`RingRecv` copy LX bytes between cores over the
  ring (a send may multicast to several peers; tags pair them).
* :class:`Vec` runs one body of Kernel IR over a tile with its loads and
  stores bound to LX operands; :class:`Combine` merges split-reduction
  partials; :class:`AddrGen` computes the DRAM indices of irregular accesses.
* :class:`Pe` multiplies LX tiles on the PE arrays, accumulating in fp32.
* :class:`Barrier` orders cores' DRAM accesses within the kernel.
* :class:`LinkExchange` moves DRAM regions between this card and its peers
  over the card-to-card link (a collective's program).
* :class:`Loop` runs a body of steps several times, their addresses advanced
  by constant steps each iteration (:mod:`spyre_adapter.model.loops`).

Everything is a frozen dataclass; :func:`to_json` / :func:`from_json` round-trip
a program without evaluating any text. What each step type reads, writes,
costs and must obey is in :mod:`spyre_adapter.model.isa`, which also prints a
program as an assembly listing.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import typing
import weakref
from collections.abc import Sequence
from typing import Any, Literal, Union

import torch

from spyre_shims import jsonform
from spyre_shims import kernel_ir as kir
from spyre_shims.ops import torch_dtype

from spyre_adapter.model.loop_steps import MAX_TRIPS, LoopBase, count, expand, instructions, leaves, max_depth

__all__ = [
    "PROGRAM_VERSION", "Box", "Region", "Lx", "Operand", "DmaLoad", "DmaStore", "DmaGather", "DmaScatter",
    "RingSend", "RingRecv", "Vec", "Combine", "AddrGen", "Pe", "Barrier", "LinkExchange", "Instruction", "Loop",
    "Code",
    "Alloc", "CoreProgram",
    "Resident", "Candidate", "LoopPlan", "MatmulPlan", "AttentionPlan", "CollectivePlan", "Plan", "Program", "ProgramFormatError",
    "to_json", "from_json", "itemsize", "buffer_dtypes", "ProgramMemo",
]

#: Bumped when the JSON form changes; readers reject other versions
#: (3: a candidate division holds its row cores and reduction split, not a label;
#: 4: loops in a core's stream; 5: link exchanges, collective programs).
PROGRAM_VERSION = 5

#: (start, stop) per dimension.
Box = tuple[tuple[int, int], ...]


@functools.lru_cache(maxsize=None)
def itemsize(dtype: str) -> int:
    """Bytes per element of a dtype name."""
    return torch.empty((), dtype=torch_dtype(dtype)).element_size()


@dataclasses.dataclass(frozen=True)
class Region:
    """Elements ``offset + sum(j_k * strides[k])`` for ``0 <= j_k < sizes[k]``
    of DRAM buffer ``buffer`` (element units of the buffer's dtype)."""

    buffer: str
    offset: int
    sizes: tuple[int, ...]
    strides: tuple[int, ...]

    @property
    def numel(self) -> int:
        """Elements in the region."""
        return math.prod(self.sizes)

    def bounds(self) -> tuple[int, int]:
        """(lowest, highest) element index the region touches (empty: (0, -1))."""
        if self.numel == 0:
            return 0, -1
        lo = self.offset + sum(s * (n - 1) for s, n in zip(self.strides, self.sizes) if s < 0)
        hi = self.offset + sum(s * (n - 1) for s, n in zip(self.strides, self.sizes) if s > 0)
        return lo, hi


@dataclasses.dataclass(frozen=True)
class Lx:
    """A view of a core's LX scratchpad: element ``j`` (multi-index over
    ``sizes``) of dtype ``dtype`` lives at byte ``addr + itemsize *
    sum(j_k * strides[k])``. Strides are non-negative; zero broadcasts."""

    addr: int
    dtype: str
    sizes: tuple[int, ...]
    strides: tuple[int, ...]

    # Cached: the emulator looks views up by value for every step.
    @functools.cached_property
    def _hash(self) -> int:
        return hash((self.addr, self.dtype, self.sizes, self.strides))

    def __hash__(self) -> int:
        return self._hash

    # Cached: the emulator asks these of the same views for every step.
    @functools.cached_property
    def numel(self) -> int:
        """Elements in the view."""
        return math.prod(self.sizes)

    @functools.cached_property
    def itemsize(self) -> int:
        """Bytes per element."""
        return itemsize(self.dtype)

    @functools.cached_property
    def _byte_range(self) -> tuple[int, int]:
        if self.numel == 0:
            return self.addr, self.addr
        last = sum(s * (n - 1) for s, n in zip(self.strides, self.sizes))
        return self.addr, self.addr + (last + 1) * self.itemsize

    def byte_range(self) -> tuple[int, int]:
        """[first byte, one past the last byte] the view covers."""
        return self._byte_range

    @staticmethod
    def dense(addr: int, dtype: str, sizes: tuple[int, ...]) -> Lx:
        """A row-major view of ``sizes`` at ``addr``."""
        strides, acc = [], 1
        for n in reversed(sizes):
            strides.insert(0, acc if n > 1 else 0)
            acc *= n
        return Lx(addr, dtype, tuple(sizes), tuple(strides))


@dataclasses.dataclass(frozen=True)
class Operand:
    """Where the load or store at body position ``pos`` finds its data in LX.

    ``window``: ``lx`` is 1-D and holds buffer elements ``[base, base + n)`` in
    order; the access's own index (minus ``base``) addresses it. ``tile``:
    ``lx`` is shaped like the tile (reduced stores: reduction dims of size 1),
    one element per tile point (zero strides broadcast)."""

    pos: int
    kind: Literal["window", "tile"]
    lx: Lx
    base: int = 0


@dataclasses.dataclass(frozen=True)
class DmaLoad:
    """DRAM region -> LX view (same element count, in order)."""

    src: Region
    dst: Lx


@dataclasses.dataclass(frozen=True)
class DmaStore:
    """LX view -> DRAM region; ``accumulate`` adds into DRAM instead of overwriting."""

    src: Lx
    dst: Region
    accumulate: bool = False


@dataclasses.dataclass(frozen=True)
class DmaGather:
    """``dst[j] = buffer[addrs[j]]`` for ``addrs[j] >= 0`` (int64 indices in LX)."""

    buffer: str
    addrs: Lx
    dst: Lx


@dataclasses.dataclass(frozen=True)
class DmaScatter:
    """``buffer[addrs[j]] (+)= src[j]`` for ``addrs[j] >= 0``."""

    src: Lx
    buffer: str
    addrs: Lx
    accumulate: bool = False


@dataclasses.dataclass(frozen=True)
class RingSend:
    """Send LX bytes to ``peers`` (a multicast around the ring); paired by ``tag``."""

    peers: tuple[int, ...]
    src: Lx
    tag: int


@dataclasses.dataclass(frozen=True)
class RingRecv:
    """Receive what ``peer`` sends with ``tag`` into LX."""

    peer: int
    dst: Lx
    tag: int


@dataclasses.dataclass(frozen=True)
class Vec:
    """Run body ``body`` of the program over the tile ``box`` x ``red`` (None:
    the whole reduction extent), its loads and stores bound to ``operands``.

    ``phase="partial"`` stops at the reductions and writes their partial states
    to ``partials`` (per reduction: body position and one LX vector per state
    component); ``bind`` gives size symbols the body uses (a hand-written
    kernel's block offsets)."""

    body: int
    box: Box
    red: Box | None
    operands: tuple[Operand, ...]
    phase: Literal["all", "partial"] = "all"
    partials: tuple[tuple[int, tuple[Lx, ...]], ...] = ()
    bind: tuple[tuple[str, int], ...] = ()


@dataclasses.dataclass(frozen=True)
class Combine:
    """Merge the partial states of a split reduction (per reduction: body
    position and, per chunk in order, its state components), then run the rest
    of body ``body`` (what follows its reductions) over ``box`` with ``operands``
    - or, with ``into``, write the merged states there as one partial (a core
    merging its own chunks before sending them on)."""

    body: int
    box: Box
    partials: tuple[tuple[int, tuple[tuple[Lx, ...], ...]], ...]
    operands: tuple[Operand, ...]
    into: tuple[tuple[int, tuple[Lx, ...]], ...] = ()


@dataclasses.dataclass(frozen=True)
class AddrGen:
    """Evaluate body ``body`` over the tile far enough to compute the DRAM
    element index of each irregular access in ``targets`` (body position, LX
    int64 vector, one per tile point; masked-off points get -1)."""

    body: int
    box: Box
    red: Box | None
    operands: tuple[Operand, ...]
    targets: tuple[tuple[int, Lx], ...]
    bind: tuple[tuple[str, int], ...] = ()


@dataclasses.dataclass(frozen=True)
class Pe:
    """``acc (+)= a @ b`` on the PE arrays: 2-D (or batched 3-D) LX views, 16-bit
    or fp32 operands, fp32 accumulator; ``accumulate=False`` overwrites ``acc``."""

    a: Lx
    b: Lx
    acc: Lx
    accumulate: bool


@dataclasses.dataclass(frozen=True)
class Barrier:
    """Every core whose stream holds barrier ``tag`` waits until all of them reach it."""

    tag: int


@dataclasses.dataclass(frozen=True)
class LinkExchange:
    """One exchange over the card-to-card link, issued by one core's DMA engine:
    each ``(peer, region)`` of ``sends`` leaves this card's DRAM for card ``peer``
    (a rank of the collective's group), each of ``recvs`` arrives from ``peer``
    into this card's DRAM. Every card of the group runs the matching exchange
    under the same ``tag``: what card ``p`` sends to this one is what this one
    receives from ``p``."""

    sends: tuple[tuple[int, Region], ...]
    recvs: tuple[tuple[int, Region], ...]
    tag: int


Instruction = Union[DmaLoad, DmaStore, DmaGather, DmaScatter, RingSend, RingRecv, Vec, Combine, AddrGen, Pe, Barrier,
                    LinkExchange]


@dataclasses.dataclass(frozen=True)
class Alloc:
    """A named LX range of a core, allocated from instruction ``first`` to ``last``
    of its stream (for listings and studies; the emulator derives LX use from
    the instructions themselves)."""

    name: str
    addr: int
    nbytes: int
    first: int = -1
    last: int = -1


@dataclasses.dataclass(frozen=True)
class Loop(LoopBase):
    """Run ``body`` ``trips`` times. In iteration ``i`` body step ``j`` runs with
    its advancing integer ``k`` (addresses, offsets, tags, tile positions: see
    :mod:`spyre_adapter.model.loops`) moved by ``i * step`` for each ``(j, k,
    step)`` of ``advance``. ``after`` moves the steps that follow the loop in
    its stream: ``(q, k, step)`` adds ``trips * step`` to integer ``k`` of the
    ``q``-th step after it (what the loop left in the address registers).
    A core's allocation table folds the same way (a loop of :class:`Alloc`)."""

    trips: int
    body: tuple[Union[Instruction, Alloc, Loop], ...]
    advance: tuple[tuple[int, int, int], ...] = ()
    after: tuple[tuple[int, int, int], ...] = ()


#: A step of a core's stream as stored: an instruction or a loop of them.
Code = Union[Instruction, Loop]


@dataclasses.dataclass(frozen=True)
class CoreProgram:
    """One core's instruction stream: ``instrs`` as stored (it may hold
    :class:`Loop` steps), :attr:`steps` unrolled. Allocation step ranges count
    unrolled steps."""

    core: int
    instrs: tuple[Code, ...]
    allocs: tuple[Union[Alloc, Loop], ...] = ()

    @functools.cached_property
    def alloc_table(self) -> tuple[Alloc, ...]:
        """The allocation table with its loops unrolled."""
        if not any(isinstance(a, Loop) for a in self.allocs):
            return self.allocs  # type: ignore[return-value]
        return tuple(expand(self.allocs))

    @functools.cached_property
    def looped(self) -> bool:
        """Whether the stream holds a loop."""
        return any(isinstance(x, Loop) for x in self.instrs)

    @functools.cached_property
    def steps(self) -> tuple[Instruction, ...]:
        """The stream with its loops unrolled (the stream itself when it has none)."""
        if not self.looped:
            return self.instrs  # type: ignore[return-value]
        return tuple(expand(self.instrs))

    @functools.cached_property
    def n_steps(self) -> int:
        """Steps with loops unrolled, without unrolling them."""
        return count(self.instrs) if self.looped else len(self.instrs)

    def spliced(self, at: int, remove: int = 0, insert: Sequence[Instruction] = ()) -> CoreProgram:
        """The stream with ``remove`` steps from ``at`` replaced by ``insert``, its
        allocation table's step ranges moved to match (an allocation whose steps
        were all removed keeps the step where they were)."""
        shift = len(insert) - remove

        def moved(i: int) -> int:
            if i < at:
                return i
            return max(at, i + shift) if i < at + remove else i + shift

        allocs = tuple(dataclasses.replace(a, first=moved(a.first) if a.first >= 0 else a.first,
                                           last=moved(a.last) if a.last >= 0 else a.last) for a in self.alloc_table)
        steps = self.steps
        return dataclasses.replace(self, instrs=steps[:at] + tuple(insert) + steps[at + remove:], allocs=allocs)


@dataclasses.dataclass(frozen=True)
class Resident:
    """Elements ``[lo, hi)`` of ``buffer`` held in LX of ``core`` at ``addr``
    across a kernel boundary (left by one kernel, used by a later one)."""

    core: int
    buffer: str
    lo: int
    hi: int
    addr: int
    dtype: str

    @property
    def lx(self) -> Lx:
        """The held elements as an LX window."""
        return Lx(self.addr, self.dtype, (self.hi - self.lo,), (1,))


@dataclasses.dataclass(frozen=True)
class Candidate:
    """A work division the planner costed: ``row_cores`` row ranges, each
    reduction split in ``rsplit`` chunks."""

    row_cores: int
    rsplit: int
    estimate_ns: float

    @property
    def label(self) -> str:
        """``"<row cores>x<reduction split>"``, as listings show it."""
        return f"{self.row_cores}x{self.rsplit}"


@dataclasses.dataclass(frozen=True)
class LoopPlan:
    """How a loop-kernel group is divided: ``row_cores`` contiguous row ranges
    (or a ``grid`` of per-dimension splits), each reduction split in ``rsplit``
    chunks; ``tiles`` per core (the most any core has). A kernel with run-time
    sizes is divided as at their bucket (each size rounded up to a power of
    two): ``estimate_ns`` and ``candidates`` are the bucket's."""

    row_cores: int
    rsplit: int
    rows: int
    unit_rows: int
    tiles: int
    grid: tuple[int, ...] = ()
    estimate_ns: float = 0.0
    candidates: tuple[Candidate, ...] = ()
    workspace: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class MatmulPlan:
    """A matmul core grid (batch x M x N x K), tile and loop order."""

    grid: tuple[int, int, int, int]
    tile: tuple[int, int, int]
    order: str
    share: bool
    pe_efficiency: float
    estimate_ns: float
    candidates: int = 0


@dataclasses.dataclass(frozen=True)
class AttentionPlan:
    """The hand-written attention kernel's blocking."""

    block_q: int
    block_kv: int
    kv_resident: bool
    units: int


@dataclasses.dataclass(frozen=True)
class CollectivePlan:
    """A collective over ``ranks`` cards as this card (``rank``) runs it: the
    link ``algorithm`` (``one-shot``: every card sends its whole buffer to every
    peer and reduces what arrives; ``two-shot``: a reduce-scatter then an
    all-gather, each card reducing its own share; ``direct``: an all-gather's or
    reduce-scatter's one exchange), the ``reduce_op``, the process ``group`` it
    exchanges in, and the first stage's division of the cores' work."""

    op: str
    algorithm: str
    reduce_op: str
    group: str
    rank: int
    ranks: int
    estimate_ns: float = 0.0
    reduction: LoopPlan | None = None
    #: the buffer's bytes (one rank's, as nccl-tests sizes an all-reduce)
    nbytes: int = 0
    #: exchanges the reduction is cut into (each overlapping the cores' work on the one before)
    stages: int = 1


Plan = Union[LoopPlan, MatmulPlan, AttentionPlan, CollectivePlan]


@dataclasses.dataclass(frozen=True)
class Program:
    """A compiled kernel for the Spyre card.

    ``kernel`` is the Kernel IR it implements (``None`` for a hand-written
    kernel); ``bodies`` the loop bodies its vector steps run; ``workspace`` the
    DRAM scratch buffers it needs beyond the kernel's arguments (name, dtype,
    elements); ``lx_in`` what it expects in LX at launch (left by an earlier
    kernel), ``lx_out`` what it leaves there for later kernels."""

    name: str
    kind: Literal["loop", "matmul", "attention", "scan", "collective"]
    kernel: Any
    bodies: tuple[kir.LoopKernel, ...]
    cores: tuple[CoreProgram, ...]
    plan: Any
    sizes: tuple[tuple[str, int], ...] = ()
    workspace: tuple[tuple[str, str, int], ...] = ()
    lx_in: tuple[Resident, ...] = ()
    lx_out: tuple[Resident, ...] = ()
    version: int = PROGRAM_VERSION

    @property
    def cores_used(self) -> int:
        """Cores with at least one instruction."""
        return sum(1 for c in self.cores if c.instrs)

    def unrolled(self) -> Program:
        """The same program with every loop (of steps, of allocations) unrolled."""
        if not any(c.looped or c.allocs is not c.alloc_table for c in self.cores):
            return self
        return dataclasses.replace(self, cores=tuple(dataclasses.replace(c, instrs=c.steps, allocs=c.alloc_table)
                                                     for c in self.cores))

    def core(self, core: int) -> CoreProgram:
        """The stream of core ``core``."""
        for c in self.cores:
            if c.core == core:
                return c
        raise KeyError(core)


def buffer_dtypes(p: Program) -> dict[str, str]:
    """The dtype of every DRAM buffer ``p`` names: its workspace and its kernel's buffers."""
    out = {name: dt for name, dt, _ in p.workspace}
    if p.kernel is not None:
        out.update({b.name: b.dtype for b in p.kernel.buffers})
    return out


class ProgramFormatError(jsonform.FormatError):
    """A program's JSON is malformed or of another version."""


# ------------------------------------------------------------------ JSON

_TYPES = (Region, Lx, Operand, DmaLoad, DmaStore, DmaGather, DmaScatter, RingSend, RingRecv, Vec, Combine, AddrGen,
          Pe, Barrier, LinkExchange, Loop, Alloc, CoreProgram, Resident, Candidate, LoopPlan, MatmulPlan, AttentionPlan,
          CollectivePlan)


def to_json(p: Program) -> str:
    """Serialise a program (its Kernel IR embedded in the stable JSON form)."""
    d = {f.name: getattr(p, f.name) for f in dataclasses.fields(p)}
    d["kernel"] = json.loads(kir.to_json(p.kernel)) if p.kernel is not None else None
    d["bodies"] = [json.loads(kir.to_json(b)) for b in p.bodies]
    doc = {k: (v if k in ("kernel", "bodies") else jsonform.encode(v)) for k, v in d.items()}
    return json.dumps(doc, separators=(",", ":"))


def from_json(text: str) -> Program:
    """Inverse of :func:`to_json`; raises :class:`ProgramFormatError` on anything else
    (every value is checked against its field's type; nothing is evaluated)."""
    try:
        d = json.loads(text)
    except (ValueError, TypeError, RecursionError) as exc:
        raise ProgramFormatError(f"not JSON: {exc}") from None
    if not isinstance(d, dict):
        raise ProgramFormatError("a program is a JSON object")
    if d.get("version") != PROGRAM_VERSION:
        raise ProgramFormatError(f"program format version {d.get('version')!r}; this reader takes {PROGRAM_VERSION}")
    names = {f.name for f in dataclasses.fields(Program)}
    if set(d) != names:
        raise ProgramFormatError(f"program fields {sorted(set(d) ^ names)} missing or unknown")
    hints = typing.get_type_hints(Program)
    try:
        kernel = kir.from_json(json.dumps(d["kernel"])) if d["kernel"] is not None else None
        if kernel is not None and not isinstance(kernel, (kir.KernelGroup, kir.ExternKernel)):
            raise ProgramFormatError(f"program.kernel: expected a kernel, got {type(kernel).__name__}")
        if not isinstance(d["bodies"], list):
            raise ProgramFormatError("program.bodies: expected a list")
        bodies = tuple(kir.from_json(json.dumps(b)) for b in d["bodies"])
        if not all(isinstance(b, kir.LoopKernel) for b in bodies):
            raise ProgramFormatError("program.bodies: expected loop kernels")
        rest = {k: jsonform.decode(v, hints[k], _TYPES, what=f"program.{k}", check=_check_loop)
                for k, v in d.items() if k not in ("kernel", "bodies")}
        return Program(kernel=kernel, bodies=bodies, **rest)
    except ProgramFormatError:
        raise
    except (jsonform.FormatError, TypeError, ValueError) as exc:
        raise ProgramFormatError(str(exc)) from None


#: Loops a stored program may nest, and steps one core's stream may unroll to.
MAX_LOOP_DEPTH = 4
MAX_STEPS = 1 << 31


def _check_after(seq: Sequence[Any]) -> None:
    for pos, x in enumerate(seq):
        if isinstance(x, Loop):
            for q, k, _ in x.after:
                if not (0 <= pos + 1 + q < len(seq) and 0 <= k < len(leaves(seq[pos + 1 + q]))):
                    raise ValueError(f"loop after-move ({q}, {k}) names no integer of a later step")


def _check_loop(obj: Any) -> None:
    """Loader bounds on a loop or a core's stream (raises ValueError)."""
    if isinstance(obj, Loop):
        if not 1 <= obj.trips <= MAX_TRIPS:
            raise ValueError(f"loop trips {obj.trips} outside 1..{MAX_TRIPS}")
        if max_depth(obj.body) >= MAX_LOOP_DEPTH:
            raise ValueError(f"loops nested deeper than {MAX_LOOP_DEPTH}")
        for j, k, _ in obj.advance:
            if not (0 <= j < len(obj.body) and 0 <= k < len(leaves(obj.body[j]))):
                raise ValueError(f"loop advance ({j}, {k}) names no integer of its body")
        _check_after(obj.body)
    elif isinstance(obj, CoreProgram):
        if any(isinstance(x, Alloc) for x in instructions(obj.instrs)):
            raise ValueError(f"core {obj.core}: an allocation among the instructions")
        if not all(isinstance(x, Alloc) for x in instructions(obj.allocs)):
            raise ValueError(f"core {obj.core}: an instruction in the allocation table")
        for seq in (obj.instrs, obj.allocs):
            _check_after(seq)
            if count(seq) > MAX_STEPS:
                raise ValueError(f"core {obj.core} unrolls to more than {MAX_STEPS} steps")


class ProgramMemo:
    """Values derived from a program, kept while the program lives (programs are
    immutable): keyed by identity, dropped when the program is collected, so
    work the planner did on a program is not done again at its first launch."""

    def __init__(self) -> None:
        self._values: dict[int, Any] = {}

    def get(self, p: Program, default: Any = None) -> Any:
        """The value remembered for ``p``, or ``default``."""
        return self._values.get(id(p), default)

    def put(self, p: Program, value: Any) -> None:
        """Remember ``value`` for ``p`` until ``p`` is collected."""
        if id(p) not in self._values:
            weakref.finalize(p, self._values.pop, id(p), None)
        self._values[id(p)] = value
