"""The OpInfo sweep: expectations data, classification of a quick subset,
journal/crash handling, the summary; and the committed full summary
(results/opinfo/summary.json, produced by ``nox -s opinfo``)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from spyre_adapter.harness import pool as parallel
from spyre_adapter.opinfo import command, corpus, expectations, summary
from spyre_adapter.opinfo.sweep import run_item
from spyre_adapter.workloads import differential as diff

ROOT = Path(__file__).resolve().parents[3]
COMMITTED = ROOT / "results" / "opinfo" / "summary.json"


def test_expectations_name_real_ops_and_give_reasons() -> None:
    data = yaml.safe_load(expectations.PATH.read_text()) or {}
    parsed = expectations.parse(data)  # raises on a missing reason or an unknown dtype
    known = set(corpus.op_db())
    for op, dtype in [*parsed.xfail, *parsed.tolerance]:
        assert op in known, f"expectations.yaml names {op!r}, which op_db does not have"
    with pytest.raises(ValueError, match="reason"):
        expectations.parse({"xfail": [{"ops": ["sin"], "reason": ""}]})
    with pytest.raises(ValueError, match="dtypes"):
        expectations.parse({"xfail": [{"ops": ["sin"], "dtypes": ["fp8"], "reason": "a long enough reason"}]})


def test_xfail_only_covers_the_failure_it_names() -> None:
    e = expectations.parse({"xfail": [{"ops": ["x"], "dtypes": ["fp16"], "reason": "random numbers differ"}]})
    assert e.xfail_matches("x", "fp16", "wrong result: output 0: not close")
    assert not e.xfail_matches("x", "fp16", "InductorError: crash")  # default match: wrong results only
    assert not e.xfail_matches("x", "fp32", "wrong result: output 0")


def test_items_cover_op_db_and_split_by_cpu_support() -> None:
    run, na = corpus.items(["sin", "nn.functional.embedding*"])
    keys = {i.key for i in run}
    assert {"sin:fp32", "sin:fp16", "sin:bf16", "nn.functional.embedding:fp32"} <= keys
    assert all(i.op == "sin" or i.op.startswith("nn.functional.embedding") for i in run + na)


@pytest.mark.parametrize("op, dtype, expected", [
    ("exp", "fp16", {diff.PASS}),
    ("t", "fp32", {diff.PASS_NO_KERNEL}),
    ("sort", "fp32", {diff.FALLBACK}),
    ("special.bessel_j0", "fp32", {diff.FALLBACK, diff.FAIL}),
])
def test_quick_subset_is_classified(op: str, dtype: str, expected: set[str], report) -> None:
    rec = run_item(corpus.Item(op, dtype), expectations.load(), max_samples=3)
    assert rec["status"] in expected, rec
    if rec["status"] == diff.FALLBACK:
        assert any(op.split(".")[-1].replace("special.", "") in f for f in rec["fallbacks"]), rec
    if rec["status"] == diff.PASS:
        assert rec["launches"] > 0


QUICK = ["add", "mul", "div.no_rounding_mode", "softmax", "sum", "mean", "amax", "matmul", "mm", "bmm", "cat",
         "permute", "nn.functional.silu", "nn.functional.layer_norm", "rsqrt", "where", "clamp", "var", "expand"]


@pytest.mark.parametrize("op", QUICK)
def test_quick_subset_has_no_silent_wrong_answers(op: str, report) -> None:
    """Common ops in bf16 with three samples each: pass, or fall back naming the op."""
    rec = run_item(corpus.Item(op, "bf16"), expectations.load(), max_samples=3)
    assert rec["status"] in (diff.PASS, diff.PASS_NO_KERNEL, diff.FALLBACK, diff.XFAIL), rec
    assert rec["status"] != diff.FALLBACK or rec["fallbacks"]


def test_journal_resume_and_lost_item(tmp_path: Path) -> None:
    w = parallel._Worker(0, [corpus.Item("a", "fp32"), corpus.Item("b", "fp32")], tmp_path, 3, tmp_path / "log",
                         command.WORKER, command.lost_record)
    w.journal.write_text(json.dumps({"start": "a:fp32"}) + "\n" +
                         json.dumps({"op": "a", "dtype": "fp32", "status": "pass"}) + "\n" +
                         json.dumps({"start": "b:fp32"}) + "\n{\"op\": \"b\", \"dtyp")  # cut by a crash
    done, started = parallel.read_journal(w.journal)
    assert set(done) == {"a:fp32"} and started == "b:fp32"
    w.record_lost("worker process died (exit code -11)")
    done, started = parallel.read_journal(w.journal)
    assert done["b:fp32"]["status"] == diff.FAIL and "exit code -11" in done["b:fp32"]["first_failure"]["error"]
    assert w.remaining() == []


def test_summary_counts_and_table() -> None:
    recs = {
        "a:fp32": {"op": "a", "dtype": "fp32", "status": "pass", "samples": {"pass": 2}, "seconds": 1.5},
        "a:fp16": {"op": "a", "dtype": "fp16", "status": "fallback", "fallbacks": ["aten op aten.sort.stable"],
                   "samples": {"fallback": 1}},
        "b:fp16": {"op": "b", "dtype": "fp16", "status": "fallback", "silent_fallback": True,
                   "fallbacks": ["aten op aten.sort.stable", "eager aten.nonzero.default (no FallbackWarning)"]},
        "c:bf16": {"op": "c", "dtype": "bf16", "status": "fail", "first_failure": {"error": "boom"}},
    }
    s = summary.build(recs, [corpus.Item("d", "bf16")], max_samples=3, wall_seconds=60)
    assert s["counts"]["pass"] == 1 and s["counts"]["fallback"] == 2 and s["counts"]["fail"] == 1
    assert s["top_fallbacks"][0] == {"fallback": "aten op aten.sort.stable", "items": 2}
    assert s["silent_fallback_items"] == ["b:fp16"] and s["not_applicable"] == ["d:bf16"]
    assert s["item_seconds"] == 1.5 and s["wall_seconds"] == 60
    md = summary.markdown(s)
    assert "| fail | 0 | 0 | 1 | 1 |" in md and "`c` bf16: boom" in md


def test_committed_summary_is_complete_and_has_no_fail() -> None:
    """The committed full sweep covers every op x dtype of op_db (run or not
    applicable on the CPU) and reports no fail."""
    data = json.loads(COMMITTED.read_text())
    if torch.__version__.split("+")[0] != data["torch"].split("+")[0]:
        pytest.skip(f"the committed sweep ran on torch {data['torch']}; op_db differs on {torch.__version__}")
    run, na = corpus.items()
    assert {f"{r['op']}:{r['dtype']}" for r in data["items_detail"]} == {i.key for i in run}
    assert set(data["not_applicable"]) == {i.key for i in na}
    assert sum(data["counts"].values()) == data["items"] == len(run)
    assert data["counts"]["fail"] == 0, [f"{r['op']}:{r['dtype']}" for r in data["items_detail"]
                                        if r["status"] == "fail"]


def test_the_sweep_command_runs_items_in_worker_processes(tmp_path: Path) -> None:
    """``spyre-adapter opinfo`` end to end: two items in one worker process (the
    sweep's own entry point, ``spyre_adapter.opinfo.worker``), their journal, and
    the summary it writes - the same numbers in summary.json and in SUMMARY.md."""
    out, work = tmp_path / "out", tmp_path / "work"
    out.mkdir()
    work.mkdir()
    res = subprocess.run([sys.executable, "-m", "spyre_adapter.cli", "opinfo", "--ops", "add", "neg", "--dtypes", "fp32",
                          "--max-samples", "1", "--workers", "1", "--workdir", str(work), "--out", str(out)],
                         capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    doc = json.loads((out / "summary.json").read_text())
    assert doc["items"] == 2 and doc["counts"]["pass"] == 2 and not doc["pending"]
    done, started = parallel.read_journal(next(work.glob("*.jsonl")))
    assert set(done) == {"add:fp32", "neg:fp32"} and started is None
    assert "2 items: pass 2" in res.stdout and "| pass | 2 |" in (out / "SUMMARY.md").read_text().replace("  ", " ")
