"""REPORT.md: rendered from committed inputs only, deterministic, and never stale in the repo."""

from __future__ import annotations

import argparse
import os

import pytest

from spyre_matrix.adapters import read_adapter
from spyre_matrix.catalog import parse_catalog
from spyre_matrix.cli import cmd_report, register
from spyre_matrix.paths import REPORT_MD
from spyre_matrix.report import ReportInputs, build_rows, default_report_text, load_inputs, render_report
from spyre_matrix.results import SuiteCounts, make_result
from spyre_matrix.runner import MATRIX_ENV
from spyre_surface import Location, SurfaceSymbol
from spyre_matrix.vendor import VendorLine


def test_committed_report_is_current() -> None:
    if os.environ.get(MATRIX_ENV):
        pytest.skip("a matrix session is rewriting results/; the default test run checks staleness")
    committed = REPORT_MD.read_text(encoding="utf-8") if REPORT_MD.is_file() else ""
    assert committed == default_report_text(), (
        "compat_matrix/REPORT.md is stale: run `nox -s report` (offline: `python -m spyre_matrix report`)")


def test_report_is_deterministic() -> None:
    inputs = load_inputs()
    assert render_report(inputs) == render_report(inputs)


SYMBOL = SurfaceSymbol(Location("torch._inductor.sizevars", "S.optimization_hint"), "method", "sizevars", True,
                       ("self", "expr"), (Location("torch._inductor.sizevars", "S.size_hint"),))


def _surface(version: str, status: str, found: str, surface: dict[str, str], lines: int, vs: dict | None) -> dict:
    symbol = {"status": status, "found": found, "defined": found, "kind": "method",
              "signature": ["self", "expr"], "signature_changed": False}
    return {"schema": 1, "torch": version, "build": version, "symbols": {SYMBOL.key: symbol},
            "surface": surface, "inductor": {"files": 3, "lines": lines, "vs_previous": vs}}


@pytest.fixture
def inputs(tmp_path) -> ReportInputs:
    catalog = parse_catalog({
        "defaults": {"python": "3.11"},
        "release": [{"torch": "2.5.1", "supported": False}, {"torch": "2.9.1"}, {"torch": "2.10.0"}],
    })
    old = "torch._inductor.sizevars:S.size_hint"
    new = "torch._inductor.sizevars:S.optimization_hint"
    vs = {"torch": "x", "added_lines": 10, "removed_lines": 5, "files_added": 1, "files_removed": 0,
          "files_changed": 2, "api": {"added": 1, "removed": 0, "moved": 0, "signature_changed": 0}}
    surfaces = {
        "2.5.1": _surface("2.5.1", "moved", old, {old: "def(self, expr)", "m:gone": "attr"}, 100, None),
        "2.9.1": _surface("2.9.1", "moved", old, {old: "def(self, expr)"}, 120, vs),
        "2.10.0": _surface("2.10.0", "present", new, {new: "def(self, expr, hint=)", "m:new": "attr"}, 150, vs),
    }
    failing = make_result("2.9.1", SuiteCounts(passed=7, failed=2, skipped=1), pytest_exit=1,
                          probe={"na": [{"feature": "device.python_privateuse1", "reason": "needs 2.10"}]})
    adapter_file = tmp_path / "old_device.py"
    adapter_file.write_text('RELEASES = "<2.10"\nFEATURES = ["device"]\nX = 1\n')
    return ReportInputs(
        catalog=catalog, spec=(SYMBOL,), surfaces=surfaces, results={"2.9.1": failing},
        adapters=[read_adapter(adapter_file)], vendor=[VendorLine("spyre_adapter/x.py", 3, "import torch._inductor")],
    )


def _cost_rows(text: str) -> dict[str, list[str]]:
    section = text.split("## Maintenance cost per release")[1].split("##")[0]
    rows = [line for line in section.splitlines() if line.startswith("| 2.")]
    return {cells[0]: cells[1:] for cells in ([c.strip() for c in row.strip("|").split("|")] for row in rows)}


def test_cost_table_cells_come_from_the_inputs(inputs: ReportInputs) -> None:
    rows = _cost_rows(render_report(inputs))
    assert list(rows) == ["2.5.1 (static)", "2.9.1", "2.10.0"]
    status, tests, churn, symbols, lines, diff, adapters, vendor, na = rows["2.9.1"]
    assert (status, tests, na) == ("fail", "7 / 2 / 1", "1")
    assert churn == "0 / 1 / 0 / 0"  # m:gone removed since 2.5.1
    assert symbols == "0 / 1 / 0 / 0"
    assert (lines, diff, adapters, vendor) == ("120", "15", "3", "1")
    status, tests, churn, symbols, *_, adapters, _, na = rows["2.10.0"]
    assert (status, tests, na, adapters) == ("not run", "—", "—", "0")  # adapter is "<2.10"
    assert churn == "1 / 0 / 1 / 0"  # m:new added; size_hint -> optimization_hint is one move
    assert symbols == "1 / 0 / 0 / 0"
    assert rows["2.5.1 (static)"][2] == "—"  # oldest release: nothing to compare with


def test_moved_member_with_new_signature(inputs: ReportInputs) -> None:
    rows = build_rows(inputs)
    churn = rows[2].churn
    assert churn.moved == (("torch._inductor.sizevars:S.size_hint", "torch._inductor.sizevars:S.optimization_hint"),)
    text = render_report(inputs)
    assert "- moved: `torch._inductor.sizevars:S.size_hint` → `torch._inductor.sizevars:S.optimization_hint`" in text


def test_report_sections_and_notes(inputs: ReportInputs) -> None:
    text = render_report(inputs)
    assert text.startswith("# Compatibility matrix and maintenance cost\n")
    assert "nox -s report" in text.splitlines()[2]  # says how to regenerate
    assert "- **2.9.1**: n/a `device.python_privateuse1`: needs 2.10" in text
    assert "| `torch._inductor.sizevars:S.optimization_hint` | sizevars | ↪ | ↪ | ✓ |" in text
    assert "Currently 1." in text  # vendor lines, with the method stated above it
    assert "| `old_device` | 1 | `<2.10` | `device` | 3 |" in text  # the adapter, its tier and releases


def test_missing_adapters_folder_is_stated(inputs: ReportInputs) -> None:
    text = render_report(ReportInputs(**{**inputs.__dict__, "adapters": None}))
    assert "`shims/_torch/adapters/` does not exist yet: 0 lines for every release." in text


def test_chart_is_written(inputs: ReportInputs, tmp_path) -> None:
    pytest.importorskip("matplotlib")
    from spyre_matrix.chart import render_chart

    path = render_chart(build_rows(inputs), tmp_path / "report.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cli_registers_report_for_the_main_cli() -> None:
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["report", "--check"])
    assert args.func is cmd_report and args.check
    assert parser.parse_args(["surface", "2.9.1", "--fetch"]).releases == ["2.9.1"]


def test_report_states_which_commits_the_results_come_from(inputs: ReportInputs) -> None:
    def with_results(results: dict) -> str:
        return render_report(ReportInputs(**{**inputs.__dict__, "results": results}))

    result = inputs.results["2.9.1"]
    one = with_results({"2.9.1": {**result, "commit": "abc"}, "2.10.0": {**result, "torch": "2.10.0", "commit": "abc"}})
    assert "All 2 results come from one checkout: commit `abc`." in one
    two = with_results({"2.9.1": {**result, "commit": "abc"}, "2.10.0": {**result, "torch": "2.10.0"}})
    assert "Results come from 2 checkouts: `abc`: 2.9.1; `unrecorded`: 2.10.0." in two
