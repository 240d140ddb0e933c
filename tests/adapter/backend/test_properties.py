"""Property-based differential tests: random chains of pointwise ops,
reductions, matmuls and views on random shapes (size-1 dims, sizes that are not
multiples of the 64-element stick), compiled on spyre vs CPU eager.

The default run is derandomized and small (CI stays fast and reproducible);
``SPYRE_PROPERTY_EXAMPLES=500`` runs more, with fresh random draws.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spyre_shims.runtime import reset_compiled

from spyre_adapter.workloads import differential as diff

EXAMPLES = int(os.environ.get("SPYRE_PROPERTY_EXAMPLES", "10"))
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, derandomize="SPYRE_PROPERTY_EXAMPLES" not in os.environ,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large], database=None)
SIZES = st.sampled_from([1, 2, 3, 5, 7, 31, 33, 63, 64, 65, 129])

# name -> (function of x, needs) ; every step keeps values bounded so fp32 errors stay relative
UNARY: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "sin": torch.sin, "tanh": torch.tanh, "sigmoid": torch.sigmoid, "relu": torch.relu, "neg": torch.neg,
    "abs": torch.abs, "exp_tanh": lambda x: torch.exp(torch.tanh(x)), "sqrt_abs": lambda x: torch.sqrt(x.abs() + 0.1),
    "affine": lambda x: x * 0.75 - 0.5, "clamp": lambda x: x.clamp(-0.5, 0.8),
}
BINARY: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "add": torch.add, "mul": torch.mul, "sub": torch.sub, "maximum": torch.maximum,
    "where_gt": lambda x, y: torch.where(x > y, x, y * 0.5),
}
REDUCE = {"sum": torch.sum, "mean": torch.mean, "amax": torch.amax, "amin": torch.amin}


@st.composite
def programs(draw: st.DrawFn) -> tuple[list[int], list[tuple[Any, ...]]]:
    """An input shape and a list of steps valid for the shapes they see."""
    shape = draw(st.lists(SIZES, min_size=1, max_size=3))
    x = torch.empty(shape, device="meta")
    steps: list[tuple[Any, ...]] = []
    for _ in range(draw(st.integers(1, 5))):
        kinds = ["unary", "binary", "view"] + (["reduce", "matmul"] if x.dim() >= 1 and x.numel() > 0 else [])
        kind = draw(st.sampled_from(kinds))
        if kind == "unary":
            step: tuple[Any, ...] = ("unary", draw(st.sampled_from(sorted(UNARY))))
        elif kind == "binary":
            # the other operand broadcasts: some dims of x set to 1, maybe leading dims dropped
            other = [1 if draw(st.booleans()) else s for s in x.shape]
            other = other[draw(st.integers(0, max(len(other) - 1, 0))):]
            step = ("binary", draw(st.sampled_from(sorted(BINARY))), tuple(other))
        elif kind == "reduce":
            step = ("reduce", draw(st.sampled_from(sorted(REDUCE))), draw(st.integers(-x.dim(), x.dim() - 1)),
                    draw(st.booleans()))
        elif kind == "matmul":
            step = ("matmul", draw(SIZES))
        else:
            step = _view_step(draw, x)
        x = apply(step, x, lambda shape: torch.empty(shape, device="meta"))
        steps.append(step)
    return shape, steps


def _view_step(draw: st.DrawFn, x: torch.Tensor) -> tuple[Any, ...]:
    options = ["unsqueeze", "flatten"]
    if x.dim() >= 2:
        options += ["transpose", "permute"]
    if x.dim() >= 1 and x.shape[-1] >= 3:
        options.append("slice")
    if 1 in x.shape:
        options.append("expand")
    kind = draw(st.sampled_from(options))
    if kind == "transpose":
        return ("transpose", draw(st.integers(0, x.dim() - 1)), draw(st.integers(0, x.dim() - 1)))
    if kind == "permute":
        return ("permute", tuple(draw(st.permutations(range(x.dim())))))
    if kind == "unsqueeze":
        return ("unsqueeze", draw(st.integers(0, x.dim())))
    if kind == "slice":
        return ("slice", draw(st.integers(0, 1)), draw(st.integers(1, 3)))
    if kind == "expand":
        return ("expand", draw(st.sampled_from([2, 3, 65])))
    return ("flatten",)


def apply(step: tuple[Any, ...], x: torch.Tensor, operand: Callable[[tuple[int, ...]], torch.Tensor]) -> torch.Tensor:
    """One step on ``x``; ``operand(shape)`` supplies second operands (the same
    values in the eager and the compiled run)."""
    kind = step[0]
    if kind == "unary":
        return UNARY[step[1]](x)
    if kind == "binary":
        return BINARY[step[1]](x, operand(step[2]))
    if kind == "reduce":
        return REDUCE[step[1]](x, dim=step[2], keepdim=step[3])
    if kind == "matmul":
        w = operand((x.shape[-1], step[1]))
        return (x.unsqueeze(0) if x.dim() == 1 else x) @ w * (1.0 / max(x.shape[-1], 1) ** 0.5)
    if kind == "transpose":
        return x.transpose(step[1], step[2])
    if kind == "permute":
        return x.permute(*step[1])
    if kind == "unsqueeze":
        return x.unsqueeze(step[1])
    if kind == "slice":
        return x[..., step[1]::step[2]]
    if kind == "expand":
        return x.expand(*[step[1] if s == 1 else s for s in x.shape])
    return x.flatten()


def _program_fn(steps: list[tuple[Any, ...]]) -> Callable[..., torch.Tensor]:
    def run(x: torch.Tensor, *operands: torch.Tensor) -> torch.Tensor:
        it = iter(operands)
        for step in steps:
            x = apply(step, x, lambda shape: next(it))
        return x

    return run


def _operand_shapes(shape: list[int], steps: list[tuple[Any, ...]]) -> list[tuple[int, ...]]:
    shapes: list[tuple[int, ...]] = []

    def record(s: tuple[int, ...]) -> torch.Tensor:
        shapes.append(tuple(s))
        return torch.empty(s, device="meta")

    x = torch.empty(shape, device="meta")
    for step in steps:
        x = apply(step, x, record)
    return shapes


def _check_program(shape: list[int], steps: list[tuple[Any, ...]], dtype: torch.dtype, atol: float,
                   rtol: float) -> None:
    reset_compiled()  # every example compiles the same code object: stay far from the recompile limit
    g = torch.Generator().manual_seed(len(steps) * 1000 + sum(shape))
    values = [torch.rand(s, generator=g) * 4 - 2 for s in [tuple(shape), *_operand_shapes(shape, steps)]]
    fn = _program_fn(steps)

    def make(device: str) -> diff.Args:
        return diff.place([v.to(dtype) for v in values], device), {}

    def fp32_reference() -> torch.Tensor:
        return fn(*[v.to(dtype).float() for v in values]).to(dtype)

    out = diff.check(fn, make, atol=atol, rtol=rtol, reference=fp32_reference if dtype != torch.float32 else None)
    assert out.status in (diff.PASS, diff.PASS_NO_KERNEL), f"{out} for shape={shape} steps={steps}"
    computes = any(s[0] in ("unary", "binary", "reduce", "matmul") for s in steps)
    if computes and out.status == diff.PASS_NO_KERNEL:
        pytest.fail(f"a computing program ran no device kernel: shape={shape} steps={steps}")


@SETTINGS
@given(programs())
def test_random_op_chains_match_eager_fp32(program: tuple[list[int], list[tuple[Any, ...]]]) -> None:
    _check_program(*program, torch.float32, atol=1e-4, rtol=1e-4)


@SETTINGS
@given(programs())
def test_random_op_chains_match_eager_fp16(program: tuple[list[int], list[tuple[Any, ...]]]) -> None:
    """fp16 chains: Inductor keeps intermediates in fp32, eager rounds each step;
    either the fp16 eager result or the fp32-computed one is accepted."""
    _check_program(*program, torch.float16, atol=2e-2, rtol=2e-2)


def test_generator_covers_every_step_kind() -> None:
    """The strategy reaches every kind of step (otherwise the properties above test less than they claim)."""
    seen: set[str] = set()

    @settings(max_examples=300, derandomize=True, database=None, deadline=None)
    @given(programs())
    def collect(program: tuple[list[int], list[tuple[Any, ...]]]) -> None:
        seen.update(s[0] for s in program[1])

    collect()
    assert seen >= {"unary", "binary", "reduce", "matmul", "transpose", "permute", "unsqueeze", "slice", "expand",
                    "flatten"}, seen
