"""The benchmark scripts check their arguments before any work: a bad value is
one line on stderr naming the argument, exit status 2, no traceback, nothing
written (a benchmark that runs for half an hour must not lose its results to an
output folder that does not exist)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


def _rows(missing: Path) -> list[tuple[str, list[str], str]]:
    out = str(missing / "out.json")
    return [
        ("bench_models.py", ["--json", out], "--json"),
        ("bench_models.py", ["--new-tokens", "0"], "--new-tokens"),
        ("bench_startup.py", ["--json", out], "--json"),
        ("bench_startup.py", ["--runs", "0"], "--runs"),
        ("bench_codemods.py", ["--json", out], "--json"),
        ("bench_codemods.py", ["--tree", str(missing)], "--tree"),
        ("bench_codemods.py", ["--jobs", "0"], "--jobs"),
        ("bench_workload_memory.py", [str(missing / "cases.yaml")], "files"),
        ("bench_gemm_plan.py", ["--json", out], "--json"),
    ]


@pytest.mark.parametrize("row", range(9))
def test_a_bad_argument_is_one_line_and_exit_2(tmp_path: Path, row: int) -> None:
    missing = tmp_path / "no-such-folder"
    script, argv, argument = _rows(missing)[row]
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / script), *argv], capture_output=True,
                          text=True, cwd=tmp_path, timeout=300)
    lines = [ln for ln in done.stderr.splitlines() if ln.strip() and "CUDA" not in ln]
    assert done.returncode == 2, done.stderr
    assert len(lines) == 1 and argument in lines[0] and "Traceback" not in done.stderr, done.stderr
    assert not missing.exists() and list(tmp_path.iterdir()) == []
