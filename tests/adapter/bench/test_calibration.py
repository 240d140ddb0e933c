"""Calibration: every machine constant names its source, errors come from
held-out points only, the fit is re-runnable and lands on the shipped values,
and no row echoes a parameter."""

from __future__ import annotations

import dataclasses

import pytest

from spyre_adapter.bench import calibration as cal
from spyre_adapter.bench import kernels as sk
from spyre_adapter.bench.calibration import kernel_ns
from spyre_adapter.cli.main import main as cli_main
from spyre_adapter.model.machine import DEFAULT, SOURCES, Machine

TAGS = {"datasheet", "architecture", "measured", "fit", "assumed"}


def test_every_constant_names_its_source() -> None:
    fields = {f.name for f in dataclasses.fields(Machine)}
    assert set(SOURCES) == fields
    assert {cal.CATEGORIES[k] for k in fields} <= TAGS
    # what is tagged fitted is exactly what the calibration fits
    assert {k for k, v in cal.CATEGORIES.items() if v == "fit"} == set(cal.FITTED)
    for name in cal.FITTED:
        assert "fitted" in SOURCES[name]


def test_fit_and_predicted_sets_are_disjoint() -> None:
    fit = {p.name for p in cal.POINTS if p.role == "fit"}
    predicted = {p.name for p in cal.POINTS if p.role == "predicted"}
    assert fit and predicted and not fit & predicted
    # over-determined, on points none of our constants were taken from
    assert len(fit) >= max(3, len(cal.FITTED)) and len(predicted) >= 8
    assert all(p.independent for p in cal.POINTS if p.role == "fit")
    assert {p.provenance for p in cal.POINTS} <= {"measurement", "reference-fit"}


def test_no_point_echoes_a_parameter() -> None:
    set_from_figures = {getattr(DEFAULT, k) for k, v in cal.CATEGORIES.items() if v in ("measured", "datasheet")}
    for p in cal.POINTS:
        assert p.role in ("fit", "predicted", "stack")
        assert p.measured not in set_from_figures, p.name


def test_summary_counts_only_held_out_errors() -> None:
    rows = [{"role": "fit", "error": 0.9}, {"role": "predicted", "error": -0.2}, {"role": "predicted", "error": 0.1},
            {"role": "stack", "error": 3.0}]
    s = cal.summary(rows)
    assert s["calibration_fit_points"] == 1 and s["calibration_predicted_points"] == 2
    assert s["calibration_predicted_error_max"] == pytest.approx(0.2)


def test_refit_lands_on_the_shipped_constants() -> None:
    start = DEFAULT.replace(core_dma_gbps=60.0, kernel_launch_ns=5000.0, lane_reduce_cycles_per_stick=9.0)
    result = cal.fit(start)
    assert result["values"]["core_dma_gbps"] == pytest.approx(DEFAULT.core_dma_gbps, rel=0.03)
    assert result["values"]["lane_reduce_cycles_per_stick"] == pytest.approx(DEFAULT.lane_reduce_cycles_per_stick,
                                                                              rel=0.03)
    assert result["values"]["kernel_launch_ns"] <= 200.0
    assert set(result["fit_points"]) == {p.name for p in cal.POINTS if p.role == "fit"}


def test_sustained_matmul_rate_is_the_constant_not_more() -> None:
    # the simulator runs a compute-bound matmul at the sustained rate it is given (a check of the simulator,
    # not a calibration row: the value is the parameter itself)
    one = DEFAULT.replace(cores=1)
    rate = 1024**3 / kernel_ns([sk.mm(1024, 1024, 1024)], one)
    assert 0.9 * DEFAULT.sustained_mac_per_ns_per_core < rate <= DEFAULT.sustained_mac_per_ns_per_core


def test_command_rejects_an_output_outside_an_existing_folder(tmp_path, capsys) -> None:
    target = tmp_path / "missing" / "calibration.json"
    with pytest.raises(SystemExit) as exit_info:
        cli_main(["calibrate", "--json", str(target)])
    assert exit_info.value.code == 2 and not target.parent.exists()
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "argument --json" in err[0]  # one line naming the argument
