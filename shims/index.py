"""Index expressions of the Kernel IR: plain sympy plus two integer functions.

Inductor's own sympy functions (``FloorDiv``, ``ModularIndexing``, ``CleanDiv``,
``PythonMod``...) move and change between releases, so the stable IR uses only
sympy's core classes and the two functions defined here.

Index symbols follow a naming convention the whole stack relies on:
``i<k>`` iteration variables, ``r<k>`` reduction variables, ``v<k>`` indirect
(data-dependent) indices, anything else a size symbol bound at run time. Every
symbol is :func:`index_symbol` of its name (integer, non-negative).

Serialised form (:func:`to_tree`, :func:`to_json`): a JSON tree. A node is an
integer, a symbol's name, or a list ``[op, *operands]`` with ``op`` one of
``+ * ** // % min max abs`` (``//`` is :class:`FloorDiv`, ``%`` :class:`IndexMod`)
or ``["/", p, q]`` for a rational constant. Reading (:func:`from_tree`,
:func:`parse`) builds the expression with sympy's constructors from that tree
only; text is never evaluated. :func:`parse` also reads the ``sympy.srepr``
text of Kernel IR version 1, through the same whitelist.
"""

from __future__ import annotations

import ast
import functools
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any, Union

import sympy

__all__ = [
    "FloorDiv",
    "IndexMod",
    "Tree",
    "index_symbol",
    "as_expr",
    "to_tree",
    "from_tree",
    "from_srepr",
    "parse",
    "to_json",
    "affine",
    "compile_index",
    "free_symbols",
    "MAX_NODES",
    "MAX_DEPTH",
]

#: The serialised form of an index expression (see the module docstring).
Tree = Union[int, str, list[Any]]

#: Bounds on a tree read back: its node count and its nesting.
MAX_NODES = 10_000
MAX_DEPTH = 100
_MAX_ABS = 2**64  # integer constants (and results of constant folding)
_MAX_EXP = 64  # |exponent| of a power
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")


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
    return _index_symbol(name)


@functools.lru_cache(maxsize=4096)
def _index_symbol(name: str) -> sympy.Symbol:
    # Made once per name: sympy re-checks the assumptions on every construction,
    # and planning a decode step's programs asks for the same few names tens of
    # thousands of times.
    return sympy.Symbol(name, integer=True, nonnegative=True)


def as_expr(value: Any) -> sympy.Expr:
    """``value`` as an index expression: a sympy expression as it is, a Python
    int as :class:`sympy.Integer`. Text is refused (:class:`TypeError`): it is
    never parsed here (use :func:`parse` for serialised expressions)."""
    if isinstance(value, sympy.Basic):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return sympy.Integer(value)
    raise TypeError(f"expected an index expression (sympy expression or int), got {type(value).__name__}: "
                    f"{value!r:.60}")


# ----------------------------------------------------------------------------- writing

_OPS: dict[type, str] = {sympy.Add: "+", sympy.Mul: "*", sympy.Pow: "**", FloorDiv: "//", IndexMod: "%",
                         sympy.Min: "min", sympy.Max: "max", sympy.Abs: "abs"}


def to_tree(expr: Any) -> Tree:
    """The JSON tree of an index expression (:func:`from_tree` gives it back,
    re-evaluated: identical for an evaluated expression, of the same value for a
    node sympy built before its arguments simplified). Raises :class:`TypeError` for a construct outside the index language
    or a symbol that is not an :func:`index_symbol`."""
    e = as_expr(expr)
    if e.is_Integer:
        return int(e)
    if e.is_Rational:
        return ["/", int(e.p), int(e.q)]
    if e.is_Symbol:
        if e != index_symbol(e.name):
            raise TypeError(f"symbol {e.name!r} has other assumptions than an index symbol")
        return str(e.name)
    op = _OPS.get(type(e))
    if op is None:
        raise TypeError(f"{type(e).__name__} is not part of the index language: {e}")
    return [op, *(to_tree(a) for a in e.args)]


def to_json(expr: sympy.Expr) -> str:
    """Serialise an index expression: its tree (:func:`to_tree`) as JSON text."""
    return json.dumps(to_tree(expr), separators=(",", ":"))


# ----------------------------------------------------------------------------- reading


