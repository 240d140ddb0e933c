"""A vector step's loads and stores against its LX operands, on one core or
stacked over a core range: where each load's window lies, gathers through kept
indices, stores with their LX stamps, and (replayed steps) readers and writers
resolved once per body position.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import sympy
import torch

from spyre_shims import index as sidx
from spyre_shims.kernel_ir import LoopKernel
from spyre_shims.ops import torch_dtype
from spyre_shims.reference import Tile, data_index_symbols

from spyre_adapter.emulator.card import Where
from spyre_adapter.emulator.lx_state import LxState
from spyre_adapter.model.checker_rules import enabled
from spyre_adapter.model.program import Lx, Operand
from spyre_adapter.model.rules import EmulatorError

__all__ = ["NotBatchable", "LxMemory", "REPLAY_COMPILED"]

#: Replayed vector steps run compiled: loads and stores resolved once, the body
#: a flat list of steps (False: interpreted every launch, for A/B measurements).
REPLAY_COMPILED = True


class NotBatchable(Exception):
    """A group of equal steps whose operands do not lie as one strided view; the caller runs
    the steps one by one instead."""


class LxMemory:
    """A vector step's loads and stores against its LX operands, on one core or
    stacked over a core range."""

    def __init__(self, lx: LxState, where: Where, ops: Sequence[Operand] | Sequence[Sequence[Operand]],
                 step: int, kernel: LoopKernel, targets: Mapping[int, Lx] | None = None) -> None:
        #: the launch's LX (a replayed step's memory is handed each launch's)
        self.lx = lx
        self.where, self.step, self.kernel = where, step, kernel
        self.batched = not isinstance(where, int)
        # per position: one operand (single core) or the per-core operands of the batch
        if self.batched:
            per_core = list(ops)  # type: ignore[arg-type]
            self.ops = {o.pos: [c_ops[k] for c_ops in per_core] for k, o in enumerate(per_core[0])}  # type: ignore[index]
        else:
            self.ops = {o.pos: [o] for o in ops}  # type: ignore[union-attr]
        self.targets = targets or {}
        #: a replayed step's memory keeps its windows and gather indices (the
        #: tile and operands are the same every launch; a masked gather's
        #: indices are kept for the very mask tensor they were built under)
        self.memo: dict[Any, Any] | None = None
        #: and the body values that depend only on the tile (evaluate's ``memo``)
        self.values: dict[int, Any] | None = None
        #: and, once replayed, how each body position loads and stores
        #: (resolved on the first replay; a load's under the mask it saw)
        self.fast: dict[int, Any] | None = None
        #: and the step's evaluation compiled to a flat list of steps
        self.plan: Callable[[], dict[int, Any]] | None = None

    def _core(self) -> int:
        return self.where if isinstance(self.where, int) else self.where[0]

    def _fail(self, kind: str, name: str, detail: str) -> EmulatorError:
        return EmulatorError(kind, self.lx.kernel, self._core(), self.step, name, detail)

    def _window(self, ops: list[Operand], name: str, index: sympy.Expr, tile: Tile, shape: Sequence[int]) -> tuple[Any, Any]:
        """(strided view over ``shape``, its LX view) for an affine access of a window, or (None, None)."""
        if self.memo is None:
            return self._find_window(ops, index, tile, shape)
        key = ("window", index, tuple(shape), ops[0].lx, ops[0].base)
        found = self.memo.get(key)
        if found is None:
            found = self.memo[key] = self._find_window(ops, index, tile, shape)
        return found

    def _find_window(self, ops: list[Operand], index: sympy.Expr, tile: Tile, shape: Sequence[int]) -> tuple[Any, Any]:
        aff = tile.affine(index)
        if aff is None or any(c < 0 for c in aff[1]):
            return None, None
        start, coeffs = aff
        lx = ops[0].lx
        n = lx.sizes[0]
        if self.batched:
            if any(o.lx != lx for o in ops):
                raise NotBatchable()
            rel_all = start - torch.tensor([o.base for o in ops], dtype=torch.int64)
            if bool((rel_all != rel_all[0]).any()):
                return None, None  # each core reads its own part of the window: a batched gather
            rel = int(rel_all[0])
            inner = shape[1:]
        else:
            rel = int(start) - ops[0].base
            inner = shape
        last = rel + sum(c * (k - 1) for c, k in zip(coeffs, inner) if k > 0)
        if rel < 0 or last >= n:
            return None, None
        strides = [c if k > 1 else 0 for c, k in zip(coeffs, inner)]
        sub = Lx(lx.addr + rel * lx.itemsize, lx.dtype, tuple(inner), tuple(strides))
        return self.lx.view(self.where, sub), sub

    def _gather_idx(self, ops: list[Operand], name: str, index: sympy.Expr, tile: Tile, keep: bool,
                    mask: torch.Tensor | None, shape: Sequence[int]) -> torch.Tensor:
        if self.memo is None:
            return self._find_gather_idx(ops, name, index, tile, keep, mask, shape)
        # A tile-constant mask is the same tensor every launch (evaluate's memo);
        # one computed from data is new each time and misses.
        if self._data_indexed(index):
            return self._find_gather_idx(ops, name, index, tile, keep, mask, shape)
        key = ("gather", index, keep, tuple(shape), ops[0].lx, ops[0].base)
        found = self.memo.get(key)
        if found is None or found[0] is not mask:
            found = self.memo[key] = (mask, self._find_gather_idx(ops, name, index, tile, keep, mask, shape))
        return found[1]

    def _find_gather_idx(self, ops: list[Operand], name: str, index: sympy.Expr, tile: Tile, keep: bool,
                         mask: torch.Tensor | None, shape: Sequence[int]) -> torch.Tensor:
        idx = tile.indices(index, keep=keep).expand(tuple(shape))
        if self.batched:
            bases = torch.tensor([o.base for o in ops], dtype=torch.int64).view(-1, *[1] * (len(shape) - 1))
            idx = idx - bases
        else:
            idx = idx - ops[0].base
        n = ops[0].lx.sizes[0]
        if mask is None and (idx.numel() == 0 or (int(idx.amin()) >= 0 and int(idx.amax()) < n)):
            return idx
        bad = (idx < 0) | (idx >= n)
        if mask is not None:
            m = mask.bool().expand(tuple(shape))
            bad = bad & m
            idx = torch.where(m, idx, torch.zeros((), dtype=idx.dtype))
        if bool(bad.any()):
            raise self._fail("read outside its LX window", name,
                             f"element {int(idx[bad].flatten()[0]) + ops[0].base} not in the window of {n} at {ops[0].base}")
        return idx

    def _flat_window(self, ops: list[Operand]) -> tuple[torch.Tensor, torch.Tensor]:
        lx = ops[0].lx
        if self.batched and any(o.lx != lx for o in ops):
            raise NotBatchable()
        return self.lx.view(self.where, lx), self.lx.card.element_stamps(self.where, lx)

    def load(self, pos: int, name: str, index: sympy.Expr, tile: Tile, mask: torch.Tensor | None) -> torch.Tensor:
        if pos in self.targets:  # address generation: record the DRAM index, value not needed
            self._record_target(pos, index, tile, mask)
            return torch.zeros((), dtype=torch_dtype(self.lx.dtypes.get(name, "float32")))
        fast = self.fast if REPLAY_COMPILED else None
        if fast is not None:
            hit = fast.get(pos)
            if hit is not None and hit[0] is mask:
                return hit[1]()
        read = self._reader(pos, name, index, tile, mask)
        if fast is not None and not self._data_indexed(index):
            fast[pos] = (mask, read)
        return read()

    def _data_indexed(self, index: sympy.Expr) -> bool:
        """Whether ``index`` goes through a value read from data (an ``indirect``):
        its reader must not be kept from one launch to the next."""
        return bool(sidx.free_symbols(index) & data_index_symbols(self.kernel.body))

    def _reader(self, pos: int, name: str, index: sympy.Expr, tile: Tile,
                mask: torch.Tensor | None) -> Callable[[], torch.Tensor]:
        """How the load at ``pos`` reads (its checks done now): a view of LX, or a
        gather through kept indices."""
        ops = self.ops.get(pos)
        if ops is None:
            if self.targets:
                return lambda: torch.zeros((), dtype=torch_dtype(self.lx.dtypes.get(name, "float32")))
            raise self._fail("missing operand", name, f"load at body position {pos} has no LX operand")
        shape = list(tile.shape)
        op = ops[0]
        if op.kind == "tile":
            if self.batched and any(o.lx != op.lx for o in ops):
                raise NotBatchable()
            if list(op.lx.sizes) != shape[tile.lead:]:
                raise self._fail("operand shape mismatch", name, f"LX tile {list(op.lx.sizes)} for tile {shape}")
            view = self.lx.view(self.where, op.lx)
            self.lx.check_written(self.where, op.lx, self.step, name, mask)
            return lambda: view
        view, sub = self._window(ops, name, index, tile, shape)
        if view is not None:
            self.lx.check_written(self.where, sub, self.step, name, mask)
            return lambda: view
        flat, stamps = self._flat_window(ops)
        idx = self._gather_idx(ops, name, index, tile, False, mask, shape)
        if self.lx.checking:
            written = (stamps == self.lx.epoch).all(-1)
            ok = written.gather(-1, idx.reshape(idx.shape[0], -1)).reshape(idx.shape) if self.batched \
                else written.take(idx)
            if mask is not None:
                ok = ok | ~mask.bool().expand(tuple(shape))
            if not bool(ok.all()) and enabled("unwritten-lx"):
                raise self._fail("read of unwritten LX", name, f"window element {int(idx[~ok].flatten()[0])}")
        if self.batched:
            rows = idx.reshape(idx.shape[0], -1)
            return lambda: flat.gather(-1, rows).reshape(idx.shape)
        return lambda: flat.take(idx)

    def _record_target(self, pos: int, index: sympy.Expr, tile: Tile, mask: torch.Tensor | None,
                       keep: bool = False) -> None:
        lx = self.targets[pos]
        shape = tile.keep_shape() if keep else list(tile.shape)
        idx = tile.indices(index, keep=keep).expand(tuple(shape))
        if mask is not None:
            idx = torch.where(mask.bool().expand(tuple(shape)), idx, torch.full((), -1, dtype=torch.int64))
        out = self.lx.view(self.where, lx)
        out.copy_(idx.reshape(out.shape))
        self.lx.mark(self.where, lx)

    def store(self, pos: int, name: str, index: sympy.Expr, value: torch.Tensor, tile: Tile, reduced: bool,
              mode: str | None) -> None:
        if pos in self.targets:
            self._record_target(pos, index, tile, None, keep=reduced)
            return
        if self.targets:
            return  # address generation stores nothing
        fast = self.fast if REPLAY_COMPILED else None
        write = fast.get(pos) if fast is not None else None
        if write is None:
            write = self._writer(pos, name, index, tile, reduced, mode)
            if fast is not None:
                fast[pos] = write
        write(value)

    def _writer(self, pos: int, name: str, index: sympy.Expr, tile: Tile, reduced: bool,
                mode: str | None) -> Callable[[torch.Tensor], None]:
        """How the store at ``pos`` writes a value: into a view of LX, or scattered
        through kept indices; LX stamped as written when the launch is checked."""
        ops = self.ops.get(pos)
        if ops is None:
            raise self._fail("missing operand", name, f"store at body position {pos} has no LX operand")
        shape = tile.keep_shape() if reduced else list(tile.shape)
        op = ops[0]
        dt = torch_dtype(op.lx.dtype)
        size = tuple(shape)
        checking = self.lx.checking

        def cast(value: torch.Tensor) -> torch.Tensor:
            v = torch.as_tensor(value)
            v = v if v.dtype == dt else v.to(dt)
            return v if v.shape == size else v.expand(size)
        if op.kind == "tile":
            if self.batched and any(o.lx != op.lx for o in ops):
                raise NotBatchable()
            if list(op.lx.sizes) != shape[tile.lead:]:
                raise self._fail("operand shape mismatch", name, f"LX tile {list(op.lx.sizes)} for tile {shape}")
            # One LX element per tile point: an accumulating store's adding
            # happens in DRAM (DmaScatter/DmaStore with accumulate).
            view, sub = self.lx.view(self.where, op.lx), op.lx
        else:
            view, sub = (None, None) if mode == "atomic_add" else self._window(ops, name, index, tile, shape)
        if view is not None:
            def write_view(value: torch.Tensor) -> None:
                view.copy_(cast(value))
                if checking:
                    self.lx.mark(self.where, sub)
            return write_view
        flat, stamps = self._flat_window(ops)
        idx = self._gather_idx(ops, name, index, tile, reduced, None, shape)
        add = mode == "atomic_add"
        if self.batched:
            rows = idx.reshape(idx.shape[0], -1)
            st = stamps.reshape(stamps.shape[0], -1, stamps.shape[-1])
            st_rows = rows.unsqueeze(-1).expand(-1, -1, st.shape[-1])

            def scatter_rows(value: torch.Tensor) -> None:
                v = cast(value).reshape(rows.shape)
                flat.scatter_add_(-1, rows, v) if add else flat.scatter_(-1, rows, v)
                if checking:
                    st.scatter_(1, st_rows, torch.full((), self.lx.epoch, dtype=torch.uint8).expand(st_rows.shape))
            return scatter_rows
        at = (idx.reshape(-1),)

        def scatter(value: torch.Tensor) -> None:
            flat.index_put_(at, cast(value).reshape(-1), accumulate=add)
            if checking:
                stamps[at[0]] = self.lx.epoch
        return scatter
