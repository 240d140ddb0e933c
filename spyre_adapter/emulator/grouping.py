"""How a group of equal steps of one level lies on the card and in DRAM, so the
executor can run it as one strided op, one gather, or one copy between core grids.

Pure functions of instructions and offsets: which views may be copied gathered,
how DMA regions are spaced (:func:`spacing`), and how receivers and senders lie
on a grid of cores (:func:`core_grid`).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator, Sequence

from spyre_adapter.model import isa
from spyre_adapter.model.program import Instruction, Lx, Region

__all__ = ["lx_shape", "gatherable", "spacing", "core_grid", "row_lengths", "grid_strides", "even_pairs", "disjoint",
           "batches"]


def lx_shape(lx: Lx) -> tuple[str, tuple[int, ...], tuple[int, ...]]:
    """What a gathered step needs equal across its views: dtype, sizes, strides."""
    return lx.dtype, lx.sizes, lx.strides


def gatherable(dst: Lx, src: Lx) -> bool:
    """Whether a copy from ``src`` to ``dst`` can run gathered: bits copied as
    they are (one dtype), strides non-negative, and no element of the
    destination written twice (a broadcast destination is not)."""
    return dst.dtype == src.dtype and min(src.strides, default=0) >= 0 and \
        disjoint(dst.sizes, dst.strides) and dst.addr % dst.itemsize == 0 and src.addr % src.itemsize == 0


def spacing(group: list[tuple[int, int, Instruction]]) -> tuple[tuple[int, int], ...] | None:
    """How a DMA group's DRAM regions lie, as leading (count, offset step) dims
    of one strided view: ``((n, delta),)`` when spaced evenly, or ``((rows, d0),
    (cols, d1))`` when the k-th region is at ``(k // cols) * d0 + (k % cols) * d1``
    (a 2-D tiling spread over a core range); else None. Stores must also not
    overlap: the stacked view must address each element once."""
    regions: list[Region] = [isa.transfer(g[2])[0] for g in group]  # type: ignore[index]
    offs = [r.offset for r in regions]
    n = len(offs)
    found = None
    for cols in row_lengths(n):
        fit = grid_strides(offs, cols)
        if fit is not None:
            found = ((n, fit[1]),) if cols == n else ((n // cols, fit[0]), (cols, fit[1]))
            break
    if found is None:
        return None
    if isa.step(group[0][2]).dma == "out" and not disjoint(
            (*(c for c, _ in found), *regions[0].sizes), (*(d for _, d in found), *regions[0].strides)):
        return None
    return found


def core_grid(pairs: list[tuple[int, int]]) -> tuple[tuple[int, int], tuple[int, tuple[int, int]],
                                                      tuple[int, tuple[int, int]]] | None:
    """(shape, (first receiver, core strides), (first sender, core strides)) when
    the pairs, in order, fill a 2-D grid on which receivers and senders are
    affine (e.g. receivers 4..31 from senders 0..3 repeating: shape (7, 4),
    strides (4, 1) and (0, 1)); else None. Receivers distinct, strides >= 0."""
    n = len(pairs)
    if n < 2 or len({r for r, _ in pairs}) != n:
        return None
    receivers, senders = [r for r, _ in pairs], [c for _, c in pairs]
    for cols in row_lengths(n):
        rs, ss = grid_strides(receivers, cols), grid_strides(senders, cols)
        if rs is not None and ss is not None:
            return (n // cols, cols), (pairs[0][0], rs), (pairs[0][1], ss)
    return None


def row_lengths(n: int) -> Iterator[int]:
    """Row lengths a sequence of ``n`` items can be laid out in, longest first
    (``n`` itself: one row)."""
    return (d for d in range(n, 1, -1) if n % d == 0)


def grid_strides(values: Sequence[int], cols: int) -> tuple[int, int] | None:
    """(outer, inner) >= 0 with ``values[k] == values[0] + (k // cols) * outer +
    (k % cols) * inner`` for every k, else None (``outer`` is 0 for one row)."""
    inner = values[1] - values[0]
    outer = values[cols] - values[0] if cols < len(values) else 0
    if inner < 0 or outer < 0 or any(v != values[0] + (k // cols) * outer + (k % cols) * inner
                                     for k, v in enumerate(values)):
        return None
    return outer, inner


def even_pairs(pairs: list[tuple[int, int]]) -> list[list[tuple[int, int]]]:
    """Split (receiver, sender) pairs, receivers ascending, into runs where both
    cores step evenly (each run: one copy between strided core views)."""
    runs: list[list[tuple[int, int]]] = []
    for pair in pairs:
        run = runs[-1] if runs else None
        if run and pair[1] >= run[-1][1] and (len(run) == 1 or (pair[0] - run[-1][0] == run[1][0] - run[0][0]
                                                                 and pair[1] - run[-1][1] == run[1][1] - run[0][1])):
            run.append(pair)
        else:
            runs.append([pair])
    return runs


def disjoint(sizes: tuple[int, ...], strides: tuple[int, ...]) -> bool:
    """Whether a strided view addresses no element twice (sufficient test: each
    stride, smallest first, clears the extent of the dims inside it)."""
    extent = 0
    for n, st in sorted(((n, st) for n, st in zip(sizes, strides) if n > 1), key=lambda t: t[1]):
        if st <= extent:
            return False
        extent += st * (n - 1)
    return True


def batches(runnable: list[tuple[int, int, Instruction]],
            key: Callable[[Instruction], Hashable | None]) -> list[list[tuple[int, int, Instruction]]]:
    """Runs of consecutive cores executing the same step on their own tiles
    (equal ``key``; a None key never batches)."""
    out: list[list[tuple[int, int, Instruction]]] = []
    for item in sorted(runnable, key=lambda t: t[0]):
        sig = key(item[2])
        if out and sig is not None and out[-1][-1][0] == item[0] - 1 and key(out[-1][-1][2]) == sig:
            out[-1].append(item)
        else:
            out.append([item])
    return out
