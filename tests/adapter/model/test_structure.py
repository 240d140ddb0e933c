"""A kernel's structure is the same whatever its run-time size symbols are
named: releases number Dynamo's symbols differently (torch 2.6 names the
first size it meets ``s0``, later releases the first input's), and identical
layers have symbols of their own."""

from __future__ import annotations

import sympy

from spyre_shims import index as sidx
from spyre_shims.kernel_ir import BufferSpec, ExternKernel

from spyre_adapter.model.structure import structure_digest, structure_sizes, symbol_names


def _scores(q_rows: str, width: str, k_rows: str) -> ExternKernel:
    """q @ k.T with run-time sizes named as given (rows of q, the shared width, rows of k)."""
    m, d, n = (sidx.index_symbol(x) for x in (q_rows, width, k_rows))
    one, zero = sympy.Integer(1), sympy.Integer(0)
    q = BufferSpec("q", "float32", (m, d), (d, one), zero, m * d, "input")
    kt = BufferSpec("kt", "float32", (d, n), (one, d), zero, d * n, "input")
    out = BufferSpec("out", "float32", (m, n), (n, one), zero, m * n, "output")
    return ExternKernel("scores", "mm", (q, kt), out, ("q", "kt", "out"),
                        symbols=tuple(sorted({q_rows, width, k_rows})))


def test_symbols_are_positional_by_first_use_not_by_name() -> None:
    """torch 2.6's two score kernels of one graph: (s2, s1, s0) and (s2, s1, s3).
    Sorted by name, s2 is the last symbol of one and the first of the other."""
    a, b = _scores("s2", "s1", "s0"), _scores("s2", "s1", "s3")
    assert symbol_names(a) == ("s2", "s1", "s0") and symbol_names(b) == ("s2", "s1", "s3")
    assert structure_digest(a) == structure_digest(b)
    s = {n: sidx.index_symbol(n) for n in ("s0", "s1", "s2", "s3")}
    assert structure_sizes(a, {s["s2"]: 4, s["s1"]: 64, s["s0"]: 9}) == \
        structure_sizes(b, {s["s2"]: 4, s["s1"]: 64, s["s3"]: 9})
    # the same sizes in other roles are another binding
    assert structure_sizes(a, {s["s2"]: 9, s["s1"]: 64, s["s0"]: 4}) != \
        structure_sizes(b, {s["s2"]: 4, s["s1"]: 64, s["s3"]: 9})


def test_kernels_whose_symbols_play_other_roles_differ() -> None:
    """q's rows and k's rows are different roles: a kernel whose width is the
    first input's rows is another structure, not a renaming."""
    a = _scores("s0", "s1", "s2")
    m, d = sidx.index_symbol("s0"), sidx.index_symbol("s1")
    one, zero = sympy.Integer(1), sympy.Integer(0)
    square = ExternKernel("scores", "mm", (BufferSpec("q", "float32", (m, d), (d, one), zero, m * d, "input"),
                                           BufferSpec("kt", "float32", (d, m), (one, d), zero, d * m, "input")),
                          BufferSpec("out", "float32", (m, m), (m, one), zero, m * m, "output"),
                          ("q", "kt", "out"), symbols=("s0", "s1"))
    assert structure_digest(a) != structure_digest(square)
