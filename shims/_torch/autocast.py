"""Autocast (AMP) for a PrivateUse1 device.

torch registers autocast kernels for CUDA, CPU, XPU, MPS... but none for
``AutocastPrivateUse1``: a renamed PrivateUse1 device inside
``torch.autocast(device_type=...)`` hits a dispatch key without kernels. This
module registers them, with CUDA's documented policy: matmuls and convolutions
run in the autocast dtype, numerically sensitive pointwise ops, reductions,
norms and losses in float32, multi-input ops at the widest input dtype. Ops a
release lacks are skipped (feature detection by name).

Eligible tensors are floating point, on the device and not float64 (the rule
``torch.autocast`` itself applies to arguments).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch.utils._pytree import tree_flatten, tree_map

_KEY = "AutocastPrivateUse1"

#: Run in the autocast dtype (16-bit).
LOWER_PRECISION = (
    "mm", "bmm", "addmm", "baddbmm", "addbmm", "addmv", "addr", "mv", "matmul", "linear", "chain_matmul",
    "linalg_multi_dot", "prelu", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d",
    "conv_transpose3d", "convolution", "_convolution", "scaled_dot_product_attention",
)
#: Run in float32.
FP32 = (
    "acos", "asin", "cosh", "erfinv", "exp", "expm1", "log", "log10", "log2", "log1p", "reciprocal", "rsqrt",
    "sinh", "tan", "pow", "softplus", "layer_norm", "group_norm", "rms_norm", "frobenius_norm", "nuclear_norm",
    "cosine_similarity", "poisson_nll_loss", "cosine_embedding_loss", "nll_loss", "nll_loss2d",
    "hinge_embedding_loss", "kl_div", "l1_loss", "smooth_l1_loss", "huber_loss", "mse_loss", "margin_ranking_loss",
    "multilabel_margin_loss", "soft_margin_loss", "triplet_margin_loss", "multi_margin_loss",
    "binary_cross_entropy_with_logits", "dist", "pdist", "cdist", "renorm", "logsumexp",
)
#: Reductions that accumulate in float32 through their ``dtype`` argument
#: (unless the caller chose one).
FP32_DTYPE_ARG = ("prod", "softmax", "log_softmax", "cumprod", "cumsum", "linalg_vector_norm",
                  "linalg_matrix_norm", "sum")
#: Run at the widest floating dtype among the inputs.
PROMOTE = ("addcdiv", "addcmul", "atan2", "bilinear", "cross", "dot", "grid_sampler", "index_put", "scatter_add",
           "tensordot")

_libs: dict[str, torch.library.Library] = {}


def policy() -> dict[str, str]:
    """Op name -> ``"lower_precision"`` | ``"fp32"`` | ``"fp32_dtype_arg"`` | ``"promote"``."""
    out: dict[str, str] = {}
    for names, kind in ((LOWER_PRECISION, "lower_precision"), (FP32, "fp32"), (FP32_DTYPE_ARG, "fp32_dtype_arg"),
                        (PROMOTE, "promote")):
        out.update(dict.fromkeys(names, kind))
    return out


def _overloads(name: str) -> Iterable[Any]:
    """Functional overloads of ``aten::name`` (no out=, no in-place)."""
    packet = getattr(torch.ops.aten, name, None)
    if packet is None:
        return []
    ops = []
    for overload in packet.overloads():
        op = getattr(packet, overload)
        if any(a.alias_info is not None and a.alias_info.is_write for a in op._schema.arguments):
            continue
        ops.append(op)
    return ops


def _eligible(device: str) -> Callable[[Any], bool]:
    def check(x: Any) -> bool:
        return (isinstance(x, torch.Tensor) and x.is_floating_point() and x.device.type == device
                and x.dtype is not torch.float64)

    return check


def _cast_to(args: Any, dtype: torch.dtype, eligible: Callable[[Any], bool]) -> Any:
    return tree_map(lambda x: x.to(dtype) if eligible(x) and x.dtype != dtype else x, args)


def _dtype_arg_index(op: Any) -> int | None:
    for i, a in enumerate(op._schema.arguments):
        if a.name == "dtype":
            return i
    return None


def _kernel(op: Any, kind: str, device: str) -> Callable[..., Any]:
    eligible = _eligible(device)
    exclude = torch._C.DispatchKeySet(torch._C.DispatchKey.AutocastPrivateUse1)
    dtype_index = _dtype_arg_index(op)

    def run(*args: Any, **kwargs: Any) -> Any:
        if kind == "lower_precision":
            args, kwargs = _cast_to((args, kwargs), torch.get_autocast_dtype(device), eligible)
        elif kind == "fp32":
            args, kwargs = _cast_to((args, kwargs), torch.float32, eligible)
        elif kind == "fp32_dtype_arg" and dtype_index is not None:
            given = kwargs.get("dtype") is not None or (len(args) > dtype_index and args[dtype_index] is not None)
            first = next((x for x in tree_flatten(args)[0] if isinstance(x, torch.Tensor)), None)
            if not given and eligible(first) and first.dtype in (torch.float16, torch.bfloat16):
                if len(args) > dtype_index:
                    args = (*args[:dtype_index], torch.float32, *args[dtype_index + 1:])
                else:
                    kwargs = {**kwargs, "dtype": torch.float32}
        elif kind == "promote":
            floats = [x.dtype for x in tree_flatten((args, kwargs))[0] if eligible(x)]
            if floats:
                widest = functools.reduce(torch.promote_types, floats)
                args, kwargs = _cast_to((args, kwargs), widest, eligible)
        with torch._C._ExcludeDispatchKeyGuard(exclude):
            return op(*args, **kwargs)

    return run


def install(device: str) -> list[str]:
    """Register the autocast kernels for the PrivateUse1 device ``device``
    (idempotent); returns the overloads registered."""
    if device in _libs:
        return []
    lib = torch.library.Library("aten", "IMPL")  # noqa: TOR901 - kernels for an existing namespace
    fallthrough = torch.library.Library("_", "IMPL")  # noqa: TOR901
    # Every op without an autocast rule passes through unchanged (as on CUDA).
    fallthrough.fallback(torch.library.fallthrough_kernel, dispatch_key=_KEY)
    done = []
    for name, kind in policy().items():
        for op in _overloads(name):
            lib.impl(op._schema.name.split("::")[1] + (f".{op._overloadname}" if op._overloadname != "default" else ""),
                     _kernel(op, kind, device), _KEY)
            done.append(str(op))
    _libs[device] = lib
    _libs[f"{device}:fallthrough"] = fallthrough
    return done
