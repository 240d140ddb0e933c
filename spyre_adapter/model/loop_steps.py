"""What a :class:`~spyre_adapter.model.program.Loop` step of a Spyre program
means: which integers of its body advance each iteration, and the stream it
stands for unrolled.

A loop runs its body ``trips`` times; iteration ``i`` runs every body step
with some of its integers advanced by ``i`` times a constant: the *advancing*
integers of a step are its addresses and positions (LX ``addr``, region
``offset``, ring and barrier ``tag``, an operand window's ``base``, a vector
step's tile ``box``/``red`` and bound block offsets, an allocation's ``addr``
and step range). Everything else (sizes, strides, dtypes, body numbers,
peers) is the step's structure and is the same in every iteration, so a
region's extent is fixed and its bounds over the loop are those of its first
and last iteration. The steps after a loop may name what the loop advanced
(the next tile's address, the next ring tag): a loop's ``after`` advances
them by its trip count, as a real core's address registers hold what the loop
left in them.

This module knows loops only as :class:`LoopBase` (the program's ``Loop``
derives from it), so the program format can unroll its own streams.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterator, Sequence
from typing import Any

__all__ = ["ADVANCING", "MAX_TRIPS", "LoopBase", "leaves", "leaf_labels", "diff", "advanced", "expand", "count",
           "max_depth", "instructions", "map_code", "loop_trips", "fewer_trips", "by_position", "as_run"]

#: Field names whose integers a loop may advance (see the module docstring).
ADVANCING = frozenset({"addr", "offset", "tag", "base", "box", "red", "bind", "first", "last"})
#: The most iterations one loop may have (a bound for loaders, not a planner limit).
MAX_TRIPS = 1 << 32


class LoopBase:
    """What every loop step is (fields ``trips``, ``body``, ``advance``, ``after``;
    see :class:`spyre_adapter.model.program.Loop`)."""

    trips: int
    body: tuple[Any, ...]
    advance: tuple[tuple[int, int, int], ...]
    after: tuple[tuple[int, int, int], ...]


@functools.lru_cache(maxsize=None)
def _fields(cls: type) -> tuple[tuple[str, bool], ...]:
    return tuple((f.name, f.name in ADVANCING) for f in dataclasses.fields(cls))


def _ints_of(v: Any, out: list[int]) -> None:
    # the integers of an advancing field: an int, or (nested) tuples holding them
    if isinstance(v, bool):
        return
    if isinstance(v, int):
        out.append(v)
    elif isinstance(v, tuple):
        for x in v:
            _ints_of(x, out)


def _is_dc(v: Any) -> bool:
    # dataclasses.is_dataclass for instances, by type (called for every field of every step)
    t = type(v)
    got = _DC.get(t)
    if got is None:
        got = _DC[t] = dataclasses.is_dataclass(t)
    return got


_DC: dict[type, bool] = {}


def _walk(obj: Any, out: list[int]) -> None:
    for name, adv in _fields(type(obj)):
        v = getattr(obj, name)
        if adv:
            _ints_of(v, out)
        elif _is_dc(v):
            _walk(v, out)
        elif isinstance(v, tuple):
            _walk_seq(v, out)


def _walk_seq(v: tuple, out: list[int]) -> None:
    for x in v:
        if _is_dc(x):
            _walk(x, out)
        elif isinstance(x, tuple):
            _walk_seq(x, out)


def _labels(obj: Any, out: list[str]) -> None:
    cls = type(obj).__name__
    for name, adv in _fields(type(obj)):
        v = getattr(obj, name)
        if adv:
            k: list[int] = []
            _ints_of(v, k)
            out.extend([f"{cls}.{name}"] * len(k))
        elif _is_dc(v):
            _labels(v, out)
        elif isinstance(v, tuple):
            for x in _flat_dataclasses(v):
                _labels(x, out)


def _flat_dataclasses(v: tuple) -> Iterator[Any]:
    for x in v:
        if _is_dc(x):
            yield x
        elif isinstance(x, tuple):
            yield from _flat_dataclasses(x)


def leaf_labels(obj: Any) -> list[str]:
    """What each advancing integer of :func:`leaves` is: ``"Lx.addr"``,
    ``"Region.offset"``, ``"RingSend.tag"``, ..."""
    out: list[str] = []
    _labels(obj, out)
    return out


def leaves(obj: Any) -> list[int]:
    """The advancing integers of a step (or allocation, or loop), in field order."""
    out: list[int] = []
    _walk(obj, out)
    return out


def _same_shape(a: Any, b: Any) -> bool:
    """Equal but for advancing integers."""
    if type(a) is not type(b):
        return False
    if _is_dc(a):
        for name, adv in _fields(type(a)):
            x, y = getattr(a, name), getattr(b, name)
            if adv:
                if not _ints_shape(x, y):
                    return False
            elif x is not y and not _same_shape(x, y):
                return False
        return True
    if isinstance(a, tuple):
        return len(a) == len(b) and all(x is y or _same_shape(x, y) for x, y in zip(a, b))
    return a == b


def _ints_shape(x: Any, y: Any) -> bool:
    if isinstance(x, bool) or isinstance(y, bool):
        return x == y
    if isinstance(x, int):
        return isinstance(y, int)
    if isinstance(x, tuple):
        return isinstance(y, tuple) and len(x) == len(y) and all(_ints_shape(p, q) for p, q in zip(x, y))
    return x == y


def diff(a: Any, b: Any) -> tuple[int, ...] | None:
    """``leaves(b) - leaves(a)`` when ``b`` is ``a`` with its advancing integers
    moved; None when they differ in anything else."""
    if a is b:
        return (0,) * len(leaves(a))
    if not _same_shape(a, b):
        return None
    return tuple(y - x for x, y in zip(leaves(a), leaves(b)))


def advanced(obj: Any, moves: Sequence[tuple[int, int]], times: int) -> Any:
    """``obj`` with advancing integer ``k`` moved by ``times * step`` for each
    ``(k, step)`` of ``moves``."""
    if not moves or times == 0:
        return obj
    return _mover(obj, moves)(times)


def _leaf_paths(obj: Any, prefix: tuple = (), out: list[tuple] | None = None) -> list[tuple]:
    """Where each integer of :func:`leaves` sits: field names and tuple indices."""
    out = [] if out is None else out
    for name, adv in _fields(type(obj)):
        v = getattr(obj, name)
        if adv:
            _int_paths(v, prefix + (name,), out)
        elif _is_dc(v):
            _leaf_paths(v, prefix + (name,), out)
        elif isinstance(v, tuple):
            _seq_paths(v, prefix + (name,), out)
    return out


def _int_paths(v: Any, path: tuple, out: list[tuple]) -> None:
    if isinstance(v, bool):
        return
    if isinstance(v, int):
        out.append(path)
    elif isinstance(v, tuple):
        for i, x in enumerate(v):
            _int_paths(x, path + (i,), out)


def _seq_paths(v: tuple, path: tuple, out: list[tuple]) -> None:
    for i, x in enumerate(v):
        if _is_dc(x):
            _leaf_paths(x, path + (i,), out)
        elif isinstance(x, tuple):
            _seq_paths(x, path + (i,), out)


@functools.lru_cache(maxsize=None)
def _field_names(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(cls))


def _with(obj: Any, name: str, value: Any) -> Any:
    # dataclasses.replace without __init__: the fields copied, cached properties not
    if not hasattr(obj, "__dict__"):
        return dataclasses.replace(obj, **{name: value})
    new = object.__new__(type(obj))
    src, dst = obj.__dict__, new.__dict__
    for f in _field_names(type(obj)):
        dst[f] = src[f]
    dst[name] = value
    return new


def _put(obj: Any, path: tuple, value: int) -> Any:
    if not path:
        return value
    head, rest = path[0], path[1:]
    if isinstance(head, int):
        return obj[:head] + (_put(obj[head], rest, value),) + obj[head + 1:]
    return _with(obj, head, _put(getattr(obj, head), rest, value))


def _mover(obj: Any, moves: Sequence[tuple[int, int]]) -> Any:
    """``times -> advanced(obj, moves, times)``, finding the moved integers once
    (a loop body's step is moved once per iteration)."""
    if not moves:
        return lambda times: obj
    steps: dict[int, int] = {}
    for k, st in moves:
        steps[k] = steps.get(k, 0) + st
    paths = _leaf_paths(obj)
    base = leaves(obj)
    moved = [(paths[k], base[k], st) for k, st in steps.items() if st]

    def at(times: int) -> Any:
        out = obj
        for path, v, st in moved:
            out = _put(out, path, v + times * st)
        return out
    return at


def by_position(pairs: Sequence[tuple[int, int, int]]) -> dict[int, list[tuple[int, int]]]:
    """A loop's ``advance`` or ``after`` as {position: [(integer, step), ...]}."""
    out: dict[int, list[tuple[int, int]]] = {}
    for pos, k, st in pairs:
        out.setdefault(pos, []).append((k, st))
    return out


def as_run(code: Sequence[Any]) -> Iterator[Any]:
    """The items of a stream, each one that follows a loop with the integers the
    loop moves (its ``after``) moved by its trip count: as the stream runs."""
    pending: dict[int, list[tuple[int, int]]] = {}
    for pos, x in enumerate(code):
        moves = pending.pop(pos, None)
        if moves:
            x = advanced(x, moves, 1)
        if isinstance(x, LoopBase):
            for q, k, st in x.after:
                pending.setdefault(pos + 1 + q, []).append((k, st * x.trips))
        yield x


def expand(code: Sequence[Any]) -> Iterator[Any]:
    """The steps of a stream that may hold loops, in order, loops unrolled."""
    for x in as_run(code):
        if isinstance(x, LoopBase):
            adv = by_position(x.advance)
            movers = [_mover(s, adv.get(j, ())) for j, s in enumerate(x.body)]
            for i in range(x.trips):
                yield from expand([mv(i) for mv in movers])
        else:
            yield x


def count(code: Sequence[Any]) -> int:
    """Steps of a stream with its loops unrolled."""
    return sum(x.trips * count(x.body) if isinstance(x, LoopBase) else 1 for x in code)


def max_depth(code: Sequence[Any]) -> int:
    """How deeply loops nest in a stream (0: none)."""
    return max((1 + max_depth(x.body) for x in code if isinstance(x, LoopBase)), default=0)


def instructions(code: Sequence[Any]) -> Iterator[Any]:
    """Every instruction a stream names, loop bodies included, each once per place
    it is written (not unrolled): for questions the iterations all answer alike,
    such as which buffers a stream stores to."""
    for x in code:
        if isinstance(x, LoopBase):
            yield from instructions(x.body)
        else:
            yield x


def map_code(code: Sequence[Any], fn: Any) -> tuple[Any, ...]:
    """The stream with ``fn`` applied to every instruction, loops kept (``fn`` must
    not change an instruction's advancing integers' count)."""
    return tuple(dataclasses.replace(x, body=map_code(x.body, fn)) if isinstance(x, LoopBase) else fn(x) for x in code)


def loop_trips(code: Sequence[Any]) -> int | None:
    """The trip count of a stream's one top-level loop (None: none, or several)."""
    found = [x.trips for x in code if isinstance(x, LoopBase)]
    return found[0] if len(found) == 1 else None


def fewer_trips(code: Sequence[Any], fewer: int) -> tuple[Any, ...]:
    """The stream with its top-level loops run ``fewer`` times less (what follows
    a loop moves with it, by the loop's ``after``)."""
    return tuple(dataclasses.replace(x, trips=x.trips - fewer) if isinstance(x, LoopBase) else x for x in code)

