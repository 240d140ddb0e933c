"""Matrix results: JUnit parsing, the result schema, and the compat-session runner end to end."""

from __future__ import annotations

import json
import stat
import sys
import textwrap
from pathlib import Path

import pytest

from spyre_matrix.results import (SuiteCounts, load_results, make_result, parse_junit, parse_junit_cases,
                                  validate_result, write_result)
from spyre_matrix.runner import MODEL_TESTS, installed_torch, installed_version, run_compat

JUNIT_SUITES = """<?xml version="1.0" encoding="utf-8"?>
<testsuites name="pytest tests">
  <testsuite name="pytest" errors="1" failures="2" skipped="3" tests="10" time="1.0"/>
  <testsuite name="more" errors="0" failures="0" skipped="1" tests="4" time="1.0"/>
</testsuites>
"""


def test_parse_junit_testsuites_root(tmp_path: Path) -> None:
    path = tmp_path / "junit.xml"
    path.write_text(JUNIT_SUITES)
    assert parse_junit(path) == SuiteCounts(passed=14 - 3 - 4, failed=3, skipped=4)


def test_model_tests_are_counted_by_module(tmp_path: Path) -> None:
    path = tmp_path / "junit.xml"
    path.write_text("""<testsuites><testsuite tests="4">
      <testcase classname="tests.adapter.zoo.test_hf" name="a"/>
      <testcase classname="tests.adapter.zoo.test_sweep" name="b"><failure message="x"/></testcase>
      <testcase classname="tests.adapter.zoo.test_hf" name="c"><skipped message="transformers"/></testcase>
      <testcase classname="tests.adapter.backend.test_device" name="d"/>
    </testsuite></testsuites>""")
    assert parse_junit_cases(path, MODEL_TESTS) == SuiteCounts(passed=1, failed=1, skipped=1)


def test_the_model_test_prefixes_name_test_files_that_exist() -> None:
    """The layout moved the model tests once and the matrix counted none of them."""
    root = Path(__file__).parents[2]
    for prefix in MODEL_TESTS:
        assert (root / (prefix.replace(".", "/") + ".py")).is_file(), prefix


def test_parse_junit_bare_testsuite_root(tmp_path: Path) -> None:
    path = tmp_path / "junit.xml"
    path.write_text('<testsuite name="pytest" errors="0" failures="1" skipped="0" tests="5"/>')
    assert parse_junit(path) == SuiteCounts(passed=4, failed=1, skipped=0)


def test_status_is_pass_only_when_everything_succeeded() -> None:
    green = SuiteCounts(passed=3)
    assert make_result("2.9.1", green, pytest_exit=0, probe={})["status"] == "pass"
    assert make_result("2.9.1", SuiteCounts(passed=3, failed=1), pytest_exit=1)["status"] == "fail"
    assert make_result("2.9.1", SuiteCounts(), pytest_exit=5)["status"] == "fail"  # no tests ran
    broken_probe = make_result("2.9.1", green, pytest_exit=0, probe_error="no probe")
    assert broken_probe["status"] == "fail" and broken_probe["probe_error"] == "no probe"
    assert make_result("2.9.1", green, pytest_exit=0, errors=["wrong torch"])["status"] == "fail"


def test_probe_fields_are_carried_into_the_result() -> None:
    probe = {"features": {"device": True}, "adapters": ["host_device_acc"],
             "na": [{"feature": "device.python_privateuse1", "reason": "added in 2.10"}], "other": 1}
    result = make_result("2.9.1", SuiteCounts(passed=1), pytest_exit=0, probe=probe)
    assert (result["features"], result["adapters"], result["na"]) == (probe["features"], probe["adapters"], probe["na"])
    assert validate_result(result) == []


@pytest.mark.parametrize(
    ("mutate", "problem"),
    [
        (lambda r: r.pop("tests"), "tests"),
        (lambda r: r.update(status="green"), "status"),
        (lambda r: r.update(torch="latest"), "torch"),
        (lambda r: r["tests"].update(failed=-1), "tests.failed"),
        (lambda r: r.update(na="none"), "na"),
    ],
)
def test_validate_result_finds_problems(mutate, problem: str) -> None:
    result = make_result("2.9.1", SuiteCounts(passed=1), pytest_exit=0)
    mutate(result)
    assert any(p.startswith(problem) for p in validate_result(result))


def test_write_and_load_roundtrip(tmp_path: Path) -> None:
    result = make_result("2.10.0", SuiteCounts(passed=2, skipped=1), pytest_exit=0)
    path = write_result(result, tmp_path)
    assert path.name == "2.10.0.json"
    assert load_results(tmp_path) == {"2.10.0": result}
    (tmp_path / "bad.json").write_text(json.dumps({"torch": "2.11.0"}))
    with pytest.raises(ValueError, match="bad.json"):
        load_results(tmp_path)