def _checked_int(value: Any) -> sympy.Integer:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"expected an integer, got {type(value).__name__}")
    if abs(value) > _MAX_ABS:
        raise ValueError(f"integer constant of {value.bit_length()} bits is out of range")
    return sympy.Integer(value)


def _power(*args: sympy.Expr) -> sympy.Expr:
    if len(args) != 2:
        raise ValueError(f"Pow takes 2 operands, got {len(args)}")
    base, exp = args
    if not exp.is_Integer or abs(int(exp)) > _MAX_EXP:
        raise ValueError(f"a power's exponent must be an integer of at most {_MAX_EXP} in magnitude")
    if base.is_Integer and abs(int(base)) > 1 and int(base).bit_length() * abs(int(exp)) > 2 * 64:
        raise ValueError("a constant power is out of range")
    return sympy.Pow(base, exp)


def _pair(fn: Any) -> Any:
    def build(*args: sympy.Expr) -> sympy.Expr:
        if len(args) != 2:
            raise ValueError(f"{fn.__name__} takes 2 operands, got {len(args)}")
        if args[1] == 0:
            raise ValueError(f"{fn.__name__} by zero")
        return fn(*args)

    return build


def _unary(fn: Any) -> Any:
    def build(*args: sympy.Expr) -> sympy.Expr:
        if len(args) != 1:
            raise ValueError(f"{fn.__name__} takes 1 operand, got {len(args)}")
        return fn(*args)

    return build


def _nary(fn: Any) -> Any:
    def build(*args: sympy.Expr) -> sympy.Expr:
        if not args:
            raise ValueError(f"{fn.__name__} needs operands")
        return fn(*args)

    return build


_BUILD: dict[str, Any] = {
    "+": _nary(sympy.Add), "*": _nary(sympy.Mul), "min": _nary(sympy.Min), "max": _nary(sympy.Max),
    "**": _power,
    "//": _pair(FloorDiv), "%": _pair(IndexMod), "abs": _unary(sympy.Abs),
}


class _TreeReader:
    def __init__(self) -> None:
        self.nodes = 0

    def __call__(self, node: Any, depth: int) -> sympy.Expr:
        self.nodes += 1
        if self.nodes > MAX_NODES:
            raise ValueError(f"index expression has more than {MAX_NODES} nodes")
        if depth > MAX_DEPTH:
            raise ValueError(f"index expression nested deeper than {MAX_DEPTH} levels")
        if isinstance(node, int) and not isinstance(node, bool):
            return _checked_int(node)
        if isinstance(node, str):
            if not _NAME.fullmatch(node):
                raise ValueError(f"{node[:40]!r} is not a symbol name")
            return index_symbol(node)
        if not isinstance(node, list) or not node or not isinstance(node[0], str):
            raise ValueError(f"expected an integer, a symbol name or [op, operands...], got {type(node).__name__}")
        op, operands = node[0], node[1:]
        if op == "/":
            if len(operands) != 2:
                raise ValueError("a rational constant is [\"/\", p, q]")
            p, q = (_checked_int(x) for x in operands)
            if q == 0:
                raise ValueError("rational constant with a zero denominator")
            return sympy.Rational(p, q)
        build = _BUILD.get(op)
        if build is None:
            raise ValueError(f"unknown operation {op[:20]!r} (expected one of / {' '.join(_BUILD)})")
        out = build(*(self(a, depth + 1) for a in operands))
        if out.is_Integer and abs(int(out)) > _MAX_ABS:
            raise ValueError("a constant in the expression is out of range")
        return out


def from_tree(tree: Any) -> sympy.Expr:
    """The index expression of a JSON tree (inverse of :func:`to_tree`). Raises
    :class:`ValueError` naming the problem for anything outside the index
    language, a malformed node, more than :data:`MAX_NODES` nodes, nesting
    deeper than :data:`MAX_DEPTH`, or constants beyond 64 bits."""
    return _TreeReader()(tree, 0)


#: The calls ``sympy.srepr`` writes for index expressions (Kernel IR version 1).
_SREPR_OPS = {"Add": "+", "Mul": "*", "Pow": "**", "FloorDiv": "//", "IndexMod": "%", "Min": "min", "Max": "max",
              "Abs": "abs"}
_ASSUMPTIONS = frozenset({"integer", "nonnegative", "positive", "negative", "nonpositive", "real", "finite",
                          "commutative", "zero", "nonzero", "rational", "complex", "extended_real"})


