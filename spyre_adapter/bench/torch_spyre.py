"""A second, independent reference: IBM torch-spyre's analytical cost model.

torch-spyre fitted ``cost_model.py`` on kernels measured on real cards and
published its accuracy against them (RMS: broadcast 5.0 %, transport 6.1 %,
reduction 7.2 %, pointwise 8.5 %, softmax 21.1 %, matmul 25-40 %,
under-predicting). Its sweep plan (``sweep_plan.json``, 1632 configurations:
operator, shape, cores, tiling, LX planning, forced work division) is what it
was scored on. Both live in ``../shared/reference/torch-spyre-cost-model`` as
reference data: the model is loaded from there with importlib (never copied),
and nothing here is fitted to it.

For each configuration our device can express, :func:`compare` builds the
operator's Kernel IR (:mod:`.sweep_kernels`), plans it for that core count
(forcing the division where the sweep forces one), simulates it, and sets our
modeled device time against ``predict_ops`` on the features torch-spyre's
extractor would record for it (per tensor: device-layout size, HBM or LX,
broadcast; per op: cores, tiling, matmul split). Per category it reports the
MAPE of ours against theirs and the Spearman rank correlation, and every
configuration it skipped and why.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import math
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

from spyre_shims import kernel_ir as kir

from spyre_adapter.bench import kernels as sk
from spyre_adapter.bench.baselines import torch_spyre_split
from spyre_adapter.model import timing
from spyre_adapter.model.errors import DoesNotFit
from spyre_adapter.model.machine import DEFAULT, Machine
from spyre_adapter.model.rules import EmulatorError
from spyre_adapter.scheduler.loops import plan_group
from spyre_adapter.scheduler.matmul import MatmulShape, plan_grid, plan_matmul

__all__ = ["ReferenceUnavailable", "reference_dir", "skip_reason", "load_cost_model", "load_sweep", "Config",
           "category",
           "PUBLISHED_RMS", "expressible", "in_reference_scope", "our_device_ns", "their_ns", "spearman", "compare",
           "IDENTICAL_SPLITS", "matmul_on_identical_splits", "command"]

#: Published RMS error of the reference against measured kernels, by category (percent;
#: a range where the source gives one). Matmul is systematically under-predicted.
PUBLISHED_RMS: dict[str, tuple[float, float]] = {
    "broadcast": (5.0, 5.0), "transport": (6.1, 6.1), "reduction": (7.2, 7.2), "pointwise": (8.5, 8.5),
    "softmax": (21.1, 21.1), "matmul_row": (25.1, 25.1), "matmul_split": (29.8, 29.8), "matmul": (25.0, 40.0),
    "matmul_k": (25.0, 40.0), "matmul_nested": (25.0, 40.0), "bmm": (26.5, 40.0), "bmm_3d2d": (26.5, 40.0),
    "bmm_nested": (26.5, 40.0), "bmm_split": (26.5, 40.0),
}

#: Reporting category of each operator (torch-spyre's own grouping, eval_model.py).
_CATEGORY = {
    **{op: "pointwise" for op in "neg gelu relu sigmoid exp mul add add3 add4 add5 add6 add_indep2".split()},
    **{op: "reduction" for op in "sumrow sumcol sumall amax mean read".split()},
    **{op: "transport" for op in "transpose transpose_outer cat0 cat1".split()},
    **{op: "broadcast" for op in "copy bcast mulbcast bcastcol write".split()},
    "mm": "matmul", "mmwd": "matmul_split", "matmul_row_tiling": "matmul_row", "matmul_k_tiling": "matmul_k",
    "mm_nested_m_k": "matmul_nested", "bmm_k_tiling": "bmm", "bmm_3d2d_k_tiling": "bmm_3d2d",
    "bmm_nested_b_k": "bmm_nested", "bmm_wd": "bmm_split", "bmm_wd_3d2d": "bmm_split", "bmm_layout": "bmm_split",
    "softmax_row_tiling": "softmax", "softmax_noexp_row_tiling": "softmax", "softmax_unrolled": "softmax_unrolled",
    **{op: "coarse_reduction" for op in "ctsum ctamax ctamin".split()},
}

_MATMUL_OPS = frozenset(op for op, c in _CATEGORY.items() if c.startswith(("matmul", "bmm")))

#: Fewest pairs a Spearman rank correlation is reported for (fewer: ``None``).
MIN_SPEARMAN_N = 8


def basis(cat: str) -> str:
    """What agreement in category ``cat`` can show. Our DRAM rates and write rate
    were derived from this cost model's own file, so in the memory-bound
    categories our model's coefficients are theirs: agreement there holds by
    construction and is no evidence. The matmul categories compare our PE and
    ring model with their fit: independent."""
    if cat.startswith(("matmul", "bmm")):
        return "independent"
    return "shared constants"


class ReferenceUnavailable(FileNotFoundError):
    """The shared reference folder (or a file in it) is not where it was looked for."""


# ------------------------------------------------------------------ loading

def reference_dir(path: str | os.PathLike[str] | None = None) -> Path:
    """The torch-spyre reference folder the caller named: ``path``, else
    ``$SPYRE_REFERENCE_DIR``. Nothing is searched for: the folder's
    ``cost_model.py`` is code, run only from where it was asked for. Raises
    :class:`ReferenceUnavailable` when none is named or it lacks the model."""
    if path is None:
        path = os.environ.get(REFERENCE_ENV) or None
    if path is None:
        raise ReferenceUnavailable(f"torch-spyre cost model not named: pass --reference DIR or set {REFERENCE_ENV} "
                                   f"(in a checkout: {REFERENCE_IN_CHECKOUT})")
    folder = Path(path).expanduser()
    if (folder / "cost_model.py").is_file() and (folder / "sweep_plan.json").is_file():
        return folder
    raise ReferenceUnavailable(f"torch-spyre cost model (cost_model.py and sweep_plan.json) not found in {folder}; "
                               f"pass --reference DIR or set {REFERENCE_ENV}")


def skip_reason(path: str | os.PathLike[str] | None = None) -> str | None:
    """None when the reference folder is available, else one line saying why the
    comparison is skipped."""
    try:
        reference_dir(path)
    except ReferenceUnavailable as exc:
        return f"comparison with torch-spyre's cost model skipped: {exc}"
    return None


#: Environment variable naming the torch-spyre cost-model folder.
REFERENCE_ENV = "SPYRE_REFERENCE_DIR"
#: Where the folder is beside this project's checkout (documentation only: never searched).
REFERENCE_IN_CHECKOUT = "../shared/reference/torch-spyre-cost-model"

_LOADED: dict[Path, ModuleType] = {}


def load_cost_model(path: str | os.PathLike[str] | None = None) -> ModuleType:
    """torch-spyre's ``cost_model.py`` imported from the reference folder (standard
    library only; loaded once per folder, never copied)."""
    folder = reference_dir(path)
    if folder not in _LOADED:
        spec = importlib.util.spec_from_file_location("_torch_spyre_cost_model_reference", folder / "cost_model.py")
        assert spec is not None and spec.loader is not None
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        _LOADED[folder] = mod
    return _LOADED[folder]


@dataclasses.dataclass(frozen=True)
class Config:
    """One sweep configuration, with torch-spyre's harness defaults filled in
    (``profile_ops.py``: ROWS 512, COLS 16384, N = COLS, B 8, 32 cores, LX planning on)."""

    op: str
    rows: int = 512
    cols: int = 16384
    n: int = 0
    batch: int = 8
    tiles: int = 0
    lx: bool = True
    cores: int = 32
    split: tuple[int, int, int, int] | None = None  # forced (B, M, N, K)
    layouts: tuple[str, str] | None = None
    mid: int = 8
    raw: tuple[tuple[str, str], ...] = ()

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> "Config":
        """A configuration from the environment block the sweep plan stores."""
        g = lambda k, d: int(env[k]) if env.get(k) not in (None, "") else d  # noqa: E731
        wd = [env.get(k) for k in ("WD_B", "WD_M", "WD_N", "WD_K")]
        split = tuple(int(x) if x else 1 for x in wd) if any(wd) else None
        cols = g("BENCH_COLS", 16384)
        cores = g("SENCORES", math.prod(split) if split else 32)  # type: ignore[arg-type]
        layouts = (env["WD_LAYOUT_A"], env["WD_LAYOUT_B"]) if env.get("WD_LAYOUT_A") else None
        return cls(env["BENCH_OP"], g("BENCH_ROWS", 512), cols, g("BENCH_N", cols), g("BENCH_B", 8),
                   g("BENCH_TILES", 0), env.get("LX_PLANNING", "1") != "0", cores, split, layouts,  # type: ignore[arg-type]
                   g("TO_MID", 8), tuple(sorted(env.items())))

    @property
    def tiled(self) -> bool:
        """Whether the sweep asked for coarse tiling (2 or more tiles)."""
        return self.tiles >= 2


def load_sweep(path: str | os.PathLike[str] | None = None) -> list[Config]:
    """The sweep plan's configurations."""
    data = json.loads((reference_dir(path) / "sweep_plan.json").read_text())
    return [Config.from_env(c) for c in data["configs"]]


