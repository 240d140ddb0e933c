"""Run one op x dtype of the sweep: every selected sample through the
differential check, folded into one classification."""

from __future__ import annotations

import contextlib
import importlib
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import torch
from torch.utils._pytree import tree_map

from spyre_adapter.opinfo.corpus import DTYPES, Item, op_db, samples
from spyre_adapter.opinfo.expectations import Expectations
from spyre_adapter.workloads import differential as diff

#: Order of severity when folding sample outcomes into one item status.
_SEVERITY = [diff.FAIL, diff.FALLBACK, diff.PASS, diff.PASS_NO_KERNEL, diff.SKIPPED]


def describe(x: Any) -> Any:
    """A JSON-able description of sample arguments (tensors by dtype, shape, stride)."""

    def one(v: Any) -> Any:
        if isinstance(v, torch.Tensor):
            s = f"Tensor({str(v.dtype).removeprefix('torch.')}, {list(v.shape)}"
            if v.layout != torch.strided:
                s += f", {str(v.layout).removeprefix('torch.')}"
            elif v.numel() and not v.is_contiguous():
                s += f", stride={list(v.stride())}"
            return s + ")"
        if isinstance(v, (int, float, bool, str, type(None))):
            return v
        return repr(v)

    return tree_map(one, x)


def _make_args(sample: Any) -> diff.MakeArgs:
    def make(device: str) -> diff.Args:
        args = diff.place([sample.input, *sample.args], device)
        return args, diff.place_kwargs(sample.kwargs, device)

    return make


def _upcast_reference(fn: Any, sample: Any, dtype: torch.dtype) -> Any:
    """Eager on the same inputs upcast to fp32, results rounded back to ``dtype``."""

    def up(t: Any) -> Any:
        return t.float() if isinstance(t, torch.Tensor) and t.dtype == dtype else t

    def down(t: Any) -> Any:
        return t.to(dtype) if isinstance(t, torch.Tensor) and t.dtype == torch.float32 else t

    def ref() -> Any:
        args = tree_map(up, [sample.input, *sample.args])
        return tree_map(down, fn(*args, **tree_map(up, dict(sample.kwargs))))

    return ref


@contextlib.contextmanager
def _traceable_seed_wrapper() -> Iterator[None]:
    """OpInfo wraps random ops in ``wrapper_set_seed``, whose RNG-state freezing
    (``no_dispatch``) Dynamo cannot trace even on the CPU. Swap it for a plain
    seeded call while an item runs, as Inductor's own OpInfo tests do."""
    cmi = importlib.import_module("torch.testing._internal.common_methods_invocations")
    original = cmi.wrapper_set_seed

    def seeded(op: Any, *args: Any, **kwargs: Any) -> Any:
        return op(*args, **kwargs)

    cmi.wrapper_set_seed = seeded
    try:
        yield
    finally:
        cmi.wrapper_set_seed = original


def run_item(item: Item, expectations: Expectations, max_samples: int) -> dict[str, Any]:
    """The JSON record of one item."""
    t0 = time.perf_counter()
    info = op_db()[item.op]
    atol, rtol = expectations.tolerances(item.op, item.dtype)
    statuses: Counter[str] = Counter()
    fallbacks: Counter[str] = Counter()
    record: dict[str, Any] = {"op": item.op, "dtype": item.dtype}
    launches = 0
    first_fail: dict[str, Any] | None = None
    silent = False
    try:
        picked = list(samples(item, max_samples))
    except Exception as exc:  # noqa: BLE001 - a broken sample generator is reported, not fatal
        picked = []
        record["detail"] = f"sample generation failed: {type(exc).__name__}: {exc}"[:300]
    for index, sample in picked:
        fn = _bind(info.op)
        try:
            low = DTYPES[item.dtype] != torch.float32
            with _traceable_seed_wrapper():
                torch.manual_seed(42)
                out = diff.check(fn, _make_args(sample), atol=atol, rtol=rtol,
                                 reference=_upcast_reference(fn, sample, DTYPES[item.dtype]) if low else None)
        except Exception as exc:  # noqa: BLE001 - eager CPU rejects the sample: nothing to compare
            statuses[diff.SKIPPED] += 1
            record.setdefault("skipped_samples", []).append(f"{index}: eager error {type(exc).__name__}")
            continue
        statuses[out.status] += 1
        fallbacks.update(out.fallbacks)
        launches += out.launches
        silent |= out.silent
        if out.status == diff.FAIL and first_fail is None:
            first_fail = {"sample": index, "input": describe(sample.input), "args": describe(list(sample.args)),
                          "kwargs": describe(dict(sample.kwargs)), "error": out.detail}
    status = next((s for s in _SEVERITY if statuses[s]), diff.SKIPPED)
    reason = expectations.xfail_reason(item.op, item.dtype)
    if reason is not None:
        record["xfail_reason"] = reason
        if status == diff.FAIL and expectations.xfail_matches(item.op, item.dtype, first_fail["error"]):
            status = diff.XFAIL
        else:
            record["xfail_unneeded"] = True  # listed but did not fail: the entry is stale
    record.update(status=status, samples=dict(statuses), launches=launches, seconds=round(time.perf_counter() - t0, 2))
    if fallbacks:
        record["fallbacks"] = sorted(fallbacks)
    if silent:
        record["silent_fallback"] = True
    if first_fail:
        record["first_failure"] = first_fail
    return record


def _bind(op: Any) -> Any:
    """A fresh function object per sample, so each sample compiles on its own
    (one shared function would hit Dynamo's recompile limit and run eagerly)."""

    def fn(*args: Any, **kwargs: Any) -> Any:
        return op(*args, **kwargs)

    return fn
