"""How often ``torch.compile`` compiled: frames, recompiles, graph breaks.

A serving loop must not recompile per token; :func:`count_compiles` measures
it around any code, and :func:`mark_dynamic` declares a dimension dynamic up
front (so the first compile is already symbolic in it).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import torch

from ._torch import dynamo_counts

__all__ = ["CompileCounts", "count_compiles", "mark_dynamic"]


@dataclasses.dataclass
class CompileCounts:
    """Dynamo activity inside one :func:`count_compiles` block.

    ``compiles``: frame compilations; ``recompiles``: those of a frame that was
    compiled before (a guard failed); ``graph_breaks``: splits of a frame into
    several graphs, with ``break_reasons`` by message; ``graphs``: FX graphs
    handed to the backend; ``seconds``: wall time spent compiling (Dynamo,
    AOTAutograd and the backend compiler; ``None`` if this torch cannot tell).
    """

    compiles: int = 0
    recompiles: int = 0
    graph_breaks: int = 0
    graphs: int = 0
    break_reasons: dict[str, int] = dataclasses.field(default_factory=dict)
    seconds: float | None = None


@contextmanager
def count_compiles() -> Iterator[CompileCounts]:
    """Count compilation inside the block; the yielded object is filled on exit."""
    counts = CompileCounts()
    before = dynamo_counts.snapshot()
    timer = dynamo_counts.CompileTimer()
    logged = dynamo_counts.BreakLog()
    try:
        with timer, logged:
            yield counts
    finally:
        counted = dynamo_counts.delta(before, dynamo_counts.snapshot())
        for key, value in dynamo_counts.merge_logged(counted, logged).items():
            setattr(counts, key, value)
        counts.seconds = timer.seconds


def mark_dynamic(t: torch.Tensor, dims: int | Sequence[int]) -> None:
    """Compile ``t``'s dimensions ``dims`` with symbolic sizes from the first
    compile on (Dynamo otherwise specialises, then recompiles once they change)."""
    dynamo_counts.mark_dynamic(t, list(dims) if not isinstance(dims, int) else dims)
