"""Tile-constant values of a kernel body: which positions they are, and that an
evaluation reusing them (as an emulator replaying a step does) computes what a
fresh evaluation computes, on new data every time."""

from __future__ import annotations

import torch

from spyre_shims.kernel_ir import Instr, LoopKernel, Ref
from spyre_shims.reference import FlatMemory, Tile, evaluate, tile_constant_positions
from tests.support import kernels as K


def test_masks_from_index_expressions_are_tile_constant_and_data_is_not() -> None:
    body = K.rotate_half(8, 2, 16).kernels[0].body
    constant = tile_constant_positions(body)
    ops = {pos: body[pos].op for pos in constant}
    # the index expression, the constants and the two comparisons built from them
    assert ops == {3: "index_expr", 4: "constant", 5: "lt", 8: "constant", 10: "ge"}
    assert not any(body[pos].op in ("load", "store", "masked", "where") for pos in constant)


def test_an_index_read_from_data_is_not_tile_constant() -> None:
    i0 = K.I0
    body = (Instr("load", ("idx", i0), "int64"),
            Instr("indirect", (Ref(0), 16, True, False, "tmp0"), "int64"),
            Instr("index_expr", (K.sidx.index_symbol("tmp0") * 2, "int64"), "int64"),
            Instr("index_expr", (i0 * 2, "int64"), "int64"),
            Instr("add", (Ref(2), Ref(3)), "int64"),
            Instr("mul", (Ref(3), Ref(3)), "int64"))
    assert tile_constant_positions(body) == {3, 5}


def test_evaluation_with_a_memo_matches_a_fresh_one_on_new_data() -> None:
    kernel = K.rotate_half(16, 2, 32)
    lk = kernel.kernels[0]
    memo: dict[int, object] = {}
    tile = Tile(lk, ((0, 16), (0, 2), (0, 32)))
    for seed in range(3):
        fresh, kept = K.buffers(kernel, seed), K.buffers(kernel, seed)
        evaluate(lk, FlatMemory(fresh), Tile(lk, tile.box))
        evaluate(lk, FlatMemory(kept), tile, memo=memo)
        assert torch.equal(fresh["out"], kept["out"])
        assert set(memo) == tile_constant_positions(lk.body)


def test_a_memo_is_read_not_recomputed() -> None:
    """A planted wrong mask in the memo changes the result: later evaluations
    take the kept values instead of recomputing them."""
    kernel = K.rotate_half(4, 1, 16)
    lk = kernel.kernels[0]
    tile, memo = Tile(lk, ((0, 4), (0, 1), (0, 16))), {}
    bufs = K.buffers(kernel, 0)
    evaluate(lk, FlatMemory(bufs), tile, memo=memo)
    right = bufs["out"].clone()
    memo[5] = torch.zeros_like(memo[5])  # the first-half mask, planted all false
    evaluate(lk, FlatMemory(bufs), tile, memo=memo)
    assert not torch.equal(bufs["out"], right)
