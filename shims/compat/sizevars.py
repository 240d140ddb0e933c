"""Symbolic sizes: the size-variable allocator and sympy helpers, plus version-normalised sizevars queries.

Tier 2 of the stable API (``spyre_shims.compat``): the names below are
Inductor's own objects on the installed release (classes keep ``isinstance``
and subclassing), resolved on first access from the per-release table
generated from the release wheels (``surface/compat_table.json``). Where a
release moved or renamed one, the table points at its home there. Their
members are Inductor's and are not promised; the names are, on every release
2.6 - 2.15.
"""

from __future__ import annotations

from typing import Any

import sympy

from .._torch import inductor as _inductor
from ._lazy import resolve as _resolve

__all__ = [
    'SizeVarAllocator',
    'SimplifyIndexing',
    'sympy_index_symbol',
    'sympy_index_symbol_with_prefix',
    'sympy_product',
    'sympy_subs',
    'sympy_dot',
    'sympy_str',
    'convert_shape_to_inductor',
    'convert_shape_to_symint',
    'next_power_of_2',
    'FloorDiv',
    'ModularIndexing',
    'CeilDiv',
    'CleanDiv',
    'Identity',
    'join_dimensions',
    'size_hint',
    'size_hint_or_throw',
    'check_equals',
    'guard_int',
    'free_unbacked_symbols',
    'ceildiv',
]


def __getattr__(name: str) -> Any:
    return _resolve(__name__, name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


def _concrete(expr: Any) -> int | None:
    if isinstance(expr, bool):
        return None
    if isinstance(expr, int):
        return expr
    if isinstance(expr, sympy.Basic) and expr.is_Integer:
        return int(expr)
    return None


def size_hint(expr: Any, *, fallback: int | None = None, sizevars: Any = None) -> int:
    """A concrete value of ``expr`` for heuristics (``optimization_hint`` from 2.11,
    ``size_hint`` before). ``fallback`` is used for unbacked symbols."""
    value = _concrete(expr)
    if value is not None:
        return value
    return int(_inductor.sizevars_call("size_hint", sizevars, expr, fallback=fallback))


def size_hint_or_throw(expr: Any, *, sizevars: Any = None) -> int:
    """Like :func:`size_hint` but raises for unbacked symbols
    (``guarding_hint_or_throw`` from 2.12, ``size_hint_or_throw`` before)."""
    value = _concrete(expr)
    if value is not None:
        return value
    return int(_inductor.sizevars_call("size_hint_or_throw", sizevars, expr))


def check_equals(a: Any, b: Any, *, sizevars: Any = None) -> None:
    """Assert ``a == b``, adding a guard when that needs one (``check_equals`` from
    2.9, ``guard_equals`` before). Raises ``AssertionError`` when they differ."""
    va, vb = _concrete(a), _concrete(b)
    if va is not None and vb is not None:
        if va != vb:
            raise AssertionError(f"check_equals: {va} != {vb}")
        return
    _inductor.sizevars_call("check_equals", sizevars, a, b)


def guard_int(expr: Any, *, sizevars: Any = None) -> int:
    """Specialise ``expr`` to its current integer value, adding a guard
    (``guard_int`` from 2.9, ``evaluate_static_shape`` before)."""
    value = _concrete(expr)
    if value is not None:
        return value
    return int(_inductor.sizevars_call("guard_int", sizevars, expr))


def free_unbacked_symbols(node: Any) -> set[Any]:
    """The unbacked (data-dependent) symbols an IR or scheduler node uses
    (``get_free_symbol_uses(unbacked_only=True)`` from 2.8,
    ``get_unbacked_symbol_uses()`` before)."""
    return _inductor.free_unbacked_symbols(node)


def ceildiv(numer: Any, denom: Any) -> Any:
    """``ceil(numer / denom)`` for integers or sympy expressions, as Inductor
    computes it (its ``ceildiv`` renamed the first parameter ``number`` in 2.8, so
    this passes both positionally)."""
    return _inductor.compat_ceildiv(numer, denom)
