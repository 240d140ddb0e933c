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

__all__ = ["Session", "current", "activate", "current_machine", "set_machine", "use_machine", "card_count",
           "current_card", "set_card", "card_session", "check_card"]


class Session:
    """One emulated card and everything known about running on it (see the module docstring).

    ``machine``: the machine model (default: ``$SPYRE_MACHINE`` over the Spyre card's defaults);
    ``index``: the card of the ensemble it stands for (``spyre:<index>``)."""

    def __init__(self, machine: Machine | None = None, index: int = 0) -> None:
        self.machine = machine if machine is not None else spec_machine()
        self.index = index
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


def spec_machine() -> Machine:
    """The machine ``$SPYRE_MACHINE`` describes (over the Spyre card's defaults)."""
    return Machine.from_spec(os.environ.get("SPYRE_MACHINE"))


#: One session per card of the ensemble, made on first use.
_sessions: dict[int, Session] = {}
#: A session made current by :func:`activate` (it stands in for the current card's).
_active: Session | None = None
_current_lock = threading.Lock()
#: The current card, once set (else ``$LOCAL_RANK``, else 0).
_card: int | None = None


def card_count() -> int:
    """The cards of the ensemble (the machine spec's ``cards``)."""
    return spec_machine().cards


def check_card(index: Any, what: str = "spyre") -> int:
    """``index`` as a card index of the ensemble; a one-line ``ValueError`` naming
    ``what`` and the accepted range otherwise."""
    n = card_count()
    accepted = f"expected a card index 0..{n - 1} (the machine has {n} card{'s' if n != 1 else ''}; " \
               "set cards= in SPYRE_MACHINE for more)"
    if isinstance(index, bool):
        raise ValueError(f"{what}={index!r} is not accepted: {accepted}")
    try:
        value = int(str(index).strip()) if isinstance(index, str) else int(index)
    except (TypeError, ValueError):
        raise ValueError(f"{what}={index!r} is not accepted: {accepted}") from None
    if isinstance(index, float) and index != value or not 0 <= value < n:
        raise ValueError(f"{what}={index!r} is not accepted: {accepted}")
    return value


def current_card() -> int:
    """The card the device works on now: the last :func:`set_card`, else
    ``$LOCAL_RANK`` (one card per process under torchrun), else 0."""
    global _card
    if _card is None:
        local = os.environ.get("LOCAL_RANK")
        _card = check_card(local, "LOCAL_RANK") if local is not None else 0
    return _card


def set_card(index: Any) -> None:
    """Make card ``index`` current (``torch.spyre.set_device``)."""
    global _card
    _card = check_card(index, "device")


def card_session(index: int) -> Session:
    """The session of card ``index`` (its own card, memory and report)."""
    index = check_card(index, "device")
    with _current_lock:
        if index not in _sessions:
            _sessions[index] = Session(index=index)
        return _sessions[index]


def current() -> Session:
    """The session the device works for now: the one :func:`activate` made current,
    else the current card's."""
    active = _active
    return active if active is not None else card_session(current_card())


@contextlib.contextmanager
def activate(session: Session) -> Iterator[Session]:
    """Make ``session`` current inside the block."""
    global _active
    old = _active
    _active = session
    try:
        yield session
    finally:
        _active = old


def current_machine() -> Machine:
    """The machine kernels are planned for and emulated on."""
    return current().machine


def set_machine(m: Machine) -> None:
    """Plan and emulate on ``m`` from now on (the current session)."""
    current().set_machine(m)


def use_machine(m: Machine) -> contextlib.AbstractContextManager[Machine]:
    """Plan and emulate on ``m`` inside the block (the current session)."""
    return current().use_machine(m)
