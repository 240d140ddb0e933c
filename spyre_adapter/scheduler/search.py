"""How hard the planner searches: Inductor's ``max_autotune`` for the Spyre planner.

By default a matmul's plan builds and simulates the few divisions its closed form
ranks first (and re-tiles the chosen one). With max-autotune it also simulates
the stationary one-dimensional divisions (see
:func:`spyre_adapter.scheduler.matmul._seeded`): programs of about a million steps
at Llama-3.1-8B sizes, which the closed form cannot tell from the near-ties it
picks from and which simulate up to 7 % faster. What they cost is compile time and
memory (the 8B layer's first run 262 -> 362 s, peak RSS 3.5 -> 11.2 GB), which is
why, as in Inductor, it is asked for: ``torch.compile(..., mode="max-autotune")``
or ``torch._inductor.config.max_autotune`` while compiling (the backend reads it
through the stable API), ``spyre-adapter run --max-autotune``, or
:func:`max_autotune` around planning calls.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator

__all__ = ["autotuning", "max_autotune"]

_ON: contextvars.ContextVar[bool] = contextvars.ContextVar("spyre_max_autotune", default=False)


def autotuning() -> bool:
    """Whether plans made now search as max-autotune does."""
    return _ON.get()


@contextlib.contextmanager
def max_autotune(on: bool = True) -> Iterator[None]:
    """Plan with (or, ``on`` False, without) the max-autotune search inside the block."""
    token = _ON.set(on)
    try:
        yield
    finally:
        _ON.reset(token)