def category(op: str) -> str:
    """torch-spyre's reporting category of an operator."""
    return _CATEGORY.get(op, "other")


# ------------------------------------------------------------------ scope

def expressible(c: Config) -> str | None:
    """None when our device can run the configuration, else why not."""
    if c.op == "flash_attn":
        return "flash attention with torch-spyre's block hints: our device runs its own attention kernel"
    if c.op.endswith("_sep"):
        return "separately compiled kernels (harness construct, no single kernel)"
    if c.layouts and c.layouts != ("0,1,2", "0,1,2"):
        return f"device tile order {c.layouts[0]} / {c.layouts[1]}: our device has one layout"
    if c.op not in _CATEGORY:
        return f"operator {c.op} has no Kernel IR here"
    if c.split is not None and math.prod(c.split) > c.cores:
        return f"forced split {c.split} needs more than {c.cores} cores"
    if c.tiled and c.op in ("matmul_k_tiling", "mm_nested_m_k", "bmm_k_tiling", "bmm_3d2d_k_tiling",
                            "bmm_nested_b_k", "ctsum", "ctamax", "ctamin"):
        return ("reduction-dim coarse tiling: torch-spyre's features for it (accumulator fill/combine ops with "
                "per-level loop factors) cannot be rebuilt from the plan")
    return None


