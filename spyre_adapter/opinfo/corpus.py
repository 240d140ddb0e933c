"""Which (op, dtype) items the sweep runs and which of their samples."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterator, Sequence
from typing import Any

import torch

#: dtypes the sweep covers, by short name.
DTYPES: dict[str, torch.dtype] = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


@dataclasses.dataclass(frozen=True)
class Item:
    """One op x dtype of the sweep."""

    op: str
    dtype: str

    @property
    def key(self) -> str:
        return f"{self.op}:{self.dtype}"


@functools.cache
def op_db() -> dict[str, Any]:
    """PyTorch's OpInfo database by op id (``name`` or ``name.variant``)."""
    from torch.testing._internal.common_methods_invocations import op_db as db

    return {op_id(o): o for o in db}


def op_id(opinfo: Any) -> str:
    return f"{opinfo.name}.{opinfo.variant_test_name}" if opinfo.variant_test_name else opinfo.name


def items(ops: Sequence[str] = (), dtypes: Sequence[str] = tuple(DTYPES)) -> tuple[list[Item], list[Item]]:
    """``(runnable, not_applicable)``: items whose dtype CPU eager supports, and
    those it does not (nothing to compare against). ``ops`` filters by id or by
    a trailing ``*`` prefix."""
    run, skip = [], []
    for oid, info in sorted(op_db().items()):
        if ops and not any(oid == p or (p.endswith("*") and oid.startswith(p[:-1])) for p in ops):
            continue
        supported = info.supported_dtypes("cpu")
        for d in dtypes:
            (run if DTYPES[d] in supported else skip).append(Item(oid, d))
    return run, skip


def samples(item: Item, max_samples: int) -> Iterator[tuple[int, Any]]:
    """``(index, SampleInput)`` spread evenly over the op's CPU samples."""
    torch.manual_seed(0)
    every = list(op_db()[item.op].sample_inputs("cpu", DTYPES[item.dtype], requires_grad=False))
    n = len(every)
    if n <= max_samples:
        picks = range(n)
    else:
        picks = sorted({round(k * (n - 1) / (max_samples - 1)) for k in range(max_samples)}) if max_samples > 1 else [0]
    for i in picks:
        yield i, every[i]