def _srepr_tree(node: ast.AST) -> Tree:
    """The tree of one ``sympy.srepr`` call, read by shape (nothing is evaluated)."""
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
        raise ValueError(f"unexpected {type(node).__name__} in a version-1 index expression")
    name, args = node.func.id, node.args
    if name == "Symbol":
        if len(args) != 1 or not isinstance(args[0], ast.Constant) or not isinstance(args[0].value, str):
            raise ValueError("Symbol takes one name")
        for kw in node.keywords:
            if kw.arg not in _ASSUMPTIONS or not isinstance(kw.value, ast.Constant) or not isinstance(kw.value.value, bool):
                raise ValueError(f"unexpected argument {kw.arg!r} of Symbol")
        return args[0].value
    if node.keywords:
        raise ValueError(f"unexpected keyword argument of {name}")
    if name in ("Integer", "Rational"):
        values = [_srepr_int(a) for a in args]
        if name == "Integer" and len(values) == 1:
            return values[0]
        if name == "Rational" and len(values) == 2:
            return ["/", *values]
        raise ValueError(f"{name} with {len(values)} arguments")
    op = _SREPR_OPS.get(name)
    if op is None:
        raise ValueError(f"{name[:20]!r} is not part of the index language")
    return [op, *(_srepr_tree(a) for a in args)]


def _srepr_int(node: ast.AST) -> int:
    negative = isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub)
    inner = node.operand if isinstance(node, ast.UnaryOp) and negative else node
    if not isinstance(inner, ast.Constant) or isinstance(inner.value, bool) or not isinstance(inner.value, int):
        raise ValueError("expected an integer literal")
    return -inner.value if negative else inner.value


def from_srepr(text: str) -> sympy.Expr:
    """An index expression from the ``sympy.srepr`` text Kernel IR version 1
    wrote, read by a whitelist of its calls (``Integer``, ``Rational``,
    ``Symbol``, ``Add``, ``Mul``, ``Pow``, ``FloorDiv``, ``IndexMod``, ``Min``,
    ``Max``, ``Abs``): the text is parsed, never evaluated."""
    if not isinstance(text, str):
        raise TypeError(f"expected text, got {type(text).__name__}")
    if len(text) > 64 * MAX_NODES:
        raise ValueError("version-1 index expression text is too long")
    try:
        tree = ast.parse(text, mode="eval")
    except (SyntaxError, RecursionError, MemoryError, ValueError):
        raise ValueError("version-1 index expression is not sympy.srepr text") from None
    return from_tree(_srepr_tree(tree.body))


@functools.lru_cache(maxsize=4096)
def parse(text: str) -> sympy.Expr:
    """Inverse of :func:`to_json` (also reads version-1 ``srepr`` text, see
    :func:`from_srepr`). Raises :class:`ValueError` for anything else."""
    if not isinstance(text, str):
        raise TypeError(f"expected text, got {type(text).__name__}")
    try:
        tree = json.loads(text)
    except (json.JSONDecodeError, RecursionError):
        return from_srepr(text)
    except ValueError as exc:  # e.g. an integer of thousands of digits
        raise ValueError(f"unreadable index expression ({exc})") from None
    return from_tree(tree)


def free_symbols(expr: sympy.Expr) -> set[sympy.Symbol]:
    """Symbols an expression depends on."""
    return set(_free_symbols(expr)) if isinstance(expr, sympy.Basic) else set()


@functools.lru_cache(maxsize=8192)
def _free_symbols(expr: sympy.Basic) -> frozenset[sympy.Symbol]:
    # sympy walks the whole tree on every access of free_symbols; planning and
    # tile binding ask again for the same expressions
    return frozenset(expr.free_symbols)


def affine(expr: sympy.Expr, variables: Sequence[sympy.Symbol]) -> tuple[int, list[int]] | None:
    """``(offset, [coeff per variable])`` when ``expr`` is affine with integer
    coefficients in ``variables`` and has no other symbol; else ``None``."""
    expr = as_expr(expr)
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
    fn, params = _compile(as_expr(expr))

    def evaluate(env: Mapping[sympy.Symbol, Any]) -> Any:
        return fn(*(env[p] for p in params))

    return evaluate
