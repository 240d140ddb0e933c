"""spyre_shims.index: the index language's integer functions, its JSON tree,
affine analysis and vectorised evaluation, against Python's own arithmetic."""

from __future__ import annotations

import sympy
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from spyre_shims import index as sidx

I0, I1 = sidx.index_symbol("i0"), sidx.index_symbol("i1")
ints = st.integers(-10_000, 10_000)
nonzero = ints.filter(lambda v: v != 0)


@given(ints, nonzero)
def test_floordiv_and_mod_fold_like_python(a: int, b: int) -> None:
    assert int(sidx.FloorDiv(sympy.Integer(a), sympy.Integer(b))) == a // b
    assert int(sidx.IndexMod(sympy.Integer(a), sympy.Integer(b))) == a % b


def _exprs() -> st.SearchStrategy[sympy.Expr]:
    leaves = st.one_of(st.sampled_from([I0, I1]), st.integers(-50, 50).map(sympy.Integer))
    return st.recursive(leaves, lambda e: st.one_of(
        st.tuples(e, e).map(lambda t: t[0] + t[1]),
        st.tuples(e, st.integers(-5, 5)).map(lambda t: t[0] * t[1]),
        st.tuples(e, st.integers(1, 9)).map(lambda t: sidx.FloorDiv(t[0], t[1])),
        st.tuples(e, st.integers(1, 9)).map(lambda t: sidx.IndexMod(t[0], t[1])),
        st.tuples(e, e).map(lambda t: sympy.Min(t[0], t[1])),
        st.tuples(e, e).map(lambda t: sympy.Max(t[0], t[1])),
    ), max_leaves=8)


@settings(max_examples=60, deadline=None)
@given(_exprs())
def test_tree_round_trip_keeps_the_value_and_is_stable(expr: sympy.Expr) -> None:
    back = sidx.from_tree(sidx.to_tree(expr))
    assert sidx.parse(sidx.to_json(expr)) == back
    assert sidx.from_tree(sidx.to_tree(back)) == back  # exact on what reading gives
    # Reading re-evaluates every node: a node sympy built before its arguments
    # simplified (Max(i0, FloorDiv(4*i0, 2)) whose FloorDiv became 2*i0) comes
    # back simplified, with the same value everywhere.
    for a, b in ((0, 0), (1, 0), (3, 7), (40, 1), (17, 33)):
        assert int(back.subs({I0: a, I1: b})) == int(expr.subs({I0: a, I1: b}))


def test_tree_round_trip_is_exact_on_evaluated_expressions() -> None:
    for expr in (I0 * 64 + I1, sidx.FloorDiv(I0, 4) * 8 + sidx.IndexMod(I1, 3), sympy.Min(I0, I1 + 2),
                 sympy.Max(I0 - 5, 0) * 3):
        assert sidx.from_tree(sidx.to_tree(expr)) == expr


@settings(max_examples=60, deadline=None)
@given(_exprs(), st.integers(0, 40), st.integers(0, 40))
def test_compiled_evaluation_matches_substitution(expr: sympy.Expr, a: int, b: int) -> None:
    fn = sidx.compile_index(expr)
    want = int(expr.subs({I0: a, I1: b}))
    assert int(fn({I0: a, I1: b})) == want
    # Vectorised over int64 tensors: element k is the scalar result at (a + k, b).
    many = fn({I0: torch.arange(a, a + 5), I1: torch.tensor(b)})
    assert [int(v) for v in torch.as_tensor(many).expand(5)] == [int(expr.subs({I0: a + k, I1: b})) for k in range(5)]


def test_affine_reads_coefficients_and_refuses_the_rest() -> None:
    assert sidx.affine(3 * I0 + 64 * I1 + 7, [I0, I1]) == (7, [3, 64])
    assert sidx.affine(sympy.Integer(5), [I0]) == (5, [0])
    assert sidx.affine(sidx.FloorDiv(I0, 2), [I0]) is None
    assert sidx.affine(I0 * I1, [I0, I1]) is None
    assert sidx.affine(I0 + sidx.index_symbol("s0"), [I0]) is None  # a size symbol is not a variable


def test_text_is_never_an_index_expression() -> None:
    import pytest

    with pytest.raises(TypeError):
        sidx.as_expr("i0 + 1")
    assert sidx.free_symbols(I0 + 2 * I1) == {I0, I1}


def test_free_symbols_are_a_fresh_set_each_time() -> None:
    """The symbols are computed once per expression (planning asks again and
    again); a caller changing its set must not change the next caller's."""
    expr = I0 * 3 + sidx.index_symbol("s0")
    first = sidx.free_symbols(expr)
    first.add(I1)
    assert sidx.free_symbols(expr) == {I0, sidx.index_symbol("s0")}
    assert sidx.free_symbols(7) == set()
