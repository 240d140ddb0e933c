"""The body of one ``compat`` nox session, run with the session venv's Python.

Runs the test suite (JUnit XML), the probe, and writes the release's result JSON.
Never raises on a red suite or a broken probe: a failing release must still
leave a well-formed result behind.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections import deque
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

from packaging.version import Version

from spyre_matrix.paths import PACKAGE_DIR, RESULTS_DIR
from spyre_matrix.results import make_result, parse_junit, parse_junit_cases, write_crash_junit, write_result

PROBE_COMMAND = ("spyre-adapter", "probe")
MATRIX_ENV = "SPYRE_MATRIX_RUN"
_TAIL_LINES = 60  # lines of pytest output kept for a crash report


#: JUnit classname prefixes of the transformers model tests (the `hf` extra): the
#: model runs and the family sweep's sample, where the test layout puts them.
MODEL_TESTS = ("tests.adapter.zoo.test_hf", "tests.adapter.zoo.test_sweep")


def installed_version(distribution: str) -> str | None:
    """A distribution's version in this environment, without importing it."""
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def installed_torch() -> str | None:
    """The torch distribution's version in this environment, without importing torch."""
    return installed_version("torch")


def run_pytest(junit: Path, args: Sequence[str]) -> tuple[int, str]:
    """Run the suite, echoing its output; returns (exit code, the output's tail)."""
    junit.parent.mkdir(parents=True, exist_ok=True)
    junit.unlink(missing_ok=True)  # never count a previous run's file
    command = [sys.executable, "-m", "pytest", "-q", f"--junitxml={junit}", *args]
    # Tests can tell they run inside a matrix session (which rewrites results/ as it goes).
    env = {**os.environ, MATRIX_ENV: "1"}
    tail: deque[str] = deque(maxlen=_TAIL_LINES)
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env) as proc:
        for line in proc.stdout or ():
            sys.stdout.write(line)
            tail.append(line)
    return proc.returncode, "".join(tail)


def _last_line(output: str, prefix: str = "") -> str:
    """The last non-blank line, preferring lines that start with ``prefix`` (pytest's "E ")."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    preferred = [line for line in lines if prefix and line.startswith(prefix)]
    return (preferred or lines or ["no output"])[-1]


def run_probe() -> tuple[dict[str, Any] | None, str | None]:
    """(probe JSON, None) or (None, why it could not be had)."""
    executable = shutil.which(PROBE_COMMAND[0])
    if executable is None:
        return None, f"{PROBE_COMMAND[0]} is not on PATH"
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "probe.json"
        proc = subprocess.run(
            [executable, *PROBE_COMMAND[1:], "--json", str(out)], capture_output=True, text=True, check=False
        )
        # The probe may exit non-zero to say features are missing; its JSON is what counts.
        try:
            data = json.loads(out.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            # The exception line only: a traceback's local paths are noise in committed results.
            last = _last_line(proc.stderr or proc.stdout)
            return None, f"`{' '.join(PROBE_COMMAND)} --json` exited {proc.returncode} without JSON: {last}"
    if not isinstance(data, dict):
        return None, "probe JSON is not an object"
    return data, None


def source_commit(root: Path | None = None) -> str | None:
    """The commit of the checkout this package runs from (``root``: another
    checkout), with "+dirty" when tracked source differs from it; None outside a
    git checkout (an installed wheel).

    Results record it so "one commit green on every release" can be checked;
    changes under ``compat_matrix/results/`` (written by the sessions) do not count.
    """
    def git(*args: str) -> str | None:
        try:
            proc = subprocess.run(["git", "-C", str(root or PACKAGE_DIR), *args], capture_output=True, text=True,
                                  check=False)
        except OSError:  # no git on this machine
            return None
        return proc.stdout.strip() if proc.returncode == 0 else None

    top = git("rev-parse", "--show-toplevel")
    if top is None:
        return None
    root = Path(top)
    commit = git("rev-parse", "--short=12", "HEAD")
    if commit is None:
        return None
    changes = git("status", "--porcelain", "--untracked-files=no", "--", ".", ":(exclude)compat_matrix/results")
    return commit + ("+dirty" if changes else "")


def run_compat(
    torch: str,
    pytest_args: Sequence[str] = (),
    *,
    results_dir: Path = RESULTS_DIR,
    tools: Sequence[str] = (),
) -> dict[str, Any]:
    """Run the suite and the probe against the installed torch; write and return the result."""
    started = time.monotonic()
    errors: list[str] = []
    installed = installed_torch()
    if installed is None or Version(installed).release != Version(torch).release:
        errors.append(f"expected torch {torch}, environment has {installed}")
    junit = results_dir / "junit" / f"{torch}.xml"
    exit_code, output = run_pytest(junit, pytest_args)
    if not junit.is_file():
        cause = _last_line(output, prefix="E ")
        errors.append(f"pytest exited {exit_code} before running tests: {cause}")
        write_crash_junit(junit, exit_code, output)
    counts = parse_junit(junit)
    probe, probe_error = run_probe()
    hf = {"transformers": installed_version("transformers"),
          "model_tests": parse_junit_cases(junit, MODEL_TESTS).as_dict()}
    extra: dict[str, Any] = {
        "torch_installed": installed,
        "python": platform.python_version(),
        "duration_s": round(time.monotonic() - started, 1),
        "hf": hf,
    }
    commit = source_commit()
    if commit is not None:
        extra["commit"] = commit
    missing_tools = [tool for tool in tools if shutil.which(tool) is None]
    if missing_tools:
        extra["missing_tools"] = missing_tools
    result = make_result(
        torch, counts, pytest_exit=exit_code, probe=probe, probe_error=probe_error, errors=errors, extra=extra
    )
    write_result(result, results_dir)
    return result
