"""A static footprint counted from its index's parts over disjoint variables
(the GQA head repeat ``128 * (h // 4)``, a rotate-half's ``i2 - 64``) equals
the one counted by evaluating the index at every point of the tile; the
planner of a full-size layer spent most of its time on the latter."""

from __future__ import annotations

import sympy
from hypothesis import given, settings
from hypothesis import strategies as st

from spyre_shims import kernel_ir as kir
from spyre_shims.index import FloorDiv, IndexMod
from spyre_shims.reference import Tile
from tests.support import kernels as K

from spyre_adapter.model.bodies import Access
from spyre_adapter.scheduler.loop_layout import _point_geometry, _summed_geometry

VARS = (K.I0, K.I1, K.I2, K.R0)


@st.composite
def terms(draw: st.DrawFn) -> sympy.Expr:
    v = draw(st.sampled_from(VARS))
    c = draw(st.sampled_from([1, 2, 3, 64, 128, 256, 1000, -1, -64]))
    form = draw(st.sampled_from(["lin", "div", "mod", "pair"]))
    d = draw(st.integers(1, 9))
    if form == "div":
        return c * FloorDiv(v, d)
    if form == "mod":
        return c * IndexMod(v, d)
    if form == "pair":  # couples two variables into one part
        w = draw(st.sampled_from(VARS))
        return c * FloorDiv(v + draw(st.integers(1, 40)) * w, d)
    return c * v


@settings(max_examples=300, deadline=None)
@given(st.lists(terms(), min_size=1, max_size=4), st.integers(-300, 300),
       st.lists(st.tuples(st.integers(0, 40), st.integers(1, 24)), min_size=4, max_size=4),
       st.booleans(), st.booleans(), st.integers(1, 60_000))
def test_summed_footprint_equals_the_pointwise_one(parts: list[sympy.Expr], const: int,
                                                    box: list[tuple[int, int]], masked: bool, reduced: bool,
                                                    n: int) -> None:
    index = sympy.Add(*parts) + const
    body = (kir.Instr("load", ("x", index), "float32"),)
    kernel = kir.LoopKernel("op0", tuple(sympy.Integer(a + e) for a, e in box[:3]), (sympy.Integer(sum(box[3])),),
                            body)
    tile = Tile(kernel, tuple((a, a + e) for a, e in box[:3]), red=((box[3][0], sum(box[3])),))
    acc = Access(0, "x", index, False, reduced, masked, False)
    shape = tuple(tile.keep_shape() if reduced else tile.shape)
    fast = _summed_geometry(tile, acc, shape, n)
    if fast is None:
        return
    slow = _point_geometry(tile, acc, shape, n)
    assert (fast.kind, fast.lo, fast.hi, fast.touched, fast.shape) == (slow.kind, slow.lo, slow.hi, slow.touched,
                                                                       slow.shape)


def test_a_gqa_rotate_half_load_is_counted_from_its_parts() -> None:
    """The load of a full-size layer's key rotation: 8 KV heads of 128, a query
    head's KV head ``h // 4``, the upper half of a head read at ``i2 - 64``;
    sparse (a tenth of its span) and counted exactly without a value per point."""
    index = 1024 * K.I1 + K.I2 + 128 * FloorDiv(K.I0, 4) - 64
    kernel = kir.LoopKernel("op0", (sympy.Integer(32), sympy.Integer(2048), sympy.Integer(128)), (),
                            (kir.Instr("load", ("k", index), "float16"),))
    tile = Tile(kernel, ((5, 6), (600, 664), (64, 128)))
    acc = Access(0, "k", index, False, False, True, False)
    n = 2048 * 1024
    assert tile.index_terms(index) is not None
    fast, slow = _summed_geometry(tile, acc, (1, 64, 64), n), _point_geometry(tile, acc, (1, 64, 64), n)
    assert fast is not None and fast.touched == 64 * 64 and (fast.lo, fast.hi) == (600 * 1024 + 128, 663 * 1024 + 192)
    assert (fast.lo, fast.hi, fast.touched) == (slow.lo, slow.hi, slow.touched)
