"""AOTAutograd (``torch._functorch``) behind :mod:`spyre_shims.compat.aot`'s stable functions."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

__all__ = ["aot_module_simplified"]


def aot_module_simplified(mod: Any, args: Any, fw_compiler: Callable[..., Any], *,
                          bw_compiler: Callable[..., Any] | None, partition_fn: Callable[..., Any] | None,
                          decompositions: dict[Any, Any] | None, keep_inference_input_mutations: bool,
                          inference_compiler: Callable[..., Any] | None, **options: Any) -> Any:
    """``torch._functorch.aot_autograd.aot_module_simplified`` with the parameters every
    release shares; ``None`` leaves the release's default (its default partitioner is
    not ``None``-tolerant), ``options`` go through as given."""
    aot_autograd = importlib.import_module("torch._functorch.aot_autograd")
    given: dict[str, Any] = {"bw_compiler": bw_compiler, "partition_fn": partition_fn,
                             "decompositions": decompositions, "inference_compiler": inference_compiler}
    kwargs = {k: v for k, v in given.items() if v is not None}
    if keep_inference_input_mutations:
        kwargs["keep_inference_input_mutations"] = True
    return aot_autograd.aot_module_simplified(mod, args, fw_compiler, **kwargs, **options)
