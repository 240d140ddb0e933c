"""The session: everything the emulated Spyre device keeps while a process uses
it, in one object - the machine model kernels are planned for, the card's LX
state, the device report, the cache of planned programs, whether hand-written
kernels take the calls they handle, and the state those kernels keep.

Torch calls the device without saying for whom (an eager op, a compiled
kernel's launch), so one session is *current*: :func:`current` gives it,
:func:`activate` makes another one current inside a block. Two sessions share
nothing: a program launched under a session is planned for that session's
machine, runs on its card and is recorded in its report, whichever session the
graph was compiled under.

Imported by the light device half (``import torch``): the card (the emulator)
and the program cache (the scheduler, sympy) are created on first use.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from spyre_adapter.backend.report import DeviceReport
from spyre_adapter.model.machine import Machine

if TYPE_CHECKING:
    from spyre_adapter.emulator.card import Card
    from spyre_adapter.scheduler.cache import ProgramCache

__all__ = ["Session", "current", "activate", "current_machine", "set_machine", "use_machine"]


class Session:
    """One emulated card and everything known about running on it (see the module docstring).

    ``machine``: the machine model (default: ``$SPYRE_MACHINE`` over the Spyre card's defaults)."""

    def __init__(self, machine: Machine | None = None) -> None:
        self.machine = machine if machine is not None else Machine.from_spec(os.environ.get("SPYRE_MACHINE"))
        self.report = DeviceReport()
        #: hand-written kernels take the calls they handle (off: the generic path, for comparisons)
        self.handwritten = True
        #: what hand-written kernels keep between their calls, by their own keys
        self.kernel_state: dict[Any, Any] = {}
        self._card: Card | None = None
        self._programs: ProgramCache | None = None
        self._lock = threading.Lock()

    @property
    def card(self) -> Card:
        """The emulated card of this session's machine (LX bytes and stamps, kept across launches)."""
        with self._lock:
            if self._card is None:
                from spyre_adapter.emulator.card import Card
                self._card = Card(self.machine)
            return self._card

    @property
    def programs(self) -> ProgramCache:
        """Planned programs by kernel structure, machine and sizes."""
        with self._lock:
            if self._programs is None:
                from spyre_adapter.scheduler.cache import ProgramCache
                self._programs = ProgramCache()
            return self._programs

    def set_machine(self, m: Machine) -> None:
        """Plan and emulate on ``m`` from now on (a fresh card for it)."""
        with self._lock:
            if m != self.machine:
                self.machine, self._card = m, None

    @contextlib.contextmanager
    def use_machine(self, m: Machine) -> Iterator[Machine]:
        """Plan and emulate on ``m`` inside the block (what-if studies)."""
        with self._lock:
            old = self.machine, self._card
        self.set_machine(m)
        try:
            yield m
        finally:
            with self._lock:
                self.machine, self._card = old

    @contextlib.contextmanager
    def generic_path(self) -> Iterator[None]:
        """Hand-written kernels stand aside inside the block: calls compile through
        the generic path (comparisons)."""
        old, self.handwritten = self.handwritten, False
        try:
            yield
        finally:
            self.handwritten = old


_current: Session | None = None
_current_lock = threading.Lock()


def current() -> Session:
    """The session the device works for now (the process's first, made on first use)."""
    global _current
    if _current is None:
        with _current_lock:
            if _current is None:
                _current = Session()
    return _current


@contextlib.contextmanager
def activate(session: Session) -> Iterator[Session]:
    """Make ``session`` current inside the block."""
    global _current
    old = current()
    _current = session
    try:
        yield session
    finally:
        _current = old


def current_machine() -> Machine:
    """The machine kernels are planned for and emulated on."""
    return current().machine


def set_machine(m: Machine) -> None:
    """Plan and emulate on ``m`` from now on (the current session)."""
    current().set_machine(m)


def use_machine(m: Machine) -> contextlib.AbstractContextManager[Machine]:
    """Plan and emulate on ``m`` inside the block (the current session)."""
    return current().use_machine(m)
