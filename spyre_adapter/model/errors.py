"""What can go wrong between a kernel and the card, one class per meaning:

* :class:`EmulatorError`: a program broke a hardware rule (or read what it never
  wrote); the emulator raises it, naming the kernel, core, step and buffer.
* :class:`DoesNotFit`: a kernel needs more of the machine than it has; the
  planners raise it, naming the kernel, the limit and the divisions they tried.
"""

from __future__ import annotations

__all__ = ["EmulatorError"]


class EmulatorError(RuntimeError):
    """A program broke a hardware rule or read what it never wrote."""

    def __init__(self, kind: str, kernel: str, core: int, step: int, buffer: str, detail: str) -> None:
        self.kind, self.kernel, self.core, self.step, self.buffer = kind, kernel, core, step, buffer
        self.detail = detail
        super().__init__(f"{kind} in kernel {kernel}, core {core}, step {step}, buffer {buffer}: {detail}")