def in_reference_scope(c: Config) -> str | None:
    """None when the reference's published accuracy covers the configuration, else
    why not (its standing scope decisions, eval_model.in_scope)."""
    if c.cores < 8:
        return "fewer than 8 cores (outside the reference's scored population)"
    if c.op == "write":
        return "the write outer product is not modeled by the reference"
    if c.op.startswith("softmax") and c.cols < 1024:
        return "fused reduction over fewer than 1024 columns (outside the reference's scored population)"
    if category(c.op) == "coarse_reduction":
        return "coarse reductions have no published accuracy"
    return None


# ------------------------------------------------------------------ our side

def _kernels(c: Config) -> list[kir.Kernel]:
    if c.op in sk.OPS:
        return sk.kernels(c.op, c.rows, c.cols)
    if c.op == "transpose_outer":
        return sk.transpose_outer(c.rows, c.mid, c.cols)
    if c.op.startswith("softmax"):
        return sk.kernels("softmax_noexp" if "noexp" in c.op else "softmax", c.rows, c.cols)
    if c.op in ("bmm_3d2d_k_tiling", "bmm_wd_3d2d"):
        return [sk.mm(c.batch * c.rows, c.cols, c.n)]
    if c.op.startswith("bmm"):
        return [sk.bmm(c.batch, c.rows, c.cols, c.n)]
    return [sk.mm(c.rows, c.cols, c.n)]


def _our_key(c: Config) -> tuple:
    # coarse tiles are a schedule our planner chooses for itself: not part of the key
    lx = c.lx if c.op not in _MATMUL_OPS else True
    return (c.op if c.op not in _MATMUL_OPS else ("3d2d" if "3d2d" in c.op else c.op.startswith("bmm")),
            c.rows, c.cols, c.n, c.batch if c.op.startswith("bmm") else 0, c.cores, lx, c.split, c.mid)


