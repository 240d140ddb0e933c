"""The speed benchmark's row selection and headline ratios (the measurements
themselves take minutes; ``spyre-adapter speed`` runs them)."""

from __future__ import annotations

import pytest

from spyre_adapter.bench import speed as bench_speed


def test_a_speed_row_is_its_median_process_and_keeps_every_ratio(monkeypatch: pytest.MonkeyPatch) -> None:
    runs = iter([{"steady_s": 0.09, "eager_s": 0.01}, {"error": "exit 1: killed"},
                 {"steady_s": 0.05, "eager_s": 0.01}, {"steady_s": 0.07, "eager_s": 0.01}])
    monkeypatch.setattr(bench_speed, "_run", lambda spec: {**spec, **next(runs)})
    row = bench_speed._median_run({"kind": "speed", "dtype": "fp32"}, 4)
    assert row["steady_s"] == 0.07 and row["processes"] == 3
    assert row["process_ratios"] == pytest.approx([5.0, 7.0, 9.0])


def test_every_process_failing_reports_the_failure(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bench_speed, "_run", lambda spec: {**spec, "error": "over 1800 s"})
    assert bench_speed._median_run({"kind": "speed"}, 3)["error"] == "over 1800 s"


def test_the_headline_is_the_worst_size_per_dtype() -> None:
    rows = {"speed": [
        {"dtype": "fp32", "steady_s": 0.06, "eager_s": 0.01},
        {"dtype": "fp32", "steady_s": 0.20, "eager_s": 0.05},
        {"dtype": "fp16", "steady_s": 0.03, "eager_s": 0.03},
        {"dtype": "fp16", "error": "exit 1"},
    ]}
    out = bench_speed.summary(rows)
    assert out["emulator_over_eager"] == out["emulator_over_eager_fp32"] == pytest.approx(6.0)
    assert out["emulator_over_eager_fp16"] == pytest.approx(1.0) and out["speed_errors"] == 1


def test_the_floor_is_the_worst_sizes_aten_time_over_eagers() -> None:
    rows = {"speed": [{"dtype": "fp32", "steady_s": 0.06, "eager_s": 0.01, "floor_over_eager": 2.5},
                      {"dtype": "fp32", "steady_s": 0.20, "eager_s": 0.05, "floor_over_eager": 3.1},
                      {"dtype": "fp16", "steady_s": 0.03, "eager_s": 0.03}]}
    out = bench_speed.summary(rows)
    assert out["emulator_floor_over_eager_fp32"] == pytest.approx(3.1)
    assert "emulator_floor_over_eager_fp16" not in out


def test_the_aten_split_counts_matmuls_and_copies_and_leaves_views_out() -> None:
    import torch
    a, b, out = torch.randn(4, 64, 64), torch.randn(4, 64, 64), torch.empty(4, 64, 64)

    def work(views: int) -> None:
        out.copy_(torch.bmm(a, b))
        for _ in range(views):
            out.view(-1).as_strided((8,), (1,))

    plain, viewed = bench_speed.aten_split(lambda: work(0), 3), bench_speed.aten_split(lambda: work(20), 3)
    for split in (plain, viewed):
        assert split["matmul_s"] > 0 and split["copy_s"] > 0
        assert split["aten_s"] == pytest.approx(split["matmul_s"] + split["copy_s"] + split["other_aten_s"])
    assert plain["views_s"] == 0 < viewed["views_s"]
    assert viewed["aten_ops"] == plain["aten_ops"]


def test_whole_graph_growth_is_attributed_to_torch_and_to_the_backend() -> None:
    rows = {"layers": [
        {"device": "spyre", "regional": False, "layers": 1, "compile_s": 2.0,
         "backend_s": {"compile": 0.5, "graph": 0.2, "first_launch": 0.3}},
        {"device": "spyre", "regional": False, "layers": 32, "compile_s": 18.0,
         "backend_s": {"compile": 1.0, "graph": 0.6, "first_launch": 1.4}},
        {"device": "aot_eager", "regional": False, "layers": 1, "compile_s": 0.5},
        {"device": "aot_eager", "regional": False, "layers": 32, "compile_s": 5.0},
        {"device": "cpu", "regional": False, "layers": 32, "error": "over 1800 s"},
    ]}
    out = bench_speed.summary(rows)
    assert out["compile_32_layers_over_1_layer_whole_graph"] == pytest.approx(9.0)
    assert out["compile_32_layers_over_1_layer_whole_graph_backend_share"] == pytest.approx(3.0)
    assert out["compile_32_layers_over_1_layer_dynamo_aot_whole_graph"] == pytest.approx(10.0)
    assert not any("inductor_cpu" in k for k in out)  # one side failed: no ratio


def test_nested_region_rows_have_their_own_ratio_and_leave_the_whole_graph_ones_alone() -> None:
    rows = {"layers": [
        {"device": "spyre", "layers": 1, "compile_s": 2.0},
        {"device": "spyre", "layers": 32, "compile_s": 18.0},
        {"device": "spyre", "nested": True, "layers": 1, "compile_s": 2.0},
        {"device": "spyre", "nested": True, "layers": 32, "compile_s": 3.0},
        {"device": "aot_eager", "nested": True, "layers": 1, "compile_s": 0.5},
        {"device": "aot_eager", "nested": True, "layers": 32, "compile_s": 1.5},
    ]}
    out = bench_speed.summary(rows)
    assert out["compile_32_layers_over_1_layer_whole_graph"] == pytest.approx(9.0)
    assert out["compile_32_layers_over_1_layer_whole_graph_nested_regions"] == pytest.approx(1.5)
    assert out["compile_32_layers_over_1_layer_dynamo_aot_whole_graph_nested_regions"] == pytest.approx(3.0)
    assert "compile_32_layers_over_1_layer_dynamo_aot_whole_graph" not in out
