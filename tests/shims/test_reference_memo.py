"""Tile-constant values of a kernel body: which positions they are, and that an
evaluation reusing them (as an emulator replaying a step does) computes what a
fresh evaluation computes, on new data every time. The same for an evaluation
compiled once and re-run (``compile_evaluation``)."""

from __future__ import annotations

import pytest
import torch

from spyre_shims.kernel_ir import Instr, Ref
from spyre_shims.reference import (FlatMemory, KernelFault, Tile, compile_evaluation, data_index_symbols, evaluate,
                                   full_box, tile_constant_positions)
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
    assert data_index_symbols(body) == {K.sidx.index_symbol("tmp0")}
    assert data_index_symbols(K.rotate_half(8, 2, 16).kernels[0].body) == frozenset()


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


def _gather_buffers(rows: int, cols: int, choices: int, seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {"x": torch.randn(rows * cols, generator=g), "idx": torch.randint(0, choices, (rows,), generator=g),
            "w": torch.randn(rows * choices, generator=g), "t": torch.zeros(rows * cols)}


#: (loop kernel, buffers for a seed, phase): masks from index expressions, a
#: data-dependent index, a reduction's partial phase, a chain of rounded ops
COMPILED = {
    "rotate_half": lambda: (K.rotate_half(8, 2, 32).kernels[0], lambda s: K.buffers(K.rotate_half(8, 2, 32), s), "all"),
    "gather": lambda: (K.gather_scale_row_sum(8, 64).kernels[0], lambda s: _gather_buffers(8, 64, 4, s), "all"),
    "row_sum_partial": lambda: (K.row_sum(4, 256).kernels[0], lambda s: K.buffers(K.row_sum(4, 256), s), "partial"),
    "row_sum": lambda: (K.row_sum(4, 256).kernels[0], lambda s: K.buffers(K.row_sum(4, 256), s), "all"),
    "exp_chain": lambda: (K.exp_chain(4, 64, 3).kernels[0], lambda s: K.buffers(K.exp_chain(4, 64, 3), s), "all"),
}


@pytest.mark.parametrize("case", sorted(COMPILED))
def test_a_compiled_evaluation_rerun_on_new_data_matches_fresh_evaluations(case: str) -> None:
    """Compiled once over buffers whose contents then change in place (an
    emulator's LX between launches): every run stores, and returns as partials,
    exactly what a fresh evaluation of the same data does."""
    lk, make, phase = COMPILED[case]()
    kept = make(0)
    memo: dict[int, object] = {}
    run = compile_evaluation(lk, FlatMemory(kept), Tile(lk, full_box(lk)), phase=phase, memo=memo)
    for seed in range(4):
        fresh = make(seed)
        for name, t in fresh.items():
            kept[name].copy_(t)
        want = evaluate(lk, FlatMemory(fresh), Tile(lk, full_box(lk)), phase=phase)
        got = run()
        assert got.keys() == want.keys()
        for pos in want:
            for g, w in zip(got[pos], want[pos]):
                assert torch.equal(g, w)
        for name in fresh:
            assert torch.equal(kept[name], fresh[name]), name
        assert set(memo) == tile_constant_positions(lk.body)


def test_a_compiled_evaluation_checks_its_data_on_every_run() -> None:
    """A data-dependent index is bounds-checked each run, not only when compiled:
    a later run with an index out of range is a KernelFault."""
    lk = K.gather_scale_row_sum(8, 64).kernels[0]
    bufs = _gather_buffers(8, 64, 4, 0)
    run = compile_evaluation(lk, FlatMemory(bufs), Tile(lk, full_box(lk)), memo={})
    run()
    bufs["idx"][3] = 4  # one past the 4 routing choices
    with pytest.raises(KernelFault, match="indirect index"):
        run()
