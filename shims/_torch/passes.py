"""Graph rewrites that route calls to hand-written kernels (see spyre_shims.kernels).

One pre-grad pass, chained into Inductor's ``pre_grad_custom_pass`` slot through
the patch registry (any pass already there still runs first): before
decomposition, a call of a replaced torch function whose tensors live on a
kernel's device, and which the kernel's ``bind`` accepts, becomes a call of the
kernel's custom op.
"""

from __future__ import annotations

import hashlib
from typing import Any

import torch
from torch.utils._pytree import tree_flatten, tree_map

from .._registry import registered_kernels
from . import inductor as ind
from .patches import REGISTRY, Patch

_NAME = "kernel-rewrites"


def _example(x: Any) -> Any:
    return x.meta.get("example_value", x) if isinstance(x, torch.fx.Node) else x


def rewrite(graph: torch.fx.Graph) -> int:
    """Rewrite accepted calls in ``graph``; returns how many."""
    by_target: dict[Any, list[Any]] = {}
    for spec in registered_kernels().values():
        by_target.setdefault(spec.replaces, []).append(spec)
    done = 0
    for node in list(graph.nodes):
        specs = by_target.get(node.target) if node.op == "call_function" else None
        if not specs:
            continue
        ex_args, ex_kwargs = tree_map(_example, (node.args, node.kwargs))
        tensors = [t for t in tree_flatten((ex_args, ex_kwargs))[0] if isinstance(t, torch.Tensor)]
        if not tensors or any(t.requires_grad for t in tensors):
            continue  # hand-written kernels are inference kernels: training keeps the generic path
        by_id = {id(_example(n)): n for n in tree_flatten((node.args, node.kwargs))[0] if isinstance(n, torch.fx.Node)}
        for spec in specs:
            if tensors[0].device.type != spec.device or not spec.enabled():
                continue
            bound = spec.bind(*ex_args, **ex_kwargs)
            if bound is None:
                continue
            args = tuple(by_id.get(id(a), a) if isinstance(a, torch.Tensor) else a for a in bound)
            with graph.inserting_before(node):
                new = graph.call_function(spec.op, args)
            new.meta = dict(node.meta)
            node.replace_all_uses_with(new)
            graph.erase_node(node)
            done += 1
            break
    return done


def install_kernel_rewrites() -> None:
    """Hold the rewrite pass in Inductor's pre-grad slot (once)."""
    if any(p["name"] == _NAME and p["active"] for p in REGISTRY.report()):
        return
    Base = ind.resolve("kernels.rewrite", "torch._inductor.custom_graph_pass:CustomGraphPass")

    def make(original: Any, fired: Any) -> Any:
        class KernelRewrites(Base):  # type: ignore[misc,valid-type]
            def __reduce__(self) -> Any:
                # Older releases pickle config values into the FX-cache key: a pass
                # pickles as its identity.
                return (str, (repr(self.uuid()),))

            def __call__(self, graph: torch.fx.Graph) -> None:
                if original is not None:
                    original(graph)
                if rewrite(graph):
                    fired()

            def uuid(self) -> Any:
                mine = hashlib.sha256(repr(sorted((k.name, k.device, k.schema, k.enabled())
                                                  for k in registered_kernels().values())).encode()).hexdigest()
                inner = original.uuid() if original is not None and hasattr(original, "uuid") else None
                return (mine, inner)

        return KernelRewrites()

    REGISTRY.register(Patch(_NAME, "torch._inductor.config:pre_grad_custom_pass", make,
                            "route calls on a vendor's device to its hand-written kernels", allow_none=True))
    REGISTRY.apply(_NAME)
