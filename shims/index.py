"""Index expressions of the Kernel IR: plain sympy plus two integer functions.

Inductor's own sympy functions (``FloorDiv``, ``ModularIndexing``, ``CleanDiv``,
``PythonMod``...) move and change between releases, so the stable IR uses only
sympy's core classes and the two functions defined here. Expressions serialise
with :func:`sympy.srepr` and come back with :func:`parse`.

Index symbols follow a naming convention the whole stack relies on:
``i<k>`` iteration variables, ``r<k>`` reduction variables, ``v<k>`` indirect
(data-dependent) indices, anything else a size symbol bound at run time.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any, cast

import sympy

__all__ = [
    "FloorDiv",
    "IndexMod",
    "index_symbol",
    "parse",
    "to_json",
    "affine",
    "compile_index",
    "free_symbols",
]


class FloorDiv(sympy.Function):  # type: ignore[misc]  # sympy is untyped
    """Integer division rounding toward negative infinity (Python ``//``)."""

    is_integer = True
    nargs = 2

    @classmethod
    def eval(cls, a: sympy.Expr, b: sympy.Expr) -> sympy.Expr | None:
        if b == 1:
            return a
        if a == 0:
            return sympy.Integer(0)
        if a.is_Integer and b.is_Integer:
            return sympy.Integer(int(a) // int(b))
        return None


class IndexMod(sympy.Function):  # type: ignore[misc]
    """Integer remainder with the sign of the divisor (Python ``%``)."""

    is_integer = True
    nargs = 2

    @classmethod
    def eval(cls, a: sympy.Expr, b: sympy.Expr) -> sympy.Expr | None:
        if b == 1 or a == 0:
            return sympy.Integer(0)
        if a.is_Integer and b.is_Integer:
            return sympy.Integer(int(a) % int(b))
        return None


def index_symbol(name: str) -> sympy.Symbol:
    """The canonical symbol for ``name`` (integer, non-negative)."""
    return sympy.Symbol(name, integer=True, nonnegative=True)


_PARSE_NS: dict[str, Any] = {**vars(sympy), "FloorDiv": FloorDiv, "IndexMod": IndexMod}


def to_json(expr: sympy.Expr) -> str:
    """Serialise an index expression (exact, assumptions included)."""
    return cast(str, sympy.srepr(expr))


@functools.lru_cache(maxsize=4096)
def parse(text: str) -> sympy.Expr:
    """Inverse of :func:`to_json`."""
    return sympy.sympify(eval(text, dict(_PARSE_NS)))  # noqa: S307 - srepr text from our own IR


def free_symbols(expr: sympy.Expr) -> set[sympy.Symbol]:
    """Symbols an expression depends on."""
    return set(expr.free_symbols) if isinstance(expr, sympy.Basic) else set()


def affine(expr: sympy.Expr, variables: Sequence[sympy.Symbol]) -> tuple[int, list[int]] | None:
    """``(offset, [coeff per variable])`` when ``expr`` is affine with integer
    coefficients in ``variables`` and has no other symbol; else ``None``."""
    expr = sympy.sympify(expr)
    if expr.is_Integer:
        return int(expr), [0] * len(variables)
    if not (expr.is_Add or expr.is_Mul or expr.is_Symbol):
        return None
    coeffs = dict.fromkeys(variables, 0)
    offset = 0
    for term, coeff in expr.as_coefficients_dict().items():
        if not coeff.is_Integer:
            return None
        if term == 1:
            offset += int(coeff)
        elif term in coeffs:
            coeffs[term] += int(coeff)
        else:
            return None
    return offset, [coeffs[v] for v in variables]


class _Printer:
    """Prints an index expression as Python that works on ints and int tensors."""

    def __init__(self) -> None:
        self.names: dict[sympy.Symbol, str] = {}

    def __call__(self, e: sympy.Expr) -> str:
        if e.is_Integer:
            return str(int(e))
        if e.is_Symbol:
            return self.names.setdefault(e, f"_a{len(self.names)}")
        if isinstance(e, FloorDiv):
            return f"({self(e.args[0])} // {self(e.args[1])})"
        if isinstance(e, IndexMod):
            return f"({self(e.args[0])} % {self(e.args[1])})"
        if e.is_Add:
            return "(" + " + ".join(self(a) for a in e.args) + ")"
        if e.is_Mul:
            if any(not (a.is_Integer or not a.is_Number) for a in e.args):
                raise ValueError(f"non-integer coefficient in index expression {e}")
            return "(" + " * ".join(self(a) for a in e.args) + ")"
        if e.is_Pow and e.exp.is_Integer and int(e.exp) >= 0:
            return f"({self(e.base)} ** {int(e.exp)})"
        if isinstance(e, sympy.Abs):
            return f"abs({self(e.args[0])})"
        if isinstance(e, sympy.Min):
            return "_min(" + ", ".join(self(a) for a in e.args) + ")"
        if isinstance(e, sympy.Max):
            return "_max(" + ", ".join(self(a) for a in e.args) + ")"
        raise ValueError(f"unsupported index construct {type(e).__name__}: {e}")


def _min(*xs: Any) -> Any:
    import torch

    out = xs[0]
    for x in xs[1:]:
        out = torch.minimum(torch.as_tensor(out), torch.as_tensor(x)) if _any_tensor(out, x) else min(out, x)
    return out


def _max(*xs: Any) -> Any:
    import torch

    out = xs[0]
    for x in xs[1:]:
        out = torch.maximum(torch.as_tensor(out), torch.as_tensor(x)) if _any_tensor(out, x) else max(out, x)
    return out


def _any_tensor(*xs: Any) -> bool:
    import torch

    return any(isinstance(x, torch.Tensor) for x in xs)


@functools.lru_cache(maxsize=4096)
def _compile(expr: sympy.Expr) -> tuple[Any, tuple[sympy.Symbol, ...]]:
    printer = _Printer()
    body = printer(expr)
    params = tuple(printer.names)
    src = f"lambda {', '.join(printer.names[p] for p in params)}: {body}"
    fn = eval(src, {"_min": _min, "_max": _max})  # noqa: S307 - generated from a validated tree
    return fn, params


def compile_index(expr: sympy.Expr) -> Any:
    """A callable ``f(env)`` evaluating ``expr`` with ``env[symbol]`` bound to ints
    or int64 tensors (broadcasting), vectorised: one tensor op per tree node."""
    fn, params = _compile(sympy.sympify(expr))

    def evaluate(env: Mapping[sympy.Symbol, Any]) -> Any:
        return fn(*(env[p] for p in params))

    return evaluate
