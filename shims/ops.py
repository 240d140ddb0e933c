"""The stable op set of the Kernel IR, with executable reference semantics.

Each pointwise op is defined by a torch function over tensors in *compute
dtype* (float16/bfloat16 values are computed in float32, as Inductor's own
backends do) and by how its result dtype follows from its operands. Structural
ops (``load``, ``store``, ``reduction``...) are listed in :data:`STRUCTURAL` and
given meaning by :mod:`spyre_shims.reference`.

``scan(dtypes, values, combine)`` is the inclusive scan of a kernel's one
reduction dimension (cumsum, cumprod, logcumsumexp, cummax, cummin): ``values``
are one reference per component, ``combine`` the associative combine function
as its own small body - ``scan_arg`` 0..n-1 the earlier state, n..2n-1 the
later one, pointwise ops, and ``scan_result`` naming the n combined
components; ``getitem`` takes a component of the result.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import torch

__all__ = ["OpDef", "POINTWISE", "STRUCTURAL", "REDUCTIONS", "REDUCTION_ARITY", "is_known", "result_dtype", "dtype_name",
           "torch_dtype"]

ResultKind = Literal["promote", "float", "bool", "int", "first"]


@dataclass(frozen=True)
class OpDef:
    """A pointwise op: its arity, reference function and result-dtype rule."""

    name: str
    arity: int
    fn: Callable[..., torch.Tensor]
    result: ResultKind = "promote"


def _f(fn: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
    # Float-only math: integer operands are computed in float32 like torch does.
    def run(*xs: torch.Tensor) -> torch.Tensor:
        xs = tuple(x.float() if not x.is_floating_point() else x for x in xs)
        return fn(*xs)

    return run


def _sign_bit(x: torch.Tensor) -> torch.Tensor:
    return torch.signbit(x)


def _int_truediv(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return a.double() / b.double() if a.dtype == torch.int64 else a.float() / b.float()


def _shift_left(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.bitwise_left_shift(a, b)


def _shift_right(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.bitwise_right_shift(a, b)


_UNARY_FLOAT = {
    "exp": torch.exp, "exp2": torch.exp2, "expm1": torch.expm1, "log": torch.log, "log2": torch.log2,
    "log10": torch.log10, "log1p": torch.log1p, "sqrt": torch.sqrt, "rsqrt": torch.rsqrt,
    "sin": torch.sin, "cos": torch.cos, "tan": torch.tan, "asin": torch.asin, "acos": torch.acos,
    "atan": torch.atan, "sinh": torch.sinh, "cosh": torch.cosh, "tanh": torch.tanh,
    "asinh": torch.asinh, "acosh": torch.acosh, "atanh": torch.atanh, "erf": torch.erf,
    "erfc": torch.erfc, "erfinv": torch.erfinv, "sigmoid": torch.sigmoid, "lgamma": torch.lgamma,
    "digamma": torch.digamma, "reciprocal": torch.reciprocal, "i0": torch.special.i0,
    "i0e": torch.special.i0e, "i1": torch.special.i1, "i1e": torch.special.i1e,
    "ndtr": torch.special.ndtr, "ndtri": torch.special.ndtri, "log_ndtr": torch.special.log_ndtr,
    "erfcx": torch.special.erfcx, "bessel_j0": torch.special.bessel_j0,
    "bessel_j1": torch.special.bessel_j1, "bessel_y0": torch.special.bessel_y0,
    "bessel_y1": torch.special.bessel_y1, "modified_bessel_i0": torch.special.modified_bessel_i0,
    "modified_bessel_i1": torch.special.modified_bessel_i1,
    "modified_bessel_k0": torch.special.modified_bessel_k0,
    "modified_bessel_k1": torch.special.modified_bessel_k1,
    "scaled_modified_bessel_k0": torch.special.scaled_modified_bessel_k0,
    "scaled_modified_bessel_k1": torch.special.scaled_modified_bessel_k1,
    "spherical_bessel_j0": torch.special.spherical_bessel_j0, "airy_ai": torch.special.airy_ai,
}
_UNARY_SAME: dict[str, Callable[..., torch.Tensor]] = {
    "abs": torch.abs, "neg": torch.neg, "relu": torch.relu, "square": torch.square,
    "floor": torch.floor, "ceil": torch.ceil, "trunc": torch.trunc, "round": torch.round,
    "sign": torch.sign, "bitwise_not": torch.bitwise_not, "identity": lambda x: x,
}
_UNARY_BOOL = {
    "isinf": torch.isinf, "isnan": torch.isnan, "logical_not": torch.logical_not, "signbit": _sign_bit,
}
_BINARY: dict[str, Callable[..., torch.Tensor]] = {
    "add": torch.add, "sub": torch.sub, "mul": torch.mul, "maximum": torch.maximum,
    "minimum": torch.minimum, "bitwise_and": torch.bitwise_and, "bitwise_or": torch.bitwise_or,
    "bitwise_xor": torch.bitwise_xor, "and_": torch.bitwise_and, "or_": torch.bitwise_or,
    "xor": torch.bitwise_xor, "bitwise_left_shift": _shift_left, "bitwise_right_shift": _shift_right,
    "lshift": _shift_left, "rshift": _shift_right, "mod": torch.fmod, "fmod": torch.fmod,
    "remainder": torch.remainder, "copysign": torch.copysign, "nextafter": torch.nextafter,
    "floordiv": lambda a, b: torch.div(a, b, rounding_mode="floor"),
    "truncdiv": lambda a, b: torch.div(a, b, rounding_mode="trunc"),
    "mul_rn": torch.mul,
}
_BINARY_FLOAT = {
    "truediv": torch.true_divide, "div_rn": torch.true_divide, "pow": torch.pow, "atan2": torch.atan2,
    "hypot": torch.hypot, "ldexp": torch.ldexp, "polygamma": lambda n, x: torch.polygamma(int(n.flatten()[0]), x),
    "zeta": torch.special.zeta, "igamma": torch.igamma, "igammac": torch.igammac,
    "gammainc": torch.special.gammainc, "gammaincc": torch.special.gammaincc,
    "chebyshev_polynomial_t": torch.special.chebyshev_polynomial_t,
    "chebyshev_polynomial_u": torch.special.chebyshev_polynomial_u,
    "chebyshev_polynomial_v": torch.special.chebyshev_polynomial_v,
    "chebyshev_polynomial_w": torch.special.chebyshev_polynomial_w,
    "hermite_polynomial_h": torch.special.hermite_polynomial_h,
    "hermite_polynomial_he": torch.special.hermite_polynomial_he,
    "laguerre_polynomial_l": torch.special.laguerre_polynomial_l,
    "legendre_polynomial_p": torch.special.legendre_polynomial_p,
    "shifted_chebyshev_polynomial_t": torch.special.shifted_chebyshev_polynomial_t,
    "shifted_chebyshev_polynomial_u": torch.special.shifted_chebyshev_polynomial_u,
    "shifted_chebyshev_polynomial_v": torch.special.shifted_chebyshev_polynomial_v,
    "shifted_chebyshev_polynomial_w": torch.special.shifted_chebyshev_polynomial_w,
}
_BINARY_BOOL = {
    "eq": torch.eq, "ne": torch.ne, "lt": torch.lt, "le": torch.le, "gt": torch.gt, "ge": torch.ge,
    "logical_and": torch.logical_and, "logical_or": torch.logical_or, "logical_xor": torch.logical_xor,
}

POINTWISE: dict[str, OpDef] = {}
for _n, _fn in _UNARY_FLOAT.items():
    POINTWISE[_n] = OpDef(_n, 1, _f(_fn), "float")
for _n, _fn in _UNARY_SAME.items():
    POINTWISE[_n] = OpDef(_n, 1, _fn, "first")
for _n, _fn in _UNARY_BOOL.items():
    POINTWISE[_n] = OpDef(_n, 1, _fn, "bool")
for _n, _fn in _BINARY.items():
    POINTWISE[_n] = OpDef(_n, 2, _fn, "promote")
for _n, _fn in _BINARY_FLOAT.items():
    POINTWISE[_n] = OpDef(_n, 2, _f(_fn), "float")
for _n, _fn in _BINARY_BOOL.items():
    POINTWISE[_n] = OpDef(_n, 2, _fn, "bool")
POINTWISE["int_truediv"] = OpDef("int_truediv", 2, _int_truediv, "float")
POINTWISE["fma"] = OpDef("fma", 3, lambda a, b, c: a * b + c, "promote")
for _n in ("floor_to_int", "ceil_to_int", "round_to_int", "trunc_to_int"):
    _base = {"floor_to_int": torch.floor, "ceil_to_int": torch.ceil,
             "round_to_int": torch.round, "trunc_to_int": torch.trunc}[_n]
    POINTWISE[_n] = OpDef(_n, 1, _base, "int")

# Counter-based random numbers (a stateless hash of seed and offset): the same
# (seed, offset) always gives the same value, on any backend and any tiling.
_M64 = (1 << 64) - 1


def _lsr(x: torch.Tensor, n: int) -> torch.Tensor:
    """Logical right shift of int64 bit patterns."""
    return (x >> n) & ((1 << (64 - n)) - 1)


def _mix(seed: torch.Tensor, offset: torch.Tensor) -> torch.Tensor:
    """splitmix64 of (seed, offset), as int64 bit patterns (wrapping arithmetic)."""
    def wrap(v: int) -> int:
        return v - (1 << 64) if v >= (1 << 63) else v

    z = seed.to(torch.int64) * wrap(0x9E3779B97F4A7C15) + offset.to(torch.int64) * wrap(0xD1B54A32D192ED03)
    z = (z ^ _lsr(z, 30)) * wrap(0xBF58476D1CE4E5B9)
    z = (z ^ _lsr(z, 27)) * wrap(0x94D049BB133111EB)
    return z ^ _lsr(z, 31)


def _uniform(seed: torch.Tensor, offset: torch.Tensor) -> torch.Tensor:
    """Uniform float32 in [0, 1) from the top 24 bits."""
    return _lsr(_mix(seed, offset), 40).to(torch.float32) * (1.0 / (1 << 24))


def _normal(seed: torch.Tensor, offset: torch.Tensor) -> torch.Tensor:
    off = offset.to(torch.int64)
    u1 = _uniform(seed, 2 * off) + (0.5 / (1 << 24))  # (0, 1): log stays finite
    u2 = _uniform(seed, 2 * off + 1)
    return torch.sqrt(-2.0 * torch.log(u1)) * torch.cos(2.0 * torch.pi * u2)


def _randint(seed: torch.Tensor, offset: torch.Tensor, low: torch.Tensor, high: torch.Tensor) -> torch.Tensor:
    span = (high.to(torch.int64) - low.to(torch.int64)).clamp(min=1)
    return low.to(torch.int64) + torch.remainder(_lsr(_mix(seed, offset), 1), span)


POINTWISE["rand"] = OpDef("rand", 2, _uniform, "float")
POINTWISE["randn"] = OpDef("randn", 2, _normal, "float")
POINTWISE["randint64"] = OpDef("randint64", 4, _randint, "int")

#: Ops whose meaning is structural rather than a torch function.
STRUCTURAL: frozenset[str] = frozenset({
    "load", "store", "store_reduction", "constant", "index_expr", "to_dtype", "to_dtype_bitcast",
    "where", "masked", "indirect", "reduction", "getitem", "check_bounds", "device_assert", "frexp",
    "scan", "scan_arg", "scan_result",
})

#: Reduction types ``reduction`` accepts; welford/online-softmax ones yield tuples.
REDUCTIONS: frozenset[str] = frozenset({
    "sum", "prod", "max", "min", "argmax", "argmin", "any", "xor_sum",
    "welford_reduce", "welford_combine", "online_softmax_reduce",
})

#: Number of results of the tuple-valued reductions.
REDUCTION_ARITY: dict[str, int] = {"welford_reduce": 3, "welford_combine": 3, "online_softmax_reduce": 2}


def is_known(op: str) -> bool:
    """True when ``op`` belongs to the stable op set."""
    return op in POINTWISE or op in STRUCTURAL


def result_dtype(op: str, operand_dtypes: list[str | None]) -> str | None:
    """The dtype name of ``op`` applied to operands of ``operand_dtypes``."""
    spec = POINTWISE.get(op)
    known = [d for d in operand_dtypes if d is not None]
    if spec is None or not known:
        return None
    if spec.result == "bool":
        return "bool"
    if spec.result == "int":
        return "int64"
    if spec.result == "first":
        return known[0]
    dts = [getattr(torch, d) for d in known]
    out = dts[0]
    for d in dts[1:]:
        out = torch.promote_types(out, d)
    if spec.result == "float" and not out.is_floating_point:
        out = torch.get_default_dtype()
    return str(out).removeprefix("torch.")


def dtype_name(dtype: Any) -> str:
    """``torch.float16`` -> ``"float16"``."""
    return str(dtype).removeprefix("torch.")


def torch_dtype(name: str) -> torch.dtype:
    """``"float16"`` -> ``torch.float16``."""
    dt = getattr(torch, name, None)
    if not isinstance(dt, torch.dtype):
        raise ValueError(f"unknown dtype {name!r}")
    return dt
