"""What a Kernel IR body's loads and stores depend on: which accesses are
irregular (an index that is not affine in the loop variables, or that depends
on loaded data), and the instructions needed to compute an access's index."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterator, Mapping

import sympy

from spyre_shims import index as sidx
from spyre_shims.kernel_ir import Instr, LoopKernel, Ref

__all__ = ["Access", "accesses", "deps", "index_cone", "indirect_levels", "split_dim", "with_ranges", "with_symbols"]


@dataclasses.dataclass(frozen=True)
class Access:
    """A load or store of a body."""

    pos: int
    buffer: str
    index: sympy.Expr
    store: bool
    reduced: bool  # store_reduction: indexed by the iteration vars only
    masked: bool
    atomic: bool


@functools.lru_cache(maxsize=4096)
def accesses(body: tuple[Instr, ...]) -> tuple[Access, ...]:
    """Every load and store of a body, in order."""
    out = []
    for pos, ins in enumerate(body):
        if ins.op == "load":
            out.append(Access(pos, ins.args[0], ins.args[1], False, False, ins.mask is not None, False))
        elif ins.op in ("store", "store_reduction"):
            atomic = len(ins.args) > 3 and ins.args[3] == "atomic_add"
            out.append(Access(pos, ins.args[0], ins.args[1], True, ins.op == "store_reduction", False, atomic))
    return tuple(out)


def deps(body: tuple[Instr, ...], pos: int) -> set[int]:
    """Positions of the instructions instruction ``pos`` reads (its mask included)."""
    ins = body[pos]
    refs: list[int] = []
    for a in ins.args:
        for x in (a if isinstance(a, tuple) else (a,)):
            if isinstance(x, Ref):
                refs.append(x.id)
    if ins.mask is not None:
        refs.append(ins.mask.id)
    return set(refs)


def _definers(body: tuple[Instr, ...]) -> dict[str, int]:
    """Indirect symbol name -> the ``indirect`` instruction defining it."""
    return {ins.args[4]: k for k, ins in enumerate(body) if ins.op == "indirect"}


@functools.lru_cache(maxsize=4096)
def index_cone(body: tuple[Instr, ...], positions: tuple[int, ...]) -> frozenset[int]:
    """The instructions an access's index and mask need (the accesses included):
    what an address generator evaluates."""
    defs = _definers(body)
    need: set[int] = set()
    todo = []
    for p in positions:
        need.add(p)
        ins = body[p]
        if ins.mask is not None:
            todo.append(ins.mask.id)
        for s in sidx.free_symbols(ins.args[1]):
            if s.name in defs:
                todo.append(defs[s.name])
    while todo:
        k = todo.pop()
        if k in need:
            continue
        need.add(k)
        todo.extend(deps(body, k))
        ins = body[k]
        if ins.op in ("load", "index_expr", "check_bounds"):
            for s in sidx.free_symbols(ins.args[1] if ins.op != "index_expr" else ins.args[0]):
                if s.name in defs:
                    todo.append(defs[s.name])
    return frozenset(need)


@functools.lru_cache(maxsize=4096)
def indirect_levels(body: tuple[Instr, ...]) -> dict[int, int]:
    """For each access whose index depends on loaded data: its level (1: its
    index needs only regular loads; k: it needs a level k-1 access's data)."""
    defs = _definers(body)
    levels: dict[int, int] = {}

    def level(pos: int) -> int:
        if pos in levels:
            return levels[pos]
        ins = body[pos]
        syms = [s.name for s in sidx.free_symbols(ins.args[1]) if s.name in defs]
        if not syms:
            return 0
        cone = index_cone(body, (pos,)) - {pos}
        inner = [level(k) for k in cone if body[k].op == "load" and k != pos]
        lv = 1 + max((x for x in inner), default=0)
        levels[pos] = lv
        return lv

    for a in accesses(body):
        if level(a.pos):
            pass
    return {k: v for k, v in levels.items() if v > 0}


def _substituted(arg: object, subs: dict[sympy.Symbol, sympy.Expr]) -> object:
    if isinstance(arg, sympy.Basic):
        return arg.xreplace(subs)
    if isinstance(arg, tuple):
        return tuple(_substituted(a, subs) for a in arg)
    return arg


def split_dim(kernel: LoopKernel, t: int, outer: int) -> LoopKernel:
    """``kernel`` with its loop dimension ``t`` (of ``outer * inner`` points)
    iterated as two, ``outer`` then ``inner``: the same points in the same
    row-major order, its index variables renumbered (``i_t`` becomes
    ``inner * i_t + i_(t+1)``, later ones move up by one)."""
    size = int(kernel.ranges[t])
    if outer <= 0 or size % outer:
        raise ValueError(f"{kernel.name}: dimension {t} of {size} points is not {outer} whole rows")
    inner = size // outer
    old = [sidx.index_symbol(f"i{j}") for j in range(len(kernel.ranges))]
    new = [sidx.index_symbol(f"i{j}") for j in range(len(kernel.ranges) + 1)]
    subs: dict[sympy.Symbol, sympy.Expr] = {old[j]: new[j] for j in range(t)}
    subs[old[t]] = inner * new[t] + new[t + 1]
    subs.update({old[j]: new[j + 1] for j in range(t + 1, len(old))})
    body = tuple(dataclasses.replace(ins, args=_substituted(ins.args, subs)) for ins in kernel.body)
    ranges = (*kernel.ranges[:t], sympy.Integer(outer), sympy.Integer(inner), *kernel.ranges[t + 1:])
    return dataclasses.replace(kernel, ranges=ranges, body=body)


def with_symbols(kernel: LoopKernel, names: Mapping[str, str]) -> LoopKernel:
    """``kernel`` with the symbols named in ``names`` renamed (its index
    expressions and ranges): a body planned for one kernel, for another of the
    same structure whose run-time sizes have other symbols."""
    subs: dict[sympy.Symbol, sympy.Expr] = {}
    for x in (*kernel.ranges, *kernel.reduction_ranges, *(a for ins in kernel.body for a in _flat(ins.args))):
        if isinstance(x, sympy.Basic):
            subs.update({s: sidx.index_symbol(names[s.name]) for s in sidx.free_symbols(x) if s.name in names})
    if not subs:
        return kernel
    body = tuple(dataclasses.replace(ins, args=_substituted(ins.args, subs)) for ins in kernel.body)
    return dataclasses.replace(kernel, ranges=tuple(_substituted(tuple(kernel.ranges), subs)),  # type: ignore[arg-type]
                               reduction_ranges=tuple(_substituted(tuple(kernel.reduction_ranges), subs)),  # type: ignore[arg-type]
                               body=body)


def _flat(args: object) -> Iterator[object]:
    if isinstance(args, tuple):
        for a in args:
            yield from _flat(a)
    else:
        yield args


def with_ranges(kernel: LoopKernel, ranges: tuple[int, ...]) -> LoopKernel:
    """``kernel`` iterated over ``ranges``: its own dimensions, some split in two
    by :func:`split_dim` (a program planned for one kernel, run for another of
    the same structure)."""
    out, t = kernel, 0
    while tuple(int(r) for r in out.ranges) != tuple(ranges):
        while t < len(ranges) and int(out.ranges[t]) == ranges[t]:
            t += 1
        if t >= len(ranges) or int(out.ranges[t]) % ranges[t]:
            raise ValueError(f"{kernel.name}: ranges {tuple(out.ranges)} do not split into {tuple(ranges)}")
        out = split_dim(out, t, ranges[t])
    return out
