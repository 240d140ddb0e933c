"""The stable Kernel IR: JSON round trips, captured from a real compiled model."""

from __future__ import annotations

import sympy
import torch

from spyre_adapter.zoo import blocks as models
from spyre_shims import index as sidx
from spyre_shims import kernel_ir as kir
from spyre_shims.runtime import capture_graphs


def test_index_expressions_round_trip() -> None:
    i0, i1, s0 = sidx.index_symbol("i0"), sidx.index_symbol("i1"), sidx.index_symbol("s0")
    e = 8 * i0 + sidx.IndexMod(sidx.FloorDiv(i1 + s0, 4), 3) + sympy.Max(i0, 2)
    assert sidx.parse(sidx.to_json(e)) == e
    assert sidx.affine(8 * i0 + i1 + 3, [i0, i1]) == (3, [8, 1])
    assert sidx.affine(e, [i0, i1]) is None


def test_index_evaluation_matches_python() -> None:
    i0 = sidx.index_symbol("i0")
    e = sidx.IndexMod(sidx.FloorDiv(7 * i0 - 20, 3), 5)
    xs = torch.arange(-10, 30)
    got = sidx.compile_index(e)({i0: xs})
    assert got.tolist() == [((7 * x - 20) // 3) % 5 for x in range(-10, 30)]


def test_compiled_model_ir_round_trips_unchanged() -> None:
    cfg = models.ModelConfig(hidden=128, heads=4, kv_heads=2, intermediate=352, seq=16)
    model = models.build("llama-block", cfg).to("spyre")
    x = models.example_inputs("llama-block", cfg).to("spyre")
    with capture_graphs() as graphs:
        torch.compile(model, dynamic=False)(x)
    assert graphs, "no graph was announced"
    kinds = set()
    for g in graphs:
        text = kir.to_json(g)
        back = kir.from_json(text)
        assert back == g
        assert kir.to_json(back) == text
        kinds |= {type(k).__name__ for k in g.kernels}
    assert kinds == {"KernelGroup", "ExternKernel"}
    ops = {i.op for g in graphs for k in g.kernels if isinstance(k, kir.KernelGroup) for lk in k.kernels for i in lk.body}
    assert {"load", "store", "reduction", "rsqrt"} <= ops


def test_reader_rejects_newer_ir() -> None:
    g = kir.GraphIR("g", "spyre", ir_version=kir.IR_VERSION + 1)
    try:
        kir.from_json(kir.to_json(g))
    except ValueError as e:
        assert "newer" in str(e)
    else:
        raise AssertionError("a newer IR version was accepted")


def test_capability_query() -> None:
    import spyre_shims

    caps = spyre_shims.capabilities()
    assert caps.api_level == spyre_shims.API_LEVEL and caps.in_window
    assert caps.unavailable == () and caps.features["kernel_ir.extern"]
    assert {"exp", "rand"} <= caps.pointwise_ops and "welford_reduce" in caps.reductions
    assert caps.torch == torch.__version__.split("+")[0]
