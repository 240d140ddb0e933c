"""Collective programs: the functional collectives under ``torch.compile``
(``all_reduce_``, ``all_gather_into_tensor``, ``reduce_scatter_tensor``) as one
card's program of a group of cards.

The card exchanges DRAM regions with its peers over the card-to-card link
(:class:`~spyre_adapter.model.program.LinkExchange`, issued by one core), and
its cores do the rest as a loop kernel planned by the loop planner (divided over
the cores, double-buffered, checked like any other): the reduction of what
arrived (every piece loaded, combined in rank order, stored), or an
all-gather's copy of its own piece. Barriers order an exchange before the
cores read what it brought (and a reduction before an exchange sending it on).

An all-reduce has two programs, the two the link model
(:mod:`spyre_adapter.model.collectives`) knows for a switch of cards; both are
built and simulated, the faster kept:

* ``one-shot``: every card sends its whole buffer to every peer, then reduces
  all ``n`` copies (one latency; ``n - 1`` buffers through its link);
* ``two-shot``: a reduce-scatter (each card gets every peer's piece of its own
  share, whole sticks, and reduces it) then an all-gather of the reduced
  shares (two latencies; ``2 (n - 1) / n`` of the buffer through its link).

An all-gather sends its input to every peer, which receives it straight into
its slot of the output, while the cores copy the card's own slot (no barrier
between them when the slots are whole sticks: the copy overlaps the link). A
reduce-scatter sends each peer its slot of the input and reduces the pieces of
its own slot into the output.

Every card combines the pieces in rank order, so all cards hold bit-identical
results (a tensor-parallel model's ranks must not drift apart).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence

import sympy

from spyre_shims import index as sidx
from spyre_shims import kernel_ir as kir
from spyre_shims.distributed import CollectiveError, link_group
from spyre_shims.kernel_ir import Instr, Ref
from spyre_shims.reference import concrete

from spyre_adapter.model import isa
from spyre_adapter.model.buffer_specs import contiguous_buffer
from spyre_adapter.model.errors import DoesNotFit, EmulatorError
from spyre_adapter.model.machine import Machine
from spyre_adapter.model.program import (Alloc, Barrier, CollectivePlan, CoreProgram, LinkExchange, Program, Region,
                                         itemsize)
from spyre_adapter.model.rules import static_check
from spyre_adapter.model.timing import simulate
from spyre_adapter.scheduler.loops import plan_group

__all__ = ["COLLECTIVE_OPS", "REDUCE_OPS", "ALGORITHMS", "STAGES", "plan_collective", "build_collective", "shares",
           "collective_work"]

#: The functional collectives planned here (``torch.ops._c10d_functional`` names).
COLLECTIVE_OPS = frozenset({"all_reduce_", "all_gather_into_tensor", "reduce_scatter_tensor"})
#: The functional collectives' reduce ops -> the Kernel IR op combining two pieces
#: (``avg`` sums, then scales by 1/n).
REDUCE_OPS = {"sum": "add", "avg": "add", "max": "maximum", "min": "minimum", "product": "mul"}
#: The programs a collective can be built as, by op (see the module docstring).
ALGORITHMS = {"all_reduce_": ("one-shot", "two-shot"), "all_gather_into_tensor": ("direct",),
              "reduce_scatter_tensor": ("direct",)}
#: The first exchange's tag (stage k's is this + k, the final exchange's this + stages):
#: the same on every card, what pairs them.
_FIRST_TAG = 1


def shares(numel: int, ranks: int, stick_elems: int) -> list[tuple[int, int]]:
    """Each rank's share ``[lo, hi)`` of ``numel`` elements for a two-shot
    all-reduce: equal runs of whole sticks (the last one shorter), so no two
    cards' shares meet inside a stick."""
    per = -(-numel // ranks)
    per = -(-per // stick_elems) * stick_elems
    return [(min(k * per, numel), min((k + 1) * per, numel)) for k in range(ranks)]


@dataclasses.dataclass(frozen=True)
class _Flat:
    """A dense operand as the program addresses it: its buffer, first element,
    elements and the storage elements the buffer holds."""

    name: str
    dtype: str
    offset: int
    numel: int
    storage: int

    def region(self, lo: int, hi: int) -> Region:
        return Region(self.name, self.offset + lo, (hi - lo,), (1,))


def _flat(spec: kir.BufferSpec, sizes: Mapping[sympy.Symbol, int]) -> _Flat:
    """A dense row-major view; else the collective does not fit."""
    dims = [concrete(d, sizes) for d in spec.size]
    strides = [concrete(s, sizes) for s in spec.stride]
    want = 1
    for d, s in reversed(list(zip(dims, strides))):
        if d > 1 and s != want:
            raise DoesNotFit(f"the buffer {spec.name} of a collective is not one dense run of elements")
        want *= d
    offset = concrete(spec.offset, sizes)
    return _Flat(spec.name, spec.dtype, offset, want, max(concrete(spec.storage_numel, sizes), offset + want))


def _loop_kernel(kernel: kir.ExternKernel, what: str, dst: _Flat, base: int, length: int,
                 pieces: Sequence[tuple[_Flat, int]], reduce_op: str | None, ranks: int) -> kir.KernelGroup:
    """``dst[base + i] = piece_0[i] op ... op piece_k[i]`` for ``i < length`` (each
    piece a buffer and the element it starts at; ``reduce_op`` None: one piece, copied)."""
    i0 = sidx.index_symbol("i0")
    dtype = dst.dtype
    body: list[Instr] = [Instr("load", (src.name, src.offset + start + i0), dtype) for src, start in pieces]
    acc = Ref(0)
    for q in range(1, len(pieces)):
        body.append(Instr(REDUCE_OPS[reduce_op or "sum"], (acc, Ref(q)), dtype))
        acc = Ref(len(body) - 1)
    if reduce_op == "avg":
        body.append(Instr("constant", (1.0 / ranks, dtype), dtype))
        body.append(Instr("mul", (acc, Ref(len(body) - 1)), dtype))
        acc = Ref(len(body) - 1)
    body.append(Instr("store", (dst.name, dst.offset + base + i0, acc, None)))
    name = f"{kernel.name}_{what}"
    lk = kir.LoopKernel(name, (sympy.Integer(length),), (), tuple(body))
    flat = {dst.name: dst, **{src.name: src for src, _ in pieces}}
    # flat buffers: the body indexes their storage
    specs = [contiguous_buffer(b.name, (b.storage,), b.dtype,
                               ("inout" if any(s.name == b.name for s, _ in pieces) else "output")
                               if b.name == dst.name else "input") for b in flat.values()]
    return kir.KernelGroup(name, (lk,), tuple(specs), tuple(flat))


def _sticks(r: Region, dtypes: Mapping[str, str], stick: int) -> tuple[str, int, int]:
    lo, hi = r.bounds()
    size = itemsize(dtypes[r.buffer])
    return r.buffer, lo * size // stick, hi * size // stick


def _conflicts(ins: object, exchanges: Sequence[LinkExchange], dtypes: Mapping[str, str], stick: int) -> bool:
    """Whether step ``ins`` must wait for the exchanges: it touches a stick they
    write, or writes a stick they read (data-dependent accesses: the whole buffer)."""
    reads, writes = isa.dram_accesses(ins)  # type: ignore[arg-type]
    theirs_w = [_sticks(r, dtypes, stick) for x in exchanges for _, r in x.recvs]
    theirs_r = [_sticks(r, dtypes, stick) for x in exchanges for _, r in x.sends]

    def hits(mine: Sequence[object], theirs: Sequence[tuple[str, int, int]]) -> bool:
        for r in mine:
            if isinstance(r, str):
                if any(b == r for b, _, _ in theirs):
                    return True
                continue
            b, lo, hi = _sticks(r, dtypes, stick)  # type: ignore[arg-type]
            if any(b == b2 and lo <= hi2 and lo2 <= hi for b2, lo2, hi2 in theirs):
                return True
        return False

    return hits([*reads, *writes], theirs_w) or hits(writes, theirs_r)


def _exchange(sends: Sequence[tuple[int, Region]], recvs: Sequence[tuple[int, Region]], tag: int) -> LinkExchange:
    return LinkExchange(tuple(sends), tuple(recvs), tag)


#: Stages a card's reduction is cut into (each its own exchange, then its share
#: of the cores' work), tried in turn until one more is no faster: the exchange
#: of stage k+1 overlaps the cores' work of stage k, and every stage pays one
#: more latency. A stage holds at least this many bytes of the card's share.
STAGES = (1, 2, 4, 8, 16, 32)
MIN_STAGE_BYTES = 256 * 1024


def _stage_cuts(lo: int, hi: int, stages: int, stick_elems: int) -> list[tuple[int, int]]:
    """``[lo, hi)`` cut into ``stages`` runs of whole sticks (relative to ``lo``)."""
    return [(lo + a, lo + b) for a, b in shares(hi - lo, stages, stick_elems)]


@dataclasses.dataclass(frozen=True)
class _Stages:
    """A collective as stages: each an exchange then a loop kernel of the cores
    reading what it brought; ``after``: exchanges once every stage is done."""

    stages: tuple[tuple[LinkExchange, kir.KernelGroup], ...]
    after: tuple[LinkExchange, ...]
    workspace: tuple[tuple[str, str, int], ...]
    nbytes: int


def _reduce_stages(kernel: kir.ExternKernel, m: Machine, x: _Flat, dst: _Flat, mine: tuple[int, int],
                   sent: Mapping[int, tuple[int, int]], own: int, rank: int, ranks: int, stages: int,
                   staged_name: str) -> tuple[list[tuple[LinkExchange, kir.KernelGroup]], dict[int, _Flat]]:
    """Stages of a reduce-scatter: peer ``q`` gets ``x[sent[q]]``; this card
    receives each peer's piece of its own share ``mine`` (as ``x`` numbers it)
    into staging and reduces it with its own piece (``x`` from element ``own``)
    into ``dst`` (``x`` itself at ``mine``, or another buffer from its start)."""
    stick = m.stick_bytes // itemsize(x.dtype)
    lo, hi = mine
    length = hi - lo
    peers = [q for q in range(ranks) if q != rank]
    staged = {q: _Flat(f"{staged_name}.from{q}", x.dtype, 0, length, length) for q in peers}
    mine_cuts = _stage_cuts(0, length, stages, stick)
    sent_cuts = {q: _stage_cuts(*sent[q], stages, stick) for q in peers}
    if any(b <= a for a, b in mine_cuts) or any(b <= a for q in peers for a, b in sent_cuts[q]):
        raise DoesNotFit(f"{length} elements do not make {stages} stages of whole sticks")
    reduce_op = str(kernel.attr("reduce_op"))
    out = []
    for k, (a, b) in enumerate(mine_cuts):
        ex = _exchange([(q, x.region(*sent_cuts[q][k])) for q in peers],
                       [(q, staged[q].region(a, b)) for q in peers], _FIRST_TAG + k)
        pieces = [(x, own + a) if q == rank else (staged[q], a) for q in range(ranks)]
        base = (lo if dst is x else 0) + a
        out.append((ex, _loop_kernel(kernel, f"reduce{k}", dst, base, b - a, pieces, reduce_op, ranks)))
    return out, staged


def _all_reduce(kernel: kir.ExternKernel, m: Machine, algorithm: str, x: _Flat, rank: int, ranks: int,
                stages: int) -> _Stages:
    peers = [q for q in range(ranks) if q != rank]
    if algorithm == "one-shot":
        lo, hi = 0, x.numel
        cut = {q: (0, x.numel) for q in peers}
    else:
        cuts = shares(x.numel, ranks, m.stick_bytes // itemsize(x.dtype))
        if any(b <= a for a, b in cuts):
            raise DoesNotFit(f"{x.numel} elements do not give each of {ranks} cards a share of whole sticks")
        lo, hi = cuts[rank]
        cut = {q: cuts[q] for q in peers}
    steps, staged = _reduce_stages(kernel, m, x, x, (lo, hi), cut, lo, rank, ranks, stages, x.name)
    after = () if algorithm == "one-shot" else \
        (_exchange([(q, x.region(lo, hi)) for q in peers], [(q, x.region(*cut[q])) for q in peers],
                   _FIRST_TAG + stages),)
    return _Stages(tuple(steps), after, tuple((f.name, f.dtype, f.numel) for f in staged.values()),
                   x.numel * itemsize(x.dtype))


def _all_gather(kernel: kir.ExternKernel, m: Machine, x: _Flat, out: _Flat, rank: int, ranks: int,
                stages: int) -> _Stages:
    n = x.numel
    if out.numel != n * ranks:
        raise DoesNotFit(f"an all-gather of {n} elements over {ranks} cards into {out.numel}")
    if stages != 1:
        raise DoesNotFit("an all-gather has one stage (its copy reads nothing the link brings)")
    peers = [q for q in range(ranks) if q != rank]
    ex = _exchange([(q, x.region(0, n)) for q in peers], [(q, out.region(q * n, (q + 1) * n)) for q in peers],
                   _FIRST_TAG)
    copy = _loop_kernel(kernel, "copy", out, rank * n, n, [(x, 0)], None, ranks)
    return _Stages(((ex, copy),), (), (), out.numel * itemsize(out.dtype))


def _reduce_scatter(kernel: kir.ExternKernel, m: Machine, x: _Flat, out: _Flat, rank: int, ranks: int,
                    stages: int) -> _Stages:
    n = out.numel
    if x.numel != n * ranks:
        raise DoesNotFit(f"a reduce-scatter of {x.numel} elements over {ranks} cards into {n}")
    peers = [q for q in range(ranks) if q != rank]
    steps, staged = _reduce_stages(kernel, m, x, out, (0, n), {q: (q * n, (q + 1) * n) for q in peers}, rank * n,
                                   rank, ranks, stages, out.name)
    return _Stages(tuple(steps), (), tuple((f.name, f.dtype, f.numel) for f in staged.values()),
                   x.numel * itemsize(x.dtype))


def _concat(allocs: Sequence[Sequence[Alloc]], at: Sequence[int]) -> tuple[Alloc, ...]:
    """One allocation table: ``allocs[i]`` moved to start at step ``at[i]``."""
    out = []
    for table, start in zip(allocs, at):
        out += [dataclasses.replace(a, first=a.first + start if a.first >= 0 else a.first,
                                    last=a.last + start if a.last >= 0 else a.last) for a in table]
    return tuple(out)


def _rebodied(ins: object, shift: int) -> object:
    return dataclasses.replace(ins, body=ins.body + shift) if shift and hasattr(ins, "body") else ins  # type: ignore


def _compose(loops: Sequence[Program], exchanges: Sequence[LinkExchange], after: Sequence[LinkExchange], leader: int,
             dtypes: Mapping[str, str], stick: int) -> tuple[tuple[CoreProgram, ...], tuple]:
    """Every core's stream: stage k's exchange on ``leader``, then stage k's loop
    program; a core whose stage-k steps touch what the exchange moves waits at
    barrier k first, which the leader passes once the exchange is done. The
    leader issues exchange k+1 before its own stage-k work, so the link moves
    stage k+1 while the cores work on stage k. Then (``after``) a barrier of
    every core and the final exchanges on the leader. Returns the cores and the
    loop bodies (each stage's, its vector steps re-indexed)."""
    if any(isinstance(i, Barrier) for p in loops for c in p.cores for i in c.steps):
        raise DoesNotFit("a stage's loop program has barriers of its own")
    bodies: list = []
    shifts = []
    for p in loops:
        shifts.append(len(bodies))
        bodies.extend(p.bodies)
    per_core: dict[int, list[CoreProgram | None]] = {}
    for k, p in enumerate(loops):
        for c in p.cores:
            if c.instrs:
                per_core.setdefault(c.core, [None] * len(loops))[k] = c
    per_core.setdefault(leader, [None] * len(loops))
    waits = {core: [c is not None and any(_conflicts(i, (exchanges[k],), dtypes, stick) for i in c.steps)
                    for k, c in enumerate(parts)] for core, parts in per_core.items()}
    needed = [any(w[k] for core, w in waits.items() if core != leader) for k in range(len(loops))]
    end_tag = _FIRST_TAG + len(loops)
    out = []
    for core in sorted(per_core):
        stream: list = []
        tables: list = []
        starts: list[int] = []
        mine = core == leader
        if mine:
            stream.append(exchanges[0])
        for k, c in enumerate(per_core[core]):
            if needed[k] and (mine or waits[core][k]):
                stream.append(Barrier(_FIRST_TAG + k))
            if mine and k + 1 < len(loops):
                stream.append(exchanges[k + 1])
            if c is not None:
                starts.append(len(stream))
                tables.append(c.alloc_table)
                stream.extend(_rebodied(i, shifts[k]) for i in c.steps)
        if after:
            stream += [Barrier(end_tag), *(after if mine else ())]
        out.append(CoreProgram(core, tuple(stream), _concat(tables, starts)))
    return tuple(out), tuple(bodies)


def _group_size(kernel: kir.ExternKernel, ranks: int) -> None:
    declared = kernel.attr("group_size")
    if declared is not None and int(declared) != ranks:
        raise DoesNotFit(f"the collective names group_size={declared}, its group has {ranks} ranks")


def build_collective(kernel: kir.ExternKernel, m: Machine, algorithm: str, rank: int, ranks: int, group: str,
                     sizes: Mapping[sympy.Symbol, int] | None = None, stages: int = 1) -> Program:
    """The program of ``algorithm`` (one of ``ALGORITHMS[kernel.op]``) in
    ``stages`` stages (see :data:`STAGES`) for card ``rank`` of ``ranks`` in
    process group ``group``, checked (:class:`DoesNotFit` when it breaks a rule
    or the buffers do not split so)."""
    if algorithm not in ALGORITHMS.get(kernel.op, ()):
        raise ValueError(f"algorithm={algorithm!r} is not accepted for {kernel.op}: expected one of "
                         f"{', '.join(ALGORITHMS.get(kernel.op, ()))}")
    if not 0 <= rank < ranks or ranks < 2:
        raise ValueError(f"rank={rank} of ranks={ranks} is not accepted: expected 0 <= rank < ranks, ranks >= 2")
    sizes = sizes or {}
    _group_size(kernel, ranks)
    x = _flat(kernel.inputs[0], sizes)
    if x.numel == 0:
        raise DoesNotFit("an empty buffer has nothing to exchange")
    if kernel.op == "all_reduce_":
        parts = _all_reduce(kernel, m, algorithm, x, rank, ranks, stages)
    elif kernel.op == "all_gather_into_tensor":
        parts = _all_gather(kernel, m, x, _flat(kernel.output, sizes), rank, ranks, stages)
    elif kernel.op == "reduce_scatter_tensor":
        parts = _reduce_scatter(kernel, m, x, _flat(kernel.output, sizes), rank, ranks, stages)
    else:
        raise DoesNotFit(f"no program for the collective {kernel.op}")
    loops = [plan_group(ir, m, {}, kernel.name) for _, ir in parts.stages]
    ws = (*(w for p in loops for w in p.workspace), *parts.workspace)
    dtypes = {**{b.name: b.dtype for _, ir in parts.stages for b in ir.buffers}, **{n: dt for n, dt, _ in ws}}
    cores, bodies = _compose(loops, [ex for ex, _ in parts.stages], parts.after, 0, dtypes, m.stick_bytes)
    plan = CollectivePlan(kernel.op, algorithm, str(kernel.attr("reduce_op", "-")), group, rank, ranks,
                          reduction=loops[0].plan, nbytes=parts.nbytes, stages=stages)
    p = Program(kernel.name, "collective", kernel, bodies, cores, plan, workspace=ws)
    numels = {b.name: _flat(b, sizes).storage for b in kernel.buffers}
    numels.update({name: k for name, _, k in ws})
    try:
        static_check(p, m, numels)
    except EmulatorError as exc:
        raise DoesNotFit(f"its program breaks a hardware rule ({exc})") from None
    return p


def plan_collective(kernel: kir.ExternKernel, m: Machine, sizes: Mapping[sympy.Symbol, int]) -> Program:
    """This card's program of the collective ``kernel`` (see the module docstring).
    :class:`DoesNotFit` when no program fits (the collective then runs on the
    host through torch.distributed, announced)."""
    if kernel.op not in COLLECTIVE_OPS:
        raise DoesNotFit(f"no program for the collective {kernel.op}")
    try:
        group = link_group(str(kernel.attr("group_name")))
    except CollectiveError as exc:
        raise DoesNotFit(str(exc)) from None
    if group.size < 2:
        raise DoesNotFit("a group of one card has nothing to exchange")
    timed: list[tuple[float, int, Program]] = []
    reasons = []
    share = math.prod(concrete(d, sizes) for d in kernel.output.size) * itemsize(kernel.output.dtype)
    for algorithm in ALGORITHMS[kernel.op]:
        last = math.inf
        for stages in STAGES:
            if stages > 1 and share // (group.size if algorithm != "one-shot" else 1) // stages < MIN_STAGE_BYTES:
                break
            try:
                p = build_collective(kernel, m, algorithm, group.rank, group.size, group.name, sizes, stages)
            except DoesNotFit as exc:
                reasons.append(f"{algorithm} in {stages} stage(s): {exc}")
                continue
            ns = simulate(p, m, keep_events=False).total_ns
            timed.append((ns, len(timed), p))
            if ns >= last:
                break  # one more stage is no faster: more would only add latencies
            last = ns
    if not timed:
        raise DoesNotFit("no collective program fits", "; ".join(reasons), kernel.name)
    best_ns, _, best = min(timed)
    return dataclasses.replace(best, plan=dataclasses.replace(best.plan, estimate_ns=round(best_ns, 1)))


def collective_work(kernel: kir.ExternKernel, sizes: Mapping[sympy.Symbol, int]) -> tuple[str, float]:
    """One vector op per element the card's cores produce at most: the output
    (an all-reduce's buffer, a reduce-scatter's slot, an all-gather's whole output)."""
    return "vec", float(math.prod(concrete(d, sizes) for d in kernel.output.size))
