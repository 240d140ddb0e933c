"""One differential check: a function compiled for the spyre device against the
same function run eagerly on the CPU, classified strictly.

The compiled function is called twice. The first call (which compiles) is the
one compared and the one whose FallbackWarnings are collected; the second call
runs the already-compiled program and counts the aten ops that ran eagerly on
device tensors. Compilation itself may run eager ops on the device (Inductor
constant-folds creation ops), so only the second call tells whether compute ran
on the host outside any compiled kernel - e.g. after a Dynamo graph break -
without a FallbackWarning. Such host execution is reported as a *silent*
fallback, never as a device pass.
"""

from __future__ import annotations

import dataclasses
import math
import re
import warnings
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from torch.utils._pytree import tree_flatten, tree_map

from spyre_shims.backend import FallbackWarning
from spyre_shims.device import eager_op_counts, host_view, registered_device
from spyre_shims.runtime import capture_graphs

from spyre_adapter.backend.session import current
from spyre_adapter.harness.on_device import announced_fallbacks

PASS = "pass"
PASS_NO_KERNEL = "pass (no kernel)"
FALLBACK = "fallback"
FAIL = "fail"
XFAIL = "xfail"
XPASS = "xpass"
ERROR = "error"
SKIPPED = "skipped"

#: Arguments of one call: positional and keyword.
Args = tuple[Sequence[Any], Mapping[str, Any]]
#: Builds fresh arguments on the given device ("cpu" for the eager reference).
MakeArgs = Callable[[str], Args]


@dataclasses.dataclass
class Outcome:
    """The classified result of one check."""

    status: str
    fallbacks: tuple[str, ...] = ()
    launches: int = 0
    kernels: int = 0
    max_abs_err: float | None = None
    detail: str = ""
    #: Host execution that no FallbackWarning announced (found by counting eager ops).
    silent: bool = False

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["fallbacks"] = list(self.fallbacks)
        keep = ("status", "launches", "kernels")
        return {k: v for k, v in d.items() if k in keep or (v is not None and v is not False and v != "" and v != [])}


# ------------------------------------------------------------------ devices

def place(x: Any, device: str) -> Any:
    """``x`` with every tensor copied to ``device`` (always a copy) keeping sizes,
    strides and storage offset (``Tensor.to`` would make offset views dense)."""

    def move(t: Any) -> Any:
        if not isinstance(t, torch.Tensor):
            return t
        t = t.detach()
        if t.layout != torch.strided or t.numel() == 0 or _dense(t):
            return t.to(device, copy=True)
        n = t.untyped_storage().nbytes() // t.element_size()
        base = t.as_strided((n,), (1,), 0).to(device, copy=True)
        return base.as_strided(t.shape, t.stride(), t.storage_offset())

    return tree_map(move, x)


def _dense(t: torch.Tensor) -> bool:
    return t.is_contiguous() and t.storage_offset() == 0 and t.untyped_storage().nbytes() == t.numel() * t.element_size()


def place_kwargs(kwargs: Mapping[str, Any], device: str) -> dict[str, Any]:
    """Keyword arguments for a run on ``device``: tensors copied there, and a
    ``device=`` argument (factory ops) pointed at ``device``."""
    out = dict(place(dict(kwargs), device))
    if isinstance(out.get("device"), (str, torch.device)):
        out["device"] = device
    return out


# ------------------------------------------------------------------ comparison

def compare(expected: Any, got: Any, *, atol: float, rtol: float) -> tuple[str | None, float | None]:
    """``(mismatch description or None, max abs error over float tensors)``."""
    exp_flat, exp_spec = tree_flatten(expected)
    got_flat, got_spec = tree_flatten(got)
    if len(exp_flat) != len(got_flat):
        return f"output structure differs: {exp_spec} vs {got_spec}", None
    worst: float | None = None
    for i, (e, g) in enumerate(zip(exp_flat, got_flat)):
        if isinstance(e, torch.Tensor):
            if not isinstance(g, torch.Tensor):
                return f"output {i}: expected a tensor, got {type(g).__name__}", worst
            msg, err = _compare_tensor(e, _on_host(g), atol, rtol)
            if err is not None:
                worst = err if worst is None else max(worst, err)
            if msg:
                return f"output {i}: {msg}", worst
        elif isinstance(e, float) and isinstance(g, (int, float)):
            if not (math.isclose(e, g, rel_tol=rtol, abs_tol=atol) or (math.isnan(e) and math.isnan(g))):
                return f"output {i}: {g!r} != {e!r}", worst
        elif e != g:
            return f"output {i}: {g!r} != {e!r}", worst
    return None, worst