def our_device_ns(c: Config, m: Machine = DEFAULT) -> float:
    """Our modeled device time of the configuration: each kernel planned for
    ``c.cores`` cores (the forced division where the sweep forces one), simulated,
    launches excluded (torch-spyre's measurements are device kernel time)."""
    mc = m.replace(cores=c.cores)
    total = 0.0
    for k in _kernels(c):
        if isinstance(k, kir.ExternKernel):
            if c.split is not None:
                b, mm, n, kk = c.split
                split = (1, b * mm, n, kk) if k.op == "mm" and c.op.startswith("bmm") else (b, mm, n, kk)
                p = plan_grid(k, mc, {}, k.name, split, share=True)
            else:
                p = plan_matmul(k, mc, {}, k.name)
        else:
            p = plan_group(k, mc, {}, k.name, lx_planning=c.lx)
        total += timing.simulate(p, mc, keep_events=False).total_ns - mc.kernel_launch_ns
    return total


# ------------------------------------------------------------------ their side

def _dev(logical: Sequence[int], stick: int = 64) -> tuple[list[int], int]:
    """Device dims and element count of an fp16 tensor: the last dim padded to whole
    sticks; rank 2 as [sticks, rows, 64], rank 3 as [X, sticks, B, 64] (the
    compiler's default tile order, batch just inside the stick)."""
    *outer, last = list(logical) or [1]
    sticks = -(-last // stick)
    if len(outer) == 2:
        dims = [outer[1], sticks, outer[0], stick]
    else:
        dims = [sticks, *outer, stick]
    return dims, math.prod(outer) * sticks * stick


class _Features:
    """Builds torch-spyre OpFeatures for one configuration."""

    def __init__(self, cm: ModuleType, c: Config) -> None:
        self.cm, self.c = cm, c

    def arg(self, name: str, role: str, logical: Sequence[int], mem: str = "hbm", broadcast: bool = False,
            loop_factor: int = 1) -> Any:
        dims, elems = _dev(logical)
        return self.cm.ArgTraffic(name, role, mem, elems, broadcast, dims, list(logical), loop_factor)

    def op(self, name: str, args: list[Any], reduction: bool = False, **kw: Any) -> Any:
        out = next((a.elems for a in args if a.role == "output"), 0)
        return self.cm.OpFeatures(name=name, is_reduction=reduction, out_elems=out, cores=kw.pop("cores", self.c.cores),
                                  dtype_bytes=2, args=args, **kw)


def _pointwise_features(f: _Features, c: Config) -> list[Any]:
    r, w = c.rows, c.cols
    x = lambda k: f.arg(f"arg{k}_1", "input", (r, w))  # noqa: E731
    out = lambda name="buf0": f.arg(name, "output", (r, w))  # noqa: E731
    if c.op in ("neg", "gelu", "relu", "sigmoid", "exp"):
        return [f.op(c.op, [x(0), out()])]
    if c.op == "copy":  # x + 1.0: the scalar is a cached broadcast operand
        return [f.op("add", [x(0), f.arg("const", "input", (1,), broadcast=True), out()])]
    if c.op in ("add", "mul"):
        return [f.op(c.op, [x(0), x(1), out()])]
    if c.op == "add_indep2":
        return [f.op("add", [x(0), x(1), out("buf0")]), f.op("add_1", [x(2), x(3), out("buf1")])]
    n = int(c.op[3:])  # addN: a chain of N-1 adds, intermediates through HBM unless LX-planned
    mem = "lx" if c.lx else "hbm"
    ops = []
    for k in range(1, n):
        prev = x(0) if k == 1 else f.arg(f"buf{k - 2}", "input", (r, w), mem)
        dst = f.arg(f"buf{k - 1}", "output", (r, w), "hbm" if k == n - 1 else mem)
        ops.append(f.op(f"add_{k}", [prev, x(k), dst]))
    return ops


def _broadcast_features(f: _Features, c: Config) -> list[Any]:
    r, w = c.rows, c.cols
    if c.op == "write":
        args = [f.arg("arg0_1", "input", (1, w), broadcast=True), f.arg("arg1_1", "input", (r, 1), broadcast=True)]
    else:
        b = (r, 1) if c.op == "bcastcol" else (1, w)
        args = [f.arg("arg0_1", "input", (r, w)), f.arg("arg1_1", "input", b, broadcast=True)]
    return [f.op("mul" if c.op == "mulbcast" else "add", args + [f.arg("buf0", "output", (r, w))])]


def _reduction_features(f: _Features, c: Config) -> list[Any]:
    r, w = c.rows, c.cols
    x = f.arg("arg0_1", "input", (r, w))
    if c.op in ("sumcol", "ctsum", "ctamax", "ctamin"):
        return [f.op(c.op, [x, f.arg("buf0", "output", (w,))], True, hbm_pattern="reduce_outer")]
    if c.op == "sumall":
        return [f.op("sum", [x, f.arg("buf0", "output", (1,))], True, reduction_cores=c.cores)]
    return [f.op(c.op, [x, f.arg("buf0", "output", (r,))], True)]


def _transport_features(f: _Features, c: Config) -> list[Any]:
    r, w = c.rows, c.cols
    if c.op == "transpose":
        return [f.op("clone", [f.arg("arg0_1", "input", (r, w)), f.arg("buf0", "output", (w, r))],
                     hbm_pattern="restickify")]
    if c.op == "transpose_outer":
        return [f.op("clone", [f.arg("arg0_1", "input", (r, c.mid, w)), f.arg("buf0", "output", (c.mid, r, w))])]
    if c.op == "cat0":
        return [f.op("cat", [f.arg("arg0_1", "input", (r, w)), f.arg("buf0", "output", (2 * r, w))],
                     hbm_pattern="stick_scatter")]
    return [f.op("cat", [f.arg("arg0_1", "input", (r, w)), f.arg("buf0", "output", (r, 2, w))])]


def _softmax_features(f: _Features, c: Config) -> list[Any]:
    """The fused softmax bundle with LX planning: the input staged into LX once (a
    clone, or with coarse tiling a per-tile copy), five ops on LX, the result
    written to HBM; with tiling every op runs in the tile loop."""
    r, w = c.rows, c.cols
    tiled = dict(loop_trip=c.tiles, tiles_output_dim=True, tile_rows_per_core=r / (c.cores * c.tiles)) \
        if c.tiled else {}
    lx = lambda name, role, shape=(r, w): f.arg(name, role, shape, "lx")  # noqa: E731
    staged = [f.op("Pointwise", [f.arg("arg0_1", "input", (r, w)), lx("x_lx", "output")], **tiled)]
    mid = "mul" if "noexp" in c.op else "exp"
    body = [f.op("amax", [lx("x_lx", "input"), lx("mx", "output", (r, 1))], True, **tiled),
            f.op("sub", [lx("x_lx", "input"), lx("mx", "input", (r, 1)), lx("d", "output")], **tiled),
            f.op(mid, [lx("d", "input"), lx("e", "output")], **tiled),
            f.op("sum_1", [lx("e", "input"), lx("s", "output", (r, 1))], True, **tiled)]
    if c.tiled:
        return staged + body + [f.op("div", [lx("e", "input"), lx("s", "input", (r, 1)), lx("q", "output")], **tiled),
                                f.op("Pointwise", [lx("q", "input"), f.arg("buf0", "output", (r, w))], **tiled)]
    return staged + body + [f.op("div", [lx("e", "input"), lx("s", "input", (r, 1)),
                                         f.arg("buf0", "output", (r, w))])]


def _matmul_features(f: _Features, c: Config) -> list[Any]:
    """One matmul op: the split torch-spyre's planner picks (or the forced one), and
    for M coarse tiling the per-tile split, the loop trip and B re-read every tile."""
    batch = c.batch if c.op.startswith("bmm") else 1
    m_, k_, n_ = c.rows, c.cols, c.n
    shared = "3d2d" in c.op
    tiles = c.tiles if c.tiled else 1
    if c.split is not None:
        b, mm, n, kk = c.split
    else:
        s = MatmulShape(batch, m_ // tiles, n_, k_, 2, 2, "")
        (b, mm, n, kk), _ = torch_spyre_split(s, DEFAULT.replace(cores=c.cores), shared_weight=shared)
    a_shape = (batch, m_, k_) if batch > 1 else (m_, k_)
    b_shape = (batch, k_, n_) if batch > 1 and not shared else (k_, n_)
    o_shape = (batch, m_, n_) if batch > 1 else (m_, n_)
    row_tiled = c.op == "matmul_row_tiling" and c.tiled
    args = [f.arg("arg0_1", "input", a_shape), f.arg("arg1_1", "input", b_shape, loop_factor=tiles if row_tiled else 1),
            f.arg("buf0", "output", o_shape)]
    rows_per_core = (m_ // tiles) / mm
    extra = dict(loop_trip=tiles, tiles_output_dim=True, tile_rows_per_core=rows_per_core) if row_tiled else {}
    return [f.op("mm", args, True, cores=b * mm * n * kk, reduction_cores=kk, is_matmul=True,
                 matmul_macs=batch * m_ * n_ * k_, matmul_rows_per_core=rows_per_core, matmul_cols_per_core=n_ / n,
                 matmul_a_bytes=_dev(a_shape)[1] * 2 // tiles, matmul_b_bytes=_dev(b_shape)[1] * 2,
                 matmul_m_split=mm, matmul_n_split=n, **extra)]


def their_features(c: Config, cm: ModuleType | None = None) -> list[Any]:
    """The OpFeatures torch-spyre's extractor would record for the configuration."""
    cm = cm or load_cost_model()
    f = _Features(cm, c)
    cat = category(c.op)
    if cat in ("pointwise",) or c.op == "copy":
        return _pointwise_features(f, c)
    if cat == "broadcast":
        return _broadcast_features(f, c)
    if cat in ("reduction", "coarse_reduction"):
        return _reduction_features(f, c)
    if cat == "transport":
        return _transport_features(f, c)
    if cat.startswith("softmax"):
        return _softmax_features(f, c)
    return _matmul_features(f, c)


def their_ns(c: Config, cm: ModuleType | None = None) -> float:
    """The reference's predicted device time (ns) of the configuration."""
    cm = cm or load_cost_model()
    return float(cm.predict_ops(their_features(c, cm)))


# ------------------------------------------------------------------ statistics

def _ranks(x: torch.Tensor) -> torch.Tensor:
    """Ranks 1..n, ties given their average rank."""
    order = torch.argsort(x, stable=True)
    ranks = torch.empty_like(x)
    ranks[order] = torch.arange(1, len(x) + 1, dtype=x.dtype)
    for v in torch.unique(x):
        tie = x == v
        if int(tie.sum()) > 1:
            ranks[tie] = ranks[tie].mean()
    return ranks


def spearman(a: Sequence[float], b: Sequence[float]) -> float:
    """Spearman's rank correlation (Pearson correlation of the average ranks)."""
    if len(a) < 2:
        return float("nan")
    ra = _ranks(torch.tensor(a, dtype=torch.float64))
    rb = _ranks(torch.tensor(b, dtype=torch.float64))
    ra, rb = ra - ra.mean(), rb - rb.mean()
    den = math.sqrt(float((ra * ra).sum()) * float((rb * rb).sum()))
    return float((ra * rb).sum()) / den if den else float("nan")


def _stats(pairs: Sequence[tuple[float, float]]) -> dict[str, Any]:
    ours, theirs = [p[0] for p in pairs], [p[1] for p in pairs]
    rel = [(o - t) / t for o, t in pairs]
    rho = spearman(ours, theirs) if len(pairs) >= MIN_SPEARMAN_N else float("nan")
    return {"n": len(pairs), "mape": sum(map(abs, rel)) / len(rel), "spearman": None if math.isnan(rho) else rho,
            "median_ratio": statistics.median(o / t for o, t in pairs),
            "within_band": None}


# ------------------------------------------------------------------ the comparison

def _even_sample(items: Sequence[Config], n: int | None) -> list[Config]:
    if n is None or n >= len(items):
        return list(items)
    step = len(items) / n
    return [items[int(i * step)] for i in range(n)]


def _stratified(configs: Sequence[Config], per_category: int, limit_bytes: int | None) -> list[Config]:
    """Up to ``per_category`` configurations of each category, spread evenly over
    its expressible ones (within the size limit) in plan order."""
    groups: dict[str, list[Config]] = {}
    for c in configs:
        if expressible(c) is None and (limit_bytes is None or _largest_operand(c) <= limit_bytes):
            groups.setdefault(category(c.op), []).append(c)
    return [c for cat in sorted(groups) for c in _even_sample(groups[cat], per_category)]


def compare(sample: int | None = None, path: str | os.PathLike[str] | None = None, m: Machine = DEFAULT,
            progress: Callable[[int, int], None] | None = None, ops: Iterable[str] | None = None,
            limit_bytes: int | None = None, per_category: int | None = None) -> dict[str, Any]:
    """Our model against torch-spyre's over the sweep plan (``sample``: that many
    configurations evenly spread over the plan; ``per_category``: instead, that
    many expressible ones of each category; ``ops``: only these operators;
    ``limit_bytes``: skip configurations whose largest operand is bigger). Each of
    our programs is planned and simulated once (configurations differing only in
    what our planner decides for itself, like coarse tiles, share it)."""
    t0 = time.perf_counter()
    cm = load_cost_model(path)
    plan = load_sweep(path)
    wanted = set(ops) if ops is not None else None
    chosen = [c for c in plan if wanted is None or c.op in wanted]
    configs = (_stratified(chosen, per_category, limit_bytes) if per_category is not None
               else _even_sample(chosen, sample))
    cache: dict[tuple, float | str] = {}
    rows, skipped = [], []
    for i, c in enumerate(configs):
        if progress:
            progress(i, len(configs))
        why = expressible(c)
        if why is None and limit_bytes is not None and _largest_operand(c) > limit_bytes:
            why = f"largest operand over {limit_bytes} bytes (run limit)"
        if why is not None:
            skipped.append({"config": dict(c.raw), "reason": why})
            continue
        key = _our_key(c)
        if key not in cache:
            try:
                cache[key] = our_device_ns(c, m)
            except (DoesNotFit, EmulatorError) as exc:
                cache[key] = f"our scheduler has no program for it: {str(exc).split(' (')[0]}"
        if isinstance(cache[key], str):
            skipped.append({"config": dict(c.raw), "reason": cache[key]})
            continue
        theirs = their_ns(c, cm)
        rows.append({"op": c.op, "category": category(c.op), "rows": c.rows, "cols": c.cols, "n": c.n,
                     "batch": c.batch, "cores": c.cores, "tiles": c.tiles, "lx": c.lx, "split": c.split,
                     "ours_ns": cache[key], "theirs_ns": theirs, "ratio": cache[key] / theirs,
                     "out_of_reference_scope": in_reference_scope(c)})
    return {"per_category": _per_category([r for r in rows if not r["out_of_reference_scope"]]),
            "out_of_reference_scope": _per_category([r for r in rows if r["out_of_reference_scope"]]),
            "configs_in_plan": len(plan), "configs_run": len(configs), "compared": len(rows),
            "expressible_in_plan": sum(expressible(c) is None for c in plan),
            "programs_simulated": len(cache), "skipped": skipped, "per_category_sample": per_category,
            "skipped_reasons": _count(s["reason"] for s in skipped), "sample": sample,
            "published_rms_percent": {k: list(v) for k, v in PUBLISHED_RMS.items()},
            "rows": rows, "wall_s": time.perf_counter() - t0}


def _largest_operand(c: Config) -> int:
    if c.op in _MATMUL_OPS:
        b = c.batch if c.op.startswith("bmm") else 1
        return 2 * max(b * c.rows * c.cols, c.cols * c.n * (b if "3d2d" not in c.op else 1), b * c.rows * c.n)
    return 2 * c.rows * c.cols * (c.mid if c.op == "transpose_outer" else 2 if c.op.startswith("cat") else 1)


def _count(xs: Iterable[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for x in xs:
        out[x] = out.get(x, 0) + 1
    return out


def _per_category(rows: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    out = {}
    for cat in sorted({r["category"] for r in rows}):
        sel = [r for r in rows if r["category"] == cat]
        st = _stats([(r["ours_ns"], r["theirs_ns"]) for r in sel])
        st["basis"] = basis(cat)
        band = PUBLISHED_RMS.get(cat)
        if band:
            st["within_band"] = sum(abs(r["ratio"] - 1) * 100 <= band[1] for r in sel) / len(sel)
            st["published_rms_percent"] = list(band)
        out[cat] = st
    return out


# ------------------------------------------------------------------ command line

#: Work divisions (B, M, N, K) of one GEMM both models are run on: torch-spyre's own
#: choice for 2048^3 on 32 cores first, then the other shapes of a 32-core grid.
IDENTICAL_SPLITS: tuple[tuple[int, int, int, int], ...] = ((1, 4, 8, 1), (1, 8, 4, 1), (1, 2, 16, 1),
                                                           (1, 32, 1, 1), (1, 1, 32, 1))


def matmul_on_identical_splits(m: Machine = DEFAULT, cm: ModuleType | None = None, size: int = 2048,
                               splits: Sequence[tuple[int, int, int, int]] = IDENTICAL_SPLITS) -> list[dict[str, Any]]:
    """The two matmul models on the same program: a ``size``^3 fp16 GEMM forced to
    each split, ours simulated with operand blocks shared over the ring (each block
    read from DRAM once per sharing group) and without (every core reads its own),
    against the reference's prediction for that split. Per row: modeled times (us),
    the DRAM bytes our program moves, the compulsory bytes and the compute floor
    at the sustained MAC rate, so the gap can be read as traffic or as compute."""
    cm = cm or load_cost_model()
    kernel = sk.mm(size, size, size)
    macs = size ** 3
    rows = []
    for split in splits:
        cores = math.prod(split)
        mc = m.replace(cores=cores)
        c = Config("mm", rows=size, cols=size, n=size, cores=cores, split=split)
        row: dict[str, Any] = {"split": list(split), "cores": cores, "theirs_us": their_ns(c, cm) / 1e3,
                               "compulsory_mib": 3 * size * size * 2 / 2**20,
                               "compute_floor_us": macs / (cores * mc.sustained_mac_per_ns_per_core) / 1e3}
        for share, label in ((True, "shared"), (False, "unshared")):
            p = plan_grid(kernel, mc, {}, kernel.name, split, share=share)
            tl = timing.simulate(p, mc, keep_events=False)
            row[f"ours_{label}_us"] = (tl.total_ns - mc.kernel_launch_ns) / 1e3
            row[f"ours_{label}_dram_mib"] = tl.dram_bytes / 2**20
        row["ours_shared_over_theirs"] = row["ours_shared_us"] / row["theirs_us"]
        rows.append(row)
    return rows


def command(args: argparse.Namespace) -> int:
    """``spyre-adapter reference`` (arguments checked by :mod:`spyre_adapter.cli.bench`)."""
    last = [time.perf_counter()]

    def progress(i: int, n: int) -> None:
        if time.perf_counter() - last[0] > 30:
            last[0] = time.perf_counter()
            print(f"  {i}/{n}", file=sys.stderr, flush=True)

    limit = args.max_operand_mib * 2**20 if args.max_operand_mib else None
    doc = compare(args.sample, args.reference, progress=progress, limit_bytes=limit,
                  per_category=args.per_category)
    doc["max_operand_mib"] = args.max_operand_mib
    print(f"{doc['compared']} configurations compared ({doc['programs_simulated']} programs simulated), "
          f"{len(doc['skipped'])} skipped, {doc['wall_s']:.0f} s")
    print(f"{'category':<18}{'n':>5}{'MAPE':>9}{'Spearman':>10}{'ours/theirs':>13}{'in band':>9}  basis")
    for cat, st in doc["per_category"].items():
        band = f"{st['within_band']:.0%}" if st["within_band"] is not None else "-"
        rho = f"{st['spearman']:.3f}" if st["spearman"] is not None else f"n<{MIN_SPEARMAN_N}"
        print(f"{cat:<18}{st['n']:>5}{st['mape']:>9.1%}{rho:>10}{st['median_ratio']:>13.2f}{band:>9}  {st['basis']}")
    for why, n in doc["skipped_reasons"].items():
        print(f"  skipped {n}: {why}")
    out = Path(args.json)
    out.write_text(json.dumps(doc, indent=1, default=list) + "\n")
    print(f"wrote {out}")
    return 0

