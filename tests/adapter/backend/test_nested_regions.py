"""Subgraphs on the device: a whole-graph compile whose decoder layers are
nested compile regions (PyTorch's hierarchical compilation) lowers one layer
once, runs its matmuls as device programs (not eagerly on the host), and
matches eager (what is held in LX across a subgraph call: test_residency.py)."""

from __future__ import annotations

import pytest
import torch

from spyre_shims import kernel_ir as kir
from spyre_shims import runtime

from spyre_adapter.backend.session import Session, activate
from spyre_adapter.zoo import blocks

pytestmark = pytest.mark.skipif(not hasattr(torch.compiler, "nested_compile_region"),
                                reason="this torch has no torch.compiler.nested_compile_region")


def _compile_tiny(layers: int, nested: bool) -> tuple[torch.Tensor, torch.Tensor, Session, list[kir.GraphIR]]:
    cfg = blocks.ModelConfig(hidden=128, heads=2, kv_heads=1, intermediate=256, seq=16, vocab=256, layers=layers,
                             nested_regions=nested)
    model = blocks.build("llama-tiny", cfg, dtype=torch.float32)
    ids = blocks.example_inputs("llama-tiny", cfg, dtype=torch.float32)
    with torch.no_grad():
        want = model(ids)
        session = Session()
        with activate(session), runtime.capture_graphs() as graphs:
            torch._dynamo.reset()
            compiled = torch.compile(model.to("spyre"), dynamic=False, fullgraph=True,
                                     options={"fx_graph_cache": False})
            got = compiled(ids.to("spyre")).cpu()
    return got, want, session, list(graphs)


def _extern_ops(graphs: list[kir.GraphIR]) -> list[str]:
    return [k.op for g in graphs for k in g.kernels if isinstance(k, kir.ExternKernel)]


def test_nested_layers_are_lowered_once_and_their_matmuls_run_on_the_device() -> None:
    got2, want2, s2, graphs2 = _compile_tiny(2, nested=True)
    got4, want4, s4, graphs4 = _compile_tiny(4, nested=True)
    for got, want, s in ((got2, want2, s2), (got4, want4, s4)):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
        assert not s.report.eager_ops, s.report.eager_ops  # no matmul ran eagerly on the host
        assert not s.report.fallbacks
    # one subgraph for the layer, whatever the depth: the same kernels, planned once
    assert len(graphs2) == len(graphs4) == 2
    assert sum(len(g.kernels) for g in graphs4) == sum(len(g.kernels) for g in graphs2)
    # the layer's seven projections and its attention are device kernels of the subgraph;
    # the LM head is the top graph's
    layer = next(g for g in graphs4 if not dict(g.meta).get("calls_subgraphs"))
    assert sorted(_extern_ops([layer])) == ["attention"] + ["mm"] * 7
    # every layer's launches ran: four layers launch twice the kernels two do, less the top graph's
    top = next(g for g in graphs4 if dict(g.meta).get("calls_subgraphs"))
    per_layer = (s4.report.launch_count - s2.report.launch_count) // 2
    assert per_layer == len(layer.kernels)
    assert s4.report.launch_count == 4 * per_layer + len(top.kernels)


def test_without_regions_every_layer_is_lowered() -> None:
    got, want, session, graphs = _compile_tiny(2, nested=False)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    assert len(graphs) == 1 and len(_extern_ops(graphs)) == 2 * 8 + 1


def test_the_branches_of_cond_run_their_matmuls_on_the_device() -> None:
    def f(p: torch.Tensor, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return torch.cond(p.sum() > 0, lambda x, w: (x @ w).relu(), lambda x, w: (x @ w) * 2, (x, w))

    x, w = torch.randn(64, 128), torch.randn(128, 32)
    session = Session()
    with activate(session), runtime.capture_graphs() as graphs:
        compiled = torch.compile(f, dynamic=False)
        for sign in (1.0, -1.0):
            p = torch.full((4,), sign)
            torch.testing.assert_close(compiled(p.to("spyre"), x.to("spyre"), w.to("spyre")).cpu(), f(p, x, w),
                                       rtol=1e-4, atol=1e-4)
    branches = [g for g in graphs if not dict(g.meta).get("calls_subgraphs")]
    assert len(branches) == 2 and _extern_ops(branches) == ["mm", "mm"]
    # only the predicate is read on the host
    assert set(session.report.eager_ops) == {"aten._local_scalar_dense.default"}
