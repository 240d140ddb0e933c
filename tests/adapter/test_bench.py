"""The benchmark harness on a few kernels: rows carry the roofline figures and
both baselines, and the summary keys the issue asks for."""

from __future__ import annotations

from spyre_adapter import bench
from spyre_adapter.machine import DEFAULT


def test_gemm_rows_and_baselines() -> None:
    row = bench.kernel_row(bench.gemm_kernel("g", 2048, 2048, 2048), "gemm", "g", DEFAULT)
    row["shape"] = [2048, 2048, 2048]
    assert 0.5 < row["eta_sustained"] <= 1.0 and row["eta_datasheet"] < row["eta_sustained"]
    assert row["rho"] >= 1.0 and row["check_error"] is None
    # the plan beats both baselines; one core is far from the card's roof
    assert row["single_core"]["modeled_ns"] > 10 * row["modeled_ns"]
    assert row["even_split"]["modeled_ns"] > row["modeled_ns"]
    assert row["single_core"]["eta_sustained"] < 0.1
    s = bench.summarize([row], {"ratio": 1.5}, [{"error": 0.05}, {"error": -0.2}], {})
    for key in ("gemm_eta_sustained_geomean", "chain_rho_max", "chain_eta_dram_geomean", "emulator_over_eager",
                "lx_violations", "baseline_single_core_gemm_eta_geomean", "baseline_even_split_gemm_eta_geomean",
                "calibration_error_max"):
        assert key in s
    assert s["calibration_error_max"] == 0.2 and s["lx_violations"] == 0


def test_chain_kernel_rows() -> None:
    rows = bench.bench_chains(DEFAULT, quick=True)
    assert rows and all(r["source"] == "chain" and r["kind"] == "loop" for r in rows)
    assert all(1.0 <= r["rho"] <= 1.1 and 0 < r["eta_dram"] <= 1.0 for r in rows)
