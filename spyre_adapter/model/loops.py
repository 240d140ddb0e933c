"""Finding the loop in a Spyre program's stream: :func:`fold` finds it in a
flat stream; :func:`extrapolate` turns three prefixes of a program's streams
(the first 3, 4, 5 units of its work) into the whole program's looped streams,
and checks that the loop reproduces the two shorter prefixes exactly;
:func:`looped` writes the result as a :class:`~spyre_adapter.model.program.Loop`.
What a loop means is :mod:`.loop_steps`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from spyre_adapter.model.loop_steps import advanced, by_position, diff, leaves
from spyre_adapter.model.program import Loop

__all__ = ["Folded", "fold", "extrapolate", "looped", "Run", "fold_runs"]


# ------------------------------------------------------------------ finding loops

@dataclasses.dataclass(frozen=True)
class Folded:
    """A flat stream seen as ``head``, then ``trips`` iterations of ``body`` (each
    advanced by ``advance``: (body position, integer, step)), then ``tail``."""

    head: tuple[Any, ...]
    body: tuple[Any, ...]
    advance: tuple[tuple[int, int, int], ...]
    trips: int
    tail: tuple[Any, ...]


def fold(seq: Sequence[Any], period: int) -> Folded | None:
    """The longest run of ``seq`` that repeats every ``period`` items with
    constant moves of advancing integers, starting at the first place where
    three whole periods do; None when there is no such place."""
    n = len(seq)
    if period <= 0 or n < 3 * period:
        return None
    d = [diff(seq[j], seq[j + period]) for j in range(n - period)]

    def repeats(a: int) -> bool:  # iterations at a, a + period, a + 2 period move alike
        return all(d[a + q] is not None and d[a + q] == d[a + period + q] for q in range(period))

    start = next((a for a in range(n - 3 * period + 1) if repeats(a)), None)
    if start is None:
        return None
    trips = 3
    while start + (trips + 1) * period <= n and all(d[start + (trips - 1) * period + q] == d[start + q]
                                                    for q in range(period)):
        trips += 1
    body = tuple(seq[start:start + period])
    advance = tuple((q, k, st) for q in range(period) for k, st in enumerate(d[start + q]) if st)  # type: ignore[arg-type]
    return Folded(tuple(seq[:start]), body, advance, trips, tuple(seq[start + trips * period:]))


def extrapolate(prefixes: Sequence[Sequence[Any]], extra: int) -> tuple[Folded, tuple[tuple[int, int, int], ...]] | None:
    """The whole stream of which ``prefixes`` are three prefixes of a program,
    each one step of work longer than the last, and the whole ``extra`` steps
    longer than the third: (the third folded with ``extra`` steps' iterations
    more, its tail's moves per iteration: (tail position, integer, step)).

    The loop found in the third must reproduce the first two exactly with one
    and two steps' iterations fewer and their tails moved back, else None (the
    stream is not one steady loop)."""
    s1, s2, s3 = prefixes
    grow = len(s3) - len(s2)
    if grow <= 0 or len(s2) - len(s1) != grow:
        return None
    f = fold(s3, grow)
    if f is None or f.trips < 3:
        return None
    t2 = s2[len(s2) - len(f.tail):] if f.tail else ()
    moves: list[tuple[int, int, int]] = []
    for q, (x, y) in enumerate(zip(t2, f.tail)):
        dq = diff(x, y)
        if dq is None:
            return None
        moves.extend((q, k, st) for k, st in enumerate(dq) if st)
    after = tuple(moves)
    for fewer, want in ((1, s2), (2, s1)):
        got = _unfolded(dataclasses.replace(f, trips=f.trips - fewer), after, -fewer)
        if len(got) != len(want) or any(x != y for x, y in zip(got, want)):
            return None
    return dataclasses.replace(f, trips=f.trips + extra,
                               tail=tuple(_tail_moved(f.tail, after, extra))), after


def _tail_moved(tail: Sequence[Any], after: Sequence[tuple[int, int, int]], times: int) -> list[Any]:
    adv = by_position(after)
    return [advanced(x, adv.get(q, ()), times) for q, x in enumerate(tail)]


def _unfolded(f: Folded, after: Sequence[tuple[int, int, int]], tail_times: int) -> list[Any]:
    adv = by_position(f.advance)
    out = list(f.head)
    for i in range(f.trips):
        out.extend(advanced(s, adv.get(j, ()), i) for j, s in enumerate(f.body))
    out.extend(_tail_moved(f.tail, after, tail_times))
    return out


def looped(f: Folded, after: Sequence[tuple[int, int, int]] = ()) -> tuple[Any, ...]:
    """The stream of ``f`` with its loop as a :class:`~spyre_adapter.model.program.Loop`
    step (its tail stored as the loop leaves it at zero trips, moved by ``after``
    per trip)."""
    loop = Loop(f.trips, f.body, f.advance, tuple(after))
    return (*f.head, loop, *_tail_moved(f.tail, after, -f.trips))





# ------------------------------------------------------------------ loops a builder marked

@dataclasses.dataclass(frozen=True)
class Run:
    """Where a builder wrote three iterations of a loop into a flat stream:
    ``stream[start:start + 3 * length]``, standing for ``trips`` of them."""

    start: int
    length: int
    trips: int


def fold_runs(code: Sequence[Any], table: Sequence[Any], runs: Sequence[Run]) -> tuple[tuple[Any, ...], tuple[Any, ...]] | None:
    """A core's stream and allocation table with each of ``runs`` (in stream order,
    apart) folded into a loop of its ``trips`` iterations, or None when the three
    written iterations do not move alike (the loop would not be the stream).

    The builder wrote the steps before and after each run at their real places
    (addresses, offsets, ring tags), so the stream needs no ``after``. The table's
    steps are counted in unrolled steps: what follows a loop is stored as the loop
    leaves it at zero trips and moved by its ``after``, so a program with fewer
    trips (:func:`~spyre_adapter.model.timing.truncated`) keeps its table right.
    Allocations of one iteration become a loop of allocations; those of the second
    and third must be the first's, moved by one and two iterations."""
    out: list[Any] = []
    at = 0
    for r in runs:
        if r.start < at or r.trips < 3 or r.length <= 0 or r.start + 3 * r.length > len(code):
            return None
        body = code[r.start:r.start + r.length]
        moves = []
        for j, x in enumerate(body):
            d1 = diff(x, code[r.start + r.length + j])
            if d1 is None or d1 != diff(code[r.start + r.length + j], code[r.start + 2 * r.length + j]):
                return None
            moves.extend((j, k, st) for k, st in enumerate(d1) if st)
        out.extend(code[at:r.start])
        out.append(Loop(r.trips, tuple(body), tuple(moves)))
        at = r.start + 3 * r.length
    out.extend(code[at:])
    allocs = _fold_table(table, runs)
    return None if allocs is None else (tuple(out), allocs)


