"""The card's LX as one launch sees it: the card's memory and stamps, the
launch's stamp, whether the launch is checked, and the two operations every
step's execution uses on it - check that what it reads was written in this
launch, and stamp what it writes.

Passed down to what executes steps (:mod:`.steps`, :class:`.lx_memory.LxMemory`)
so that none of them reaches into the launch's other state.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from spyre_adapter.emulator.card import HELD, STALE, Card, Where, core_range
from spyre_adapter.model.checker_rules import enabled
from spyre_adapter.model.errors import EmulatorError
from spyre_adapter.model.program import Lx

__all__ = ["LxState"]


class LxState:
    """LX of ``card`` during one launch of kernel ``kernel`` (stamp ``epoch``;
    ``checking``: a first launch, whose reads are checked)."""

    def __init__(self, card: Card, epoch: int, checking: bool, kernel: str, dtypes: Mapping[str, str]) -> None:
        self.card, self.epoch, self.checking, self.kernel = card, epoch, checking, kernel
        #: DRAM buffer -> dtype name (what an address-generation step loads as)
        self.dtypes = dtypes

    def view(self, where: Where, lx: Lx) -> torch.Tensor:
        """The tensor view of ``lx`` on one core or a core range."""
        return self.card.view(where, lx)

    def check_written(self, where: Where, lx: Lx, step: int, name: str, mask: torch.Tensor | None) -> None:
        """Every byte of ``lx`` (where ``mask`` is set) was written in this launch."""
        if not self.checking or lx.numel == 0:
            return
        st = self.card.stamps(where, lx)
        # Every byte stamped now (masked lanes included) ends the check. amax of
        # the bitwise complement is the fast way to a uint8 minimum on strided views.
        if 255 - int((~st).amax()) == self.epoch == int(st.amax()):
            return
        st = self.card.element_stamps(where, lx)
        ok = (st == self.epoch).all(-1)
        if mask is not None:
            ok = ok | ~mask.bool().expand(ok.shape)
        if bool(ok.all()):
            return
        held = int(st.amax()) == HELD
        bad = (~ok).nonzero()[0].tolist()
        core = core_range(where)[bad[0]] if not isinstance(where, int) else where
        if bool((st == STALE).any()) and not held and enabled("stale-lx"):
            raise EmulatorError("read of a reassigned allocation", self.kernel, core, step, name,
                                f"{lx.dtype} element {bad[-1] if bad else 0} of the LX view at {lx.addr} was written "
                                "under an allocation that has ended; the allocation holding it now never wrote it")
        if not enabled("unwritten-lx"):
            return
        raise EmulatorError("read of unwritten LX", self.kernel, core, step, name,
                            f"{lx.dtype} element {bad[-1] if bad else 0} of the LX view at {lx.addr}"
                            + (" holds another kernel's data" if held else " was never written in this launch"))

    def reassign(self, core: int, addr: int, nbytes: int) -> None:
        """An allocation starts on ``core`` over ``nbytes`` at ``addr``: what this
        launch wrote there before belongs to an allocation that has ended."""
        if not self.checking or nbytes <= 0:
            return
        st = self.card.stamp[core, addr:addr + nbytes]
        st.masked_fill_(st == self.epoch, STALE)

    def mark(self, where: Where, lx: Lx) -> None:
        """Stamp ``lx``'s bytes as written now (it must not overwrite data held for a later kernel)."""
        if lx.numel == 0 or not self.checking:
            return
        st = self.card.stamps(where, lx)
        if int(st.amax()) == HELD:
            core = where if isinstance(where, int) else where[0]
            raise EmulatorError("overwrites held LX data", self.kernel, core, -1, "-",
                                f"LX bytes at {lx.addr} hold data an earlier kernel left for a later one")
        st.fill_(self.epoch)
