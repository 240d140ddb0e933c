"""What can go wrong between a kernel and the card, one class per meaning:

* :class:`EmulatorError`: a program broke a hardware rule (or read what it never
  wrote); the emulator raises it, naming the kernel, core, step and buffer.
* :class:`DoesNotFit`: a kernel (or one division of it) needs more of the
  machine than it has, or a shape of work the division cannot express; the
  planners raise it, naming the kernel, the limit and the divisions they tried.
  Its subclasses say which limit when a planner reacts to that one alone
  (:class:`~spyre_adapter.scheduler.lx_alloc.LxFull`: the LX scratchpad;
  :class:`~spyre_adapter.scheduler.loop_program.NeedsPhases`: a division that
  only works in phases).
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["EmulatorError", "DoesNotFit"]


class EmulatorError(RuntimeError):
    """A program broke a hardware rule or read what it never wrote."""

    def __init__(self, kind: str, kernel: str, core: int, step: int, buffer: str, detail: str) -> None:
        self.kind, self.kernel, self.core, self.step, self.buffer = kind, kernel, core, step, buffer
        self.detail = detail
        super().__init__(f"{kind} in kernel {kernel}, core {core}, step {step}, buffer {buffer}: {detail}")


class DoesNotFit(ValueError):
    """A kernel needs more of the machine than it has: ``what`` failed, against
    ``limit`` (a machine parameter and its value, or the rule a division breaks),
    after trying the divisions in ``tried`` (each with why it failed)."""

    def __init__(self, what: str, limit: str = "", kernel: str = "", tried: Sequence[str] = ()) -> None:
        self.what, self.limit, self.kernel, self.tried = what, limit, kernel, tuple(tried)
        text = f"{f'kernel {kernel}: ' if kernel else ''}{what}"
        if limit:
            text += f" (limit: {limit})"
        if self.tried:
            text += f"; tried {len(self.tried)} division(s): " + "; ".join(self.tried)
        super().__init__(text)

    def in_kernel(self, kernel: str) -> DoesNotFit:
        """The same error naming ``kernel``."""
        return DoesNotFit(self.what, self.limit, kernel, self.tried)