def test_malformed_result_is_never_written(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        write_result({"torch": "2.9.1", "status": "?"}, tmp_path)
    assert not list(tmp_path.iterdir())


# -- the compat session's runner, end to end --------------------------------------------------

SUITE = """
import os
import pytest

def test_pass():
    assert os.environ["SPYRE_MATRIX_RUN"] == "1"

def test_fail():
    assert False

@pytest.mark.skip(reason="demo")
def test_skip():
    pass
"""

FAKE_PROBE = f"""#!{sys.executable}
# stands in for `spyre-adapter probe --json PATH`
import json, sys
assert sys.argv[1:3] == ["probe", "--json"], sys.argv
probe = {{"features": {{"device": True}}, "adapters": ["a"], "na": [{{"feature": "x", "reason": "y"}}]}}
open(sys.argv[3], "w").write(json.dumps(probe))
"""


@pytest.fixture
def suite(tmp_path: Path) -> list[str]:
    (tmp_path / "test_demo.py").write_text(textwrap.dedent(SUITE))
    return [str(tmp_path / "test_demo.py"), "-p", "no:cacheprovider", "--rootdir", str(tmp_path)]


def _path_with(monkeypatch: pytest.MonkeyPatch, directory: Path, probe: str | None) -> None:
    directory.mkdir()
    if probe is not None:
        script = directory / "spyre-adapter"
        script.write_text(probe)
        script.chmod(script.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", str(directory))  # pytest runs via sys.executable, an absolute path


def test_runner_writes_counts_probe_and_junit(tmp_path: Path, suite: list[str], monkeypatch) -> None:
    _path_with(monkeypatch, tmp_path / "bin", FAKE_PROBE)
    torch = installed_torch().split("+")[0]
    result = run_compat(torch, suite, results_dir=tmp_path / "results", tools=["definitely-not-a-tool"])
    assert result["tests"] == {"passed": 1, "failed": 1, "skipped": 1}
    assert result["status"] == "fail" and result["pytest_exit"] == 1
    assert result["na"] == [{"feature": "x", "reason": "y"}] and "probe_error" not in result
    assert result["missing_tools"] == ["definitely-not-a-tool"]
    assert (tmp_path / "results" / "junit" / f"{torch}.xml").is_file()
    assert load_results(tmp_path / "results")[torch] == result
    # whether transformers (the hf extra) was installed, and how its model tests ran
    assert result["hf"] == {"transformers": installed_version("transformers"),
                            "model_tests": {"passed": 0, "failed": 0, "skipped": 0}}


def test_runner_records_a_missing_probe_and_wrong_torch(tmp_path: Path, suite: list[str], monkeypatch) -> None:
    _path_with(monkeypatch, tmp_path / "bin", None)
    other = "2.9.1" if installed_torch().startswith("2.6.0") else "2.6.0"  # a release that is not installed
    result = run_compat(other, [*suite, "-k", "pass"], results_dir=tmp_path / "results")
    assert result["tests"] == {"passed": 1, "failed": 0, "skipped": 0}
    assert "spyre-adapter is not on PATH" in result["probe_error"]
    assert any(f"expected torch {other}" in e for e in result["errors"])
    assert result["status"] == "fail"
    assert validate_result(json.loads((tmp_path / "results" / f"{other}.json").read_text())) == []


def test_runner_survives_pytest_that_writes_no_junit(tmp_path: Path, monkeypatch) -> None:
    _path_with(monkeypatch, tmp_path / "bin", FAKE_PROBE)
    (tmp_path / "conftest.py").write_text("raise RuntimeError('backend cannot load here')\n")
    # A conftest that cannot import ends pytest (exit 4) before it writes any XML.
    result = run_compat("2.6.0", [str(tmp_path), "-p", "no:cacheprovider"], results_dir=tmp_path / "results")
    assert result["status"] == "fail" and result["pytest_exit"] == 4
    assert result["tests"] == {"passed": 0, "failed": 1, "skipped": 0}  # the session itself errored
    assert any("before running tests" in e and "backend cannot load here" in e for e in result["errors"])
    junit = tmp_path / "results" / "junit" / "2.6.0.xml"
    assert parse_junit(junit) == SuiteCounts(failed=1)
    assert "backend cannot load here" in junit.read_text()


def _git(repo: Path, *args: str) -> None:
    import subprocess

    subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *args],
                   check=True, capture_output=True)


@pytest.mark.skipif(__import__("shutil").which("git") is None, reason="needs git")
def test_source_commit_marks_local_changes_but_not_results(tmp_path: Path) -> None:
    from spyre_matrix.runner import source_commit

    repo = tmp_path / "repo"
    (repo / "compat_matrix" / "results").mkdir(parents=True)
    (repo / "mod.py").write_text("x = 1\n")
    (repo / "compat_matrix" / "results" / "2.9.1.json").write_text("{}\n")
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    _git(repo, "commit", "-q", "-m", "init")
    clean = source_commit(repo)
    assert clean is not None and len(clean) == 12 and "+" not in clean
    (repo / "compat_matrix" / "results" / "2.9.1.json").write_text('{"rewritten": true}\n')
    assert source_commit(repo) == clean  # sessions rewrite results; that is not a source change
    (repo / "mod.py").write_text("x = 2\n")
    assert source_commit(repo) == clean + "+dirty"
    assert source_commit(tmp_path / "not-a-repo") is None
