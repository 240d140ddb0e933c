"""Output that reads well: the device report in text with units (and the raw
figures for code), tables that do not wrap when piped, the codemods' summary
after --write and the mode of the files they create."""

from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from spyre_adapter.backend.report import format_bytes, format_ns
from spyre_adapter.workloads import differential as diff
from spyre_adapter.workloads.output import print_slowest, print_table


def test_units() -> None:
    assert [format_ns(x) for x in (0, 999, 5313.66, 2.4e6, 1.25e9)] == ["0 ns", "999 ns", "5.31 us", "2.40 ms",
                                                                        "1.25 s"]
    assert [format_bytes(x) for x in (512, 82432, 7.35 * 2**20, 3 * 2**30)] == ["512 B", "80.5 KiB", "7.35 MiB",
                                                                              "3.00 GiB"]


def test_report_summary_has_units_and_counts_eager_ops(report) -> None:
    x = torch.randn(16, 65).to("spyre")
    y = x * 2 + 1  # eager ops on the device
    torch.compile(lambda a: torch.softmax(a, -1) * 2, dynamic=False)(y).cpu()
    text = report.summary()
    figures = report.to_dict()
    assert figures["eager_ops"] >= 2 and figures["launches"] >= 1 and figures["modeled_device_ns"] > 0
    assert f"kernel launches: {figures['launches']}" in text
    assert re.search(r"^modeled device time: [\d.]+ (ns|us|ms|s)$", text, re.M), text
    assert re.search(r"^DRAM traffic: [\d.]+ (B|KiB|MiB) = [\d.]+x compulsory", text, re.M), text
    assert re.search(rf"^eager ops on the device \(run on the host\): {figures['eager_ops']} \(aten\.", text, re.M)
    assert "_ns" not in text and "{" not in text  # not a dict dump


def test_workload_table_rows_do_not_wrap_when_piped(capsys: pytest.CaptureFixture[str],
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("COLUMNS", raising=False)
    detail = "a long explanation " * 6
    records = [{"file": "Meta-Llama-3.1-8B-Instruct.yaml", "name": f"torch.nn.functional.silu.{i}",
                "op": "torch.nn.functional.silu", "status": diff.ERROR, "detail": detail} for i in range(3)]
    print_table(records)
    lines = capsys.readouterr().out.splitlines()
    for r in records:
        row = [line for line in lines if r["name"] in line]
        assert len(row) == 1 and detail.strip() in row[0], lines


def test_the_slowest_workload_cases_are_listed_slowest_first(capsys: pytest.CaptureFixture[str]) -> None:
    """Ten at most, by wall time, with CPU time and peak RSS; cases that did not
    run (no time) are not listed."""
    records = [{"file": "f.yaml", "name": f"case{i}", "op": "torch.mul", "status": diff.PASS, "seconds": float(i),
                "cpu_seconds": i / 2, "peak_rss_bytes": i * 2**30} for i in range(12)]
    records.append({"file": "f.yaml", "name": "never_ran", "op": "torch.mul", "status": diff.SKIPPED})
    print_slowest(records)
    out = capsys.readouterr().out
    names = re.findall(r"case\d+", out)
    assert names == [f"case{i}" for i in range(11, 1, -1)] and "never_ran" not in out
    assert re.search(r"case11 .* 11\.0 .* 5\.5 .* 11\.00", out), out


def _codemod(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "spyre_adapter.cli", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=300, preexec_fn=lambda: os.umask(0o022))


def test_upgrade_write_summary_and_the_json_report_mode(tmp_path: Path) -> None:
    src = tmp_path / "backend.py"
    src.write_text("from torch._inductor.codegen.wrapper import WrapperCodeGen\nW = WrapperCodeGen\n")
    res = _codemod(["upgrade", "--from", "2.5", "--to", "2.13", "--write", "--json", "report.json", "."], tmp_path)
    assert res.returncode == 0, res.stderr
    assert "1 changed" in res.stderr and "to change" not in res.stderr
    assert "PythonWrapperCodegen" in src.read_text()
    assert stat.S_IMODE((tmp_path / "report.json").stat().st_mode) == 0o644  # what open() gives under umask 022
    again = _codemod(["upgrade", "--from", "2.5", "--to", "2.13", "--check", "."], tmp_path)
    assert again.returncode == 0 and "0 to change" in again.stderr
