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

from spyre_adapter.model.loop_steps import advanced, by_position, diff
from spyre_adapter.model.program import Loop

__all__ = ["Folded", "fold", "extrapolate", "looped"]


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



