"""Complex arithmetic as pairs of real tensors, for a backend without complex dtypes.

Inductor generates no code for complex tensors: each complex op falls back to
aten. Rotary embeddings written with complex numbers (DeepSeek-V2, Llama 4:
``view_as_complex(x) * polar(1, freqs)``, then ``view_as_real``) are a chain of
such ops. This post-grad pass rewrites a graph whose complex values all come
from ops it knows and all end in ops it knows into the same computation on
(real, imaginary) pairs; any other complex value leaves the graph unchanged
(and the ops fall back, visibly, as before).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.fx import Graph, Node

_aten = torch.ops.aten

#: Ops that act on a complex tensor as on each of its parts (same arguments).
_ALIKE = {op for op in (getattr(getattr(_aten, name, None), overload, None) for name, overload in (
    ("view", "default"), ("_unsafe_view", "default"), ("unsqueeze", "default"), ("squeeze", "dim"),
    ("squeeze", "default"), ("squeeze", "dims"), ("expand", "default"), ("permute", "default"),
    ("transpose", "int"), ("slice", "Tensor"), ("select", "int"), ("clone", "default"), ("alias", "default"),
    ("t", "default"), ("repeat", "default"), ("index_select", "default"), ("cat", "default"))) if op is not None}
#: Ops that make a real tensor from a complex one.
_TO_REAL = {_aten.view_as_real.default, _aten.real.default, _aten.imag.default}


def _val(x: Any) -> Any:
    return x.meta.get("val") if isinstance(x, Node) else x


def _is_complex(x: Any) -> bool:
    if isinstance(x, (list, tuple)):
        return any(_is_complex(y) for y in x)
    v = _val(x)
    return isinstance(v, torch.Tensor) and v.is_complex()


def _makes_complex(node: Node) -> bool:
    """Whether the pass knows how to build ``node``'s value as a pair."""
    t = node.target
    if t in (_aten.view_as_complex.default, _aten.polar.default, _aten.complex.default):
        return True
    if t in (_aten.mul.Tensor, _aten.add.Tensor, _aten.sub.Tensor):
        return len(node.args) == 2 and not node.kwargs
    if t is _aten.div.Tensor:
        return len(node.args) == 2 and not node.kwargs and not _is_complex(node.args[1])
    if t in _ALIKE:
        return not any(_is_complex(a) for a in node.args[1:])
    if t is torch.ops.prims.convert_element_type.default:
        if not _is_complex(node.args[0]):  # a real tensor made complex: (x, 0)
            return isinstance(_val(node.args[0]), torch.Tensor)
        return _val(node.args[0]).dtype == node.args[1]
    return False


def realify_complex(graph: Graph) -> int:
    """Rewrite ``graph``'s complex subgraphs on real pairs; returns how many
    complex values were replaced (0: none, or some complex value the pass does
    not know - the graph is then untouched)."""
    complex_nodes = [n for n in graph.nodes if _is_complex(n)]
    if not complex_nodes:
        return 0
    for n in complex_nodes:
        if n.op != "call_function" or not _makes_complex(n):
            return 0
        for user in n.users:
            if not _is_complex(user) and user.target not in _TO_REAL:
                return 0
    fake_mode = next((v.fake_mode for n in graph.nodes for v in [_val(n)]
                      if isinstance(v, torch.Tensor) and hasattr(v, "fake_mode")), None)
    if fake_mode is None:
        return 0
    pairs: dict[Node, tuple[Any, Any]] = {}

    def call(target: Callable[..., Any], *args: Any) -> Node:
        node = graph.call_function(target, args)
        with fake_mode:
            node.meta["val"] = target(*[_arg_val(a) for a in args])
        return node

    def _arg_val(a: Any) -> Any:
        if isinstance(a, (list, tuple)):
            return type(a)(_arg_val(x) for x in a)
        return _val(a)

    def parts(x: Any) -> tuple[Any, Any]:
        if isinstance(x, Node) and x in pairs:
            return pairs[x]
        return x, None  # a real tensor or a number: no imaginary part

    def mul(a: Any, b: Any) -> Any:
        return call(_aten.mul.Tensor, a, b)

    for n in complex_nodes:
        with graph.inserting_before(n):
            t, args = n.target, n.args
            if t is _aten.view_as_complex.default:
                pairs[n] = (call(_aten.select.int, args[0], -1, 0), call(_aten.select.int, args[0], -1, 1))
            elif t is _aten.polar.default:
                pairs[n] = (mul(args[0], call(_aten.cos.default, args[1])),
                            mul(args[0], call(_aten.sin.default, args[1])))
            elif t is _aten.complex.default:
                pairs[n] = (args[0], args[1])
            elif t is _aten.mul.Tensor:
                (ar, ai), (br, bi) = parts(args[0]), parts(args[1])
                if ai is not None and bi is not None:
                    pairs[n] = (call(_aten.sub.Tensor, mul(ar, br), mul(ai, bi)),
                                call(_aten.add.Tensor, mul(ar, bi), mul(ai, br)))
                else:
                    (cr, ci), real = ((ar, ai), br) if ai is not None else ((br, bi), ar)
                    pairs[n] = (mul(cr, real), mul(ci, real))
            elif t in (_aten.add.Tensor, _aten.sub.Tensor):
                (ar, ai), (br, bi) = parts(args[0]), parts(args[1])
                if ai is not None and bi is not None:
                    im = call(t, ai, bi)
                elif ai is not None:
                    im = ai
                else:
                    im = bi if t is _aten.add.Tensor else call(_aten.neg.default, bi)
                pairs[n] = (call(t, ar, br), im)
            elif t is _aten.div.Tensor:
                ar, ai = parts(args[0])
                pairs[n] = (call(t, ar, args[1]), call(t, ai, args[1]))
            elif t is torch.ops.prims.convert_element_type.default and not _is_complex(args[0]):
                re = call(t, args[0], args[1].to_real())
                # zeros shaped like re from pointwise ops a post-grad graph may
                # hold (nothing compares below -inf, NaN included)
                pairs[n] = (re, call(t, call(_aten.lt.Scalar, re, float("-inf")), args[1].to_real()))
            elif t is torch.ops.prims.convert_element_type.default:
                pairs[n] = parts(args[0])
            elif t is _aten.cat.default:
                halves = [parts(x) for x in args[0]]
                rest = args[1:]
                pairs[n] = (call(t, [h[0] for h in halves], *rest), call(t, [h[1] for h in halves], *rest))
            else:  # acts alike on both parts
                re, im = parts(args[0])
                pairs[n] = (call(t, re, *args[1:]), call(t, im, *args[1:]))
    for n in complex_nodes:
        for user in list(n.users):
            if _is_complex(user):
                continue
            re, im = pairs[n]
            with graph.inserting_before(user):
                if user.target is _aten.view_as_real.default:  # (post-grad graphs hold no stack)
                    new = call(_aten.cat.default, [call(_aten.unsqueeze.default, re, -1),
                                                   call(_aten.unsqueeze.default, im, -1)], -1)
                else:
                    new = re if user.target is _aten.real.default else im
            user.replace_all_uses_with(new)
            graph.erase_node(user)
    for n in reversed(complex_nodes):
        if not n.users:
            graph.erase_node(n)
    graph.lint()
    return len(complex_nodes)