#: Tensors with more elements are compared in chunks (no full-size float32 copies).
CHUNKED_COMPARE_NUMEL = 1 << 24


def _compare_tensor(e: torch.Tensor, g: torch.Tensor, atol: float, rtol: float) -> tuple[str | None, float | None]:
    if g.shape != e.shape or g.dtype != e.dtype:
        return f"got {g.dtype}{list(g.shape)}, expected {e.dtype}{list(e.shape)}", None
    if e.numel() > CHUNKED_COMPARE_NUMEL and not e.dtype.is_complex:
        return _compare_chunked(e, g, atol, rtol)
    if not (e.dtype.is_floating_point or e.dtype.is_complex):
        if torch.equal(g, e):
            return None, None
        bad = int((g != e).sum())
        return f"{bad} of {e.numel()} elements differ (exact compare)", None
    if torch.equal(g, e):
        return None, 0.0
    diff = (g - e).abs() if e.dtype.is_complex else (g.float() - e.float()).abs()
    finite = diff[torch.isfinite(diff)]
    err = float(finite.max()) if finite.numel() else 0.0
    try:
        torch.testing.assert_close(g, e, atol=atol, rtol=rtol, equal_nan=True, check_device=False)
    except AssertionError as exc:
        return _first_lines(str(exc), 4), err
    return None, err


def _compare_chunked(e: torch.Tensor, g: torch.Tensor, atol: float, rtol: float,
                     chunk: int = CHUNKED_COMPARE_NUMEL) -> tuple[str | None, float | None]:
    """``torch.testing.assert_close``'s rule (equal, both NaN, or
    ``|g - e| <= atol + rtol * |e|``; integers exact) over chunks of the
    flattened tensors: memory stays bounded by the chunk, not the tensor."""
    ef, gf = e.reshape(-1), g.reshape(-1)  # views for the dense results of real ops
    exact = not e.dtype.is_floating_point
    worst, bad, first = 0.0, 0, -1
    for start in range(0, ef.numel(), chunk):
        a, b = gf[start:start + chunk], ef[start:start + chunk]
        if exact:
            wrong = a != b
        else:
            a32, b32 = a.float(), b.float()
            diff = (a32 - b32).abs()
            same = (a32 == b32) | (a32.isnan() & b32.isnan())
            wrong = ~same & ~(diff <= atol + rtol * b32.abs())
            finite = diff[torch.isfinite(diff)]
            if finite.numel():
                worst = max(worst, float(finite.max()))
        n = int(wrong.sum())
        if n and first < 0:
            first = start + int(wrong.nonzero()[0, 0])
        bad += n
    if not bad:
        return None, None if exact else worst
    what = "elements differ (exact compare)" if exact else "elements not close"
    return f"{bad} of {e.numel()} {what}; first at flat index {first}", None if exact else worst


def _first_lines(text: str, n: int) -> str:
    return " | ".join(line.strip() for line in text.strip().splitlines()[:n] if line.strip())


# ------------------------------------------------------------------ fallbacks

_FALLBACK_NAME = re.compile(r"fallback to host execution: [\w.]+: (aten op [^\s:]+|op \S+|dtype \S+)")


def fallback_name(message: str) -> str:
    """The op a FallbackWarning names (``aten op aten.sort.stable``, ``op bessel_j0``, ``dtype float64``)."""
    m = _FALLBACK_NAME.search(message)
    return m.group(1) if m else _first_lines(message, 1)[:80]


def _silent_ops(eager: Counter[str], announced: Sequence[str]) -> list[str]:
    """Eager host ops not covered by any FallbackWarning. An announced aten-op
    fallback runs on the host through its own decomposition (e.g. fft pads with
    ``fill_``), so its sub-ops cannot be told apart: they count as covered."""
    if any("aten op " in msg for msg in announced):
        return []
    out = []
    for op in sorted(eager):
        base = op.split(".")[1] if op.startswith("aten.") else op
        if not any(re.search(rf"\b{re.escape(base)}\b", msg) for msg in announced):
            out.append(op)
    return out


# ------------------------------------------------------------------ the check

