"""Per-release matrix results: ``compat_matrix/results/<release>.json`` (schema, JUnit parsing, IO).

Schema (keys the report relies on are required)::

    {"torch": "2.9.1", "status": "pass" | "fail",
     "tests": {"passed": int, "failed": int, "skipped": int},
     "features": {...}, "adapters": [...], "na": [{"feature": ..., "reason": ...}, ...],
     # optional: "probe_error", "probe_counts", "errors", "missing_tools",
     #           "torch_installed", "python", "pytest_exit", "duration_s",
    #           "commit" (the checkout tested, "+dirty" if it had local changes)}
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from packaging.version import InvalidVersion, Version

from spyre_matrix.paths import RESULTS_DIR

STATUSES = ("pass", "fail")
REQUIRED = {"torch": str, "status": str, "tests": dict, "features": dict, "adapters": list, "na": list}
COUNT_KEYS = ("passed", "failed", "skipped")


@dataclass(frozen=True)
class SuiteCounts:
    passed: int = 0
    failed: int = 0  # failures + errors: either way the suite is not green
    skipped: int = 0

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


def parse_junit(path: Path) -> SuiteCounts:
    """Counts from a pytest JUnit XML file (``<testsuites>`` or a bare ``<testsuite>`` root)."""
    root = ET.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
    total = failures = errors = skipped = 0
    for suite in suites:
        total += int(suite.get("tests", 0))
        failures += int(suite.get("failures", 0))
        errors += int(suite.get("errors", 0))
        skipped += int(suite.get("skipped", 0))
    return SuiteCounts(passed=total - failures - errors - skipped, failed=failures + errors, skipped=skipped)


def parse_junit_cases(path: Path, classname_prefix: str | tuple[str, ...]) -> SuiteCounts:
    """Counts of the test cases whose classname starts with ``classname_prefix``
    (one prefix or several: the transformers model tests)."""
    passed = failed = skipped = 0
    for case in ET.parse(path).getroot().iter("testcase"):
        if not case.get("classname", "").startswith(classname_prefix):
            continue
        if case.find("failure") is not None or case.find("error") is not None:
            failed += 1
        elif case.find("skipped") is not None:
            skipped += 1
        else:
            passed += 1
    return SuiteCounts(passed=passed, failed=failed, skipped=skipped)


def write_crash_junit(path: Path, exit_code: int, output: str) -> None:
    """A JUnit report for a pytest run that ended before writing one (e.g. a conftest
    that cannot import on this release): one errored "session" case holding the output."""
    root = ET.Element("testsuites", name="pytest tests")
    suite = ET.SubElement(root, "testsuite", name="pytest", tests="1", errors="1", failures="0", skipped="0")
    case = ET.SubElement(suite, "testcase", classname="pytest", name="session")
    error = ET.SubElement(case, "error", message=f"pytest exited {exit_code} before writing a report")
    error.text = output
    path.parent.mkdir(parents=True, exist_ok=True)
    ET.ElementTree(root).write(path, encoding="utf-8", xml_declaration=True)


def make_result(
    torch: str,
    tests: SuiteCounts,
    *,
    pytest_exit: int,
    probe: dict[str, Any] | None = None,
    probe_error: str | None = None,
    errors: list[str] | None = None,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Assemble a result; status is "pass" only when every part of the session succeeded.

    A probe that could not run makes the release "fail": its features/na cells
    are unknown, so the release is not shown to be green.
    """
    probe = probe or {}
    errors = list(errors or [])
    green = pytest_exit == 0 and tests.failed == 0 and probe_error is None and not errors
    result: dict[str, Any] = {
        "torch": torch,
        "status": "pass" if green else "fail",
        "tests": tests.as_dict(),
        "features": probe.get("features", {}),
        "adapters": probe.get("adapters", []),
        "na": probe.get("na", []),
        "pytest_exit": pytest_exit,
    }
    if "counts" in probe:  # the probe's runtime present/moved/missing, to cross-check the static surface
        result["probe_counts"] = probe["counts"]
    if probe_error is not None:
        result["probe_error"] = probe_error
    if errors:
        result["errors"] = errors
    result.update(extra or {})
    return result


def validate_result(data: Any) -> list[str]:
    """Problems that make a result unusable for the report (empty list: well-formed)."""
    if not isinstance(data, dict):
        return ["result is not a JSON object"]
    problems = [f"{key}: missing or not {kind.__name__}" for key, kind in REQUIRED.items()
                if not isinstance(data.get(key), kind)]
    if problems:
        return problems
    try:
        Version(data["torch"])
    except InvalidVersion:
        problems.append(f"torch: {data['torch']!r} is not a version")
    if data["status"] not in STATUSES:
        problems.append(f"status: {data['status']!r} not in {STATUSES}")
    for key in COUNT_KEYS:
        if not isinstance(data["tests"].get(key), int) or data["tests"][key] < 0:
            problems.append(f"tests.{key}: missing or not a non-negative int")
    return problems


def result_path(torch: str, directory: Path = RESULTS_DIR) -> Path:
    return directory / f"{torch}.json"


def write_result(result: dict[str, Any], directory: Path = RESULTS_DIR) -> Path:
    problems = validate_result(result)
    if problems:
        raise ValueError(f"refusing to write a malformed result: {problems}")
    directory.mkdir(parents=True, exist_ok=True)
    path = result_path(result["torch"], directory)
    path.write_text(json.dumps(result, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return path


def load_results(directory: Path = RESULTS_DIR) -> dict[str, dict[str, Any]]:
    """Every well-formed ``<release>.json`` keyed by release; malformed files raise (they would lie)."""
    results: dict[str, dict[str, Any]] = {}
    for path in sorted(directory.glob("*.json")) if directory.is_dir() else []:
        data = json.loads(path.read_text(encoding="utf-8"))
        problems = validate_result(data)
        if problems:
            raise ValueError(f"{path}: {problems}")
        results[data["torch"]] = data
    return results
