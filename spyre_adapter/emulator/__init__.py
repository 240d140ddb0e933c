"""The emulated Spyre card: it executes the programs the scheduler emits (every
output value comes from running their steps), enforces the hardware rules on
them, and measures them (DRAM traffic, LX use, a simulated timeline).

* :func:`execute` runs one program on a :class:`Card` (checked, or recorded and
  replayed with a :class:`Replay`); :class:`RunStats` is what it measured.
* :class:`Executable` is a loaded kernel: planned per machine and run-time
  sizes, launched where its :class:`Target` (a device session) says, measured
  (:class:`Metrics`) and recorded (:class:`Recorder`).

Inside: ``execution`` (one launch's state and the order steps run in),
``steps`` (how each step type runs and is recorded), ``replay`` (recorded
steps), ``lx_state`` and ``lx_memory`` (LX as a launch and a vector step see
it), ``card`` (the LX bytes and stamps), ``grouping`` / ``regroup`` (batching
equal steps), ``metrics``, ``trace``.
"""

from spyre_adapter.emulator.card import Card
from spyre_adapter.emulator.executable import Executable, Planned, Recorder, Target
from spyre_adapter.emulator.executor import RunStats, execute
from spyre_adapter.emulator.metrics import Metrics
from spyre_adapter.emulator.replay import Replay
from spyre_adapter.model.errors import EmulatorError

__all__ = ["Card", "execute", "RunStats", "Replay", "Executable", "Planned", "Target", "Recorder", "Metrics",
           "EmulatorError"]