def check(fn: Callable[..., Any], make_args: MakeArgs, *, atol: float, rtol: float,
          device: str = "spyre", compiled: Callable[..., Any] | None = None,
          reference: Callable[[], Any] | None = None) -> Outcome:
    """Classify ``fn`` compiled for ``device`` against CPU eager.

    ``make_args(device)`` builds fresh inputs on ``device`` (the same values each
    time), so in-place ops see the same state in every run and large inputs are
    never held twice longer than needed. ``compiled`` reuses a compiled function
    (same op, other shapes); by default a fresh ``torch.compile(fn)`` is used.
    ``reference()``, if given, is a second accepted expectation (e.g. the op
    computed in fp32 on the same inputs and rounded to the low-precision dtype:
    Inductor computes fp16/bf16 intermediates in fp32 by design, so a compiled
    result may legitimately be closer to that than to eager's). Exceptions from
    the eager CPU run propagate (the case itself is invalid).
    """
    args, kwargs = make_args("cpu")
    versions = [t._version if isinstance(t, torch.Tensor) else None for t in tree_flatten((args, kwargs))[0]]
    expected = fn(*args, **kwargs)
    flat = tree_flatten((args, kwargs))[0]
    mutated = {i: t for i, (t, v) in enumerate(zip(flat, versions)) if isinstance(t, torch.Tensor) and t._version != v}
    del args, kwargs, flat

    compiled = compiled or torch.compile(fn, dynamic=False)
    launches0 = current().report.launch_count
    try:
        dev_args, dev_kwargs = make_args(device)
        with announced_fallbacks() as announced, capture_graphs() as graphs:
            got = compiled(*dev_args, **dev_kwargs)
        got = tree_map(_on_host, got)
        dev_flat = tree_flatten((dev_args, dev_kwargs))[0]
        got_mutated = {i: _on_host(dev_flat[i]) for i in mutated}
        del dev_args, dev_kwargs, dev_flat
    except Exception as exc:  # noqa: BLE001 - any compile/run error is the finding
        return Outcome(FAIL, detail=f"{type(exc).__name__}: {_first_lines(str(exc), 3)}"[:600])
    launches = current().report.launch_count - launches0
    kernels = sum(len(g.kernels) for g in graphs)

    note = ""
    mismatch, err = compare(expected, got, atol=atol, rtol=rtol)
    if mismatch is None and mutated:
        mismatch, err2 = compare(list(mutated.values()), list(got_mutated.values()), atol=atol, rtol=rtol)
        mismatch = f"mutated input {mismatch}" if mismatch else None
        err = max(e for e in (err, err2) if e is not None) if err is not None or err2 is not None else None
    if mismatch and reference is not None and not mutated:
        alt, alt_err = compare(reference(), got, atol=atol, rtol=rtol)
        if alt is None:
            mismatch, err, note = None, alt_err, f"matches the fp32-computed reference, not eager ({mismatch})"
    del expected, got, got_mutated
    if mismatch:
        return Outcome(FAIL, tuple(sorted({fallback_name(m) for m in announced})), launches, kernels, err,
                       f"wrong result: {mismatch}"[:600])

    try:
        eager = _eager_ops_of_rerun(compiled, make_args, device)
    except Exception as exc:  # noqa: BLE001
        return Outcome(FAIL, (), launches, kernels, err, f"second call failed: {type(exc).__name__}: {exc}"[:600])
    silent = _silent_ops(eager, announced)
    names = sorted({fallback_name(m) for m in announced} | {f"eager {op} (no FallbackWarning)" for op in silent})
    if names:
        return Outcome(FALLBACK, tuple(names), launches, kernels, err, note[:600], silent=bool(silent))
    if launches == 0:
        return Outcome(PASS_NO_KERNEL, (), 0, kernels, err, "no device kernel launched: nothing to compute (view, metadata, no-op conversion or copy)")
    return Outcome(PASS, (), launches, kernels, err, note[:600])


def _on_host(t: Any) -> Any:
    """A device result as a CPU tensor: the host-backed device's memory itself
    (an alias, no copy), or a copy from any other device."""
    if not isinstance(t, torch.Tensor):
        return t
    if t.device.type == registered_device():
        return host_view(t)
    return t.cpu()


def _eager_ops_of_rerun(compiled: Callable[..., Any], make_args: MakeArgs, device: str) -> Counter[str]:
    dev_args, dev_kwargs = make_args(device)
    before = eager_op_counts()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FallbackWarning)
        compiled(*dev_args, **dev_kwargs)
    return eager_op_counts() - before