def _fold_table(table: Sequence[Any], runs: Sequence[Run]) -> tuple[Any, ...] | None:
    def real(i: int) -> int:  # a written step's index in the unrolled stream
        return i + sum((r.trips - 3) * r.length for r in runs if i >= r.start + 3 * r.length)

    def moved(a: Any, by: int) -> Any:
        return dataclasses.replace(a, first=a.first + by, last=a.last + by)

    def at_real(a: Any) -> Any:
        return dataclasses.replace(a, first=real(a.first), last=real(a.last))

    # (sort key, item with unrolled step numbers, the real end of its loop or -1, its step)
    items: list[tuple[int, Any, int, int]] = []
    claimed: set[int] = set()
    for r in runs:
        per = []
        for it in range(3):
            lo, hi = r.start + it * r.length, r.start + (it + 1) * r.length
            got = sorted((a for a in table if lo <= a.first < hi), key=lambda a: (a.first, a.addr, a.name, a.last))
            per.append(got)
            claimed.update(id(a) for a in got)
        if not per[0] and not table:
            continue
        if not per[0] or any(len(x) != len(per[0]) for x in per) or any(
                moved(a, it * r.length) != b for it in (1, 2) for a, b in zip(per[0], per[it])):
            return None
        body = tuple(at_real(a) for a in per[0])
        loop = Loop(r.trips, body, tuple((j, k, r.length) for j in range(len(body)) for k in (1, 2)))
        items.append((real(r.start), loop, real(r.start) + r.trips * r.length, r.length))
    items.extend((real(a.last), at_real(a), -1, 0) for a in table if id(a) not in claimed)
    items.sort(key=lambda t: (t[0], t[2] < 0))
    # Each loop moves the step numbers that follow it in the table and lie past its
    # end; they are stored as the loop leaves them at zero trips.
    values = [leaves(x) for _, x, _, _ in items]
    shift: list[dict[int, int]] = [{} for _ in items]
    out = []
    for p, (_, x, end, step) in enumerate(items):
        if shift[p]:
            x = advanced(x, sorted(shift[p].items()), -1)
        if end >= 0:
            after = []
            for q in range(p + 1, len(items)):
                for k, v in enumerate(values[q]):
                    if k % 3 and v >= end:  # an allocation's first / last step (its address never moves)
                        after.append((q - p - 1, k, step))
                        shift[q][k] = shift[q].get(k, 0) + x.trips * step
            x = dataclasses.replace(x, after=tuple(after))
        out.append(x)
    return tuple(out)
