"""The workload runner: the YAML format, case building, classification, the
command line; plus a quick subset of the real-model files (the full runs are
``nox -s workloads``, results in results/workloads/)."""

from __future__ import annotations

import json
import operator
import textwrap
from pathlib import Path

import pytest
import torch

from tests.support.compare import shared_workloads

from spyre_adapter.cli.main import main as cli_main
from spyre_adapter.workloads import builders
from spyre_adapter.workloads import differential as diff
from spyre_adapter.workloads import spec
from spyre_adapter.workloads.literals import parse_literal
from spyre_adapter.workloads.runner import run_files

WORKLOADS = shared_workloads()
REAL_FILES = sorted(WORKLOADS.glob("*-Instruct.yaml")) + sorted(WORKLOADS.glob("*-instruct.yaml"))
OK = (diff.PASS, diff.PASS_NO_KERNEL, diff.FALLBACK)


# ------------------------------------------------------------------ literals and ops

def test_py_literals_parse_without_eval() -> None:
    assert parse_literal("(Ellipsis, None, slice(None, 64, None))") == (Ellipsis, None, slice(None, 64, None))
    assert parse_literal("(slice(-1, None, None), -2, [1, 2])") == (slice(-1, None, None), -2, [1, 2])
    for bad in ("__import__('os').system('true')", "torch.float32", "slice(x)", "(1).real", "lambda: 1"):
        with pytest.raises(ValueError):
            parse_literal(bad)


def test_op_names_resolve_to_what_the_capture_called() -> None:
    r = builders.resolve_op
    assert r("torch.getitem") is operator.getitem and r("torch.truediv") is operator.truediv
    assert r("torch.float") is torch.Tensor.float  # torch.float is a dtype, the capture called the method
    assert r("torch.to") is torch.Tensor.to and r("torch.add_") is torch.Tensor.add_
    assert r("torch.index_copy_") is torch.Tensor.index_copy_
    assert r("torch.mul") is torch.mul and r("torch.Tensor.expand") is torch.Tensor.expand
    assert r("torch.ops.aten.view") is torch.ops.aten.view
    assert r("torch.nn.functional.silu") is torch.nn.functional.silu
    # the capture names Python operators as the operator module does; reflected ones by their dunder
    assert r("torch.or_") is operator.or_ and r("torch.and_") is operator.and_ and r("torch.xor") is operator.xor
    assert r("torch.invert") is operator.invert and r("torch.lshift") is operator.lshift
    assert r("torch.rshift") is operator.rshift and r("torch.ior") is operator.ior
    assert r("torch.ror") is torch.Tensor.__ror__ and r("torch.rtruediv") is torch.Tensor.__rtruediv__
    for bad in ("torch.no_such_op", "numpy.add", "", "torch.call", "torch.rfoo", "torch.init"):
        with pytest.raises(builders.CaseError):
            r(bad)


def _case(op: str, *inputs: dict, **kwargs: object) -> spec.CaseSpec:
    return spec.CaseSpec(name="c", op=op, inputs=tuple(inputs), kwargs=dict(kwargs), index=3)


def test_tensors_follow_shape_stride_offset_and_are_reproducible() -> None:
    t = {"tensor": {"shape": [1, 8, 41, 64], "stride": [41984, 128, 1024, 1], "storage_offset": 64,
                    "dtype": "torch.bfloat16", "init": "rand"}}
    built = builders.build(_case("torch.neg", t), spec.Defaults(seed=123))
    (a,), _ = built.make_args("cpu")
    assert a.shape == (1, 8, 41, 64) and a.stride() == (41984, 128, 1024, 1) and a.storage_offset() == 64
    assert a.dtype == torch.bfloat16 and 0 <= float(a.min()) and float(a.max()) <= 1
    (b,), _ = built.make_args("cpu")
    assert torch.equal(a, b)
    (d,), _ = built.make_args("spyre")
    assert d.device.type == "spyre" and d.stride() == a.stride() and d.storage_offset() == 64
    assert torch.equal(d.cpu(), a)


def test_values_devices_dtypes_and_xavier() -> None:
    c = _case("torch.to", {"tensor": {"shape": [], "dtype": "torch.int64", "device": "cpu", "init": "randint",
                                      "init_args": {"high": 1000}}}, {"value": "cuda:0"})
    (t, dev), _ = builders.build(c, spec.Defaults()).make_args("spyre")
    assert t.device.type == "cpu" and dev == "spyre"  # captured on the host: stays there
    c = _case("torch.zeros", {"value": "(1, 8, 2, 3)"}, dtype="torch.bfloat16", device="cuda:0")
    (shape,), kw = builders.build(c, spec.Defaults()).make_args("cpu")
    assert shape == (1, 8, 2, 3) and kw == {"dtype": torch.bfloat16, "device": "cpu"}
    c = _case("torch.mul", {"tensor": {"shape": [64, 32], "init": "xavier"}})
    (w,), _ = builders.build(c, spec.Defaults(dtype="fp32")).make_args("cpu")
    assert float(w.abs().max()) <= (6 / 96) ** 0.5 and w.dtype == torch.float32


def test_index_copy_indices_are_unique() -> None:
    c = _case("torch.index_copy_",
              {"tensor": {"shape": [4, 2048], "dtype": "torch.bfloat16"}}, {"value": 1},
              {"tensor": {"shape": [300], "dtype": "torch.int64", "init": "randint", "init_args": {"high": 2048}}},
              {"tensor": {"shape": [4, 300], "dtype": "torch.bfloat16"}})
    built = builders.build(c, spec.Defaults())
    (_, _, index, _), _ = built.make_args("cpu")
    assert index.unique().numel() == 300 and built.notes


@pytest.mark.parametrize("inputs, message", [
    ([{"tensor": {"shape": [2, -1]}}], "bad shape"),
    ([{"tensor": {"shape": [2, 3], "stride": [1]}}], "bad stride"),
    ([{"tensor": {"shape": [2], "dtype": "torch.float128"}}], "unknown dtype"),
    ([{"weird": 1}], "unknown input kind"),
    ([{"py": "__import__('os')"}], "unsupported literal"),
])
def test_malformed_cases_raise_case_error(inputs: list, message: str) -> None:
    with pytest.raises(builders.CaseError, match=message):
        builders.build(_case("torch.neg", *inputs), spec.Defaults())


def test_every_case_of_the_real_files_builds() -> None:
    assert len(REAL_FILES) == 2, REAL_FILES
    for path in REAL_FILES:
        wf = spec.load(path)
        assert wf.defaults.atol == 0.005 and len(wf.cases) > 100
        for c in wf.cases:
            builders.build(c, wf.defaults)  # raises CaseError naming the problem


# ------------------------------------------------------------------ the checker can fail

def _make(*tensors: torch.Tensor) -> diff.MakeArgs:
    return lambda device: (diff.place(list(tensors), device), {})


def test_check_reports_wrong_numbers_and_wrong_mutations_as_fail(report) -> None:
    x = torch.rand(5, 7)
    wrong = diff.check(torch.sin, _make(x), atol=1e-5, rtol=1e-5, compiled=lambda a: torch.sin(a) + 1e-3)
    assert wrong.status == diff.FAIL and "wrong result" in wrong.detail
    bad_mutation = diff.check(lambda a: a.add_(1), _make(x), atol=1e-5, rtol=1e-5, compiled=lambda a: a + 1)
    assert bad_mutation.status == diff.FAIL and "mutated input" in bad_mutation.detail
    crash = diff.check(torch.sin, _make(x), atol=1e-5, rtol=1e-5, compiled=lambda a: a.view(3))
    assert crash.status == diff.FAIL and "RuntimeError" in crash.detail


def test_check_classifies_device_pass_view_and_named_fallback(report) -> None:
    x = torch.rand(5, 70)
    assert diff.check(torch.exp, _make(x), atol=1e-5, rtol=1e-5).status == diff.PASS
    assert diff.check(lambda a: a.t(), _make(x), atol=0, rtol=0).status == diff.PASS_NO_KERNEL
    histc = diff.check(lambda a: torch.histc(a, 10), _make(x), atol=0, rtol=0)  # no device kernel: the host runs it
    assert histc.status == diff.FALLBACK and any("histc" in f for f in histc.fallbacks)


def test_check_flags_host_execution_without_warning(report) -> None:
    """nonzero's output shape depends on data: Dynamo breaks the graph and the op
    runs eagerly on the host. The check must not call that a device pass."""
    out = diff.check(torch.nonzero, _make(torch.tensor([0.0, 1.0, 0.0, 2.0])), atol=0, rtol=0)
    assert out.status == diff.FALLBACK and any("nonzero" in f for f in out.fallbacks), out


# ------------------------------------------------------------------ runner and CLI

FILE = textwrap.dedent("""
    model: unit
    default: {dtype: fp16, seed: 7, atol: 5.0e-3, rtol: 5.0e-3}
    cases:
      - name: mul_strided
        op: torch.mul
        inputs:
          - tensor: {shape: [3, 65], stride: [130, 2], storage_offset: 1, init: rand}
          - value: 3.0
      - name: view_only
        op: torch.Tensor.view
        inputs:
          - tensor: {shape: [2, 64]}
          - value: (4, -1)
      - name: add_inplace
        op: torch.add_
        inputs:
          - tensor: {shape: [], dtype: torch.int64, init: randint, init_args: {high: 1000}}
          - value: 41
      - name: histogram
        op: torch.histc
        inputs:
          - tensor: {shape: [4, 33], dtype: torch.float32}
      - name: nonsense_op
        op: torch.frobnicate
        inputs:
          - tensor: {shape: [2]}
      - name: negative_shape
        op: torch.neg
        inputs:
          - tensor: {shape: [2, -3]}
      - name: cpu_rejects
        op: torch.matmul
        inputs:
          - tensor: {shape: [2, 3]}
          - tensor: {shape: [4, 5]}
    """)


BITWISE = textwrap.dedent("""\
    model: bitwise
    defaults: {dtype: fp16, seed: 3, atol: 0, rtol: 0}
    cases:
      - name: or_masks
        op: torch.or_
        inputs:
          - tensor: {shape: [1, 1, 41, 41], dtype: bool}
          - tensor: {shape: [1, 1, 1, 41], dtype: bool}
      - name: and_masks
        op: torch.and_
        inputs:
          - tensor: {shape: [4, 1, 64], dtype: bool}
          - tensor: {shape: [1, 8, 64], dtype: bool}
      - name: xor_ints
        op: torch.xor
        inputs:
          - tensor: {shape: [32, 64], dtype: torch.int32, init: randint, init_args: {high: 1000}}
          - tensor: {shape: [32, 64], dtype: torch.int32, init: randint, init_args: {high: 1000}}
      - name: invert_mask
        op: torch.invert
        inputs:
          - tensor: {shape: [3, 128], dtype: bool}
      - name: invert_ints
        op: torch.invert
        inputs:
          - tensor: {shape: [3, 128], dtype: torch.int64, init: randint, init_args: {low: -50, high: 50}}
      - name: lshift_scalar
        op: torch.lshift
        inputs:
          - tensor: {shape: [16, 64], dtype: torch.int32, init: randint, init_args: {high: 1000}}
          - value: 3
      - name: rshift_tensor
        op: torch.rshift
        inputs:
          - tensor: {shape: [16, 64], dtype: torch.int64, init: randint, init_args: {low: -5000, high: 5000}}
          - tensor: {shape: [16, 64], dtype: torch.int64, init: randint, init_args: {high: 8}}
      - name: ior_in_place
        op: torch.ior
        inputs:
          - tensor: {shape: [8, 32], dtype: bool}
          - tensor: {shape: [8, 32], dtype: bool}
      - name: ror_scalar_left
        op: torch.ror
        inputs:
          - tensor: {shape: [8, 32], dtype: torch.int32, init: randint, init_args: {high: 1000}}
          - value: 5
    """)


def test_bitwise_and_shift_operators_build_and_match_cpu_eager(tmp_path: Path, report) -> None:
    """``|``, ``&``, ``^``, ``~``, shifts, ``|=`` and a reflected ``5 | t`` as the
    capture names them: each compiled on spyre, run as a device kernel and
    equal to CPU eager bit for bit (an in-place case: its mutated argument too)."""
    path = tmp_path / "bitwise.yaml"
    path.write_text(BITWISE)
    recs = run_files([path], progress=False)
    assert len(recs) == 9
    for rec in recs:
        assert rec["status"] == diff.PASS and rec["launches"] >= 1, rec


def test_runner_classifies_and_never_crashes(tmp_path: Path, report) -> None:
    path = tmp_path / "unit.yaml"
    path.write_text(FILE)
    recs = {r["name"]: r for r in run_files([path], progress=False)}
    assert recs["mul_strided"]["status"] == diff.PASS and recs["mul_strided"]["launches"] >= 1
    assert 0 < recs["mul_strided"]["cpu_seconds"] and 0 < recs["mul_strided"]["seconds"]
    assert recs["view_only"]["status"] == diff.PASS_NO_KERNEL
    assert recs["add_inplace"]["status"] in (diff.PASS, diff.PASS_NO_KERNEL)
    assert recs["histogram"]["status"] == diff.FALLBACK and any("histc" in f for f in recs["histogram"]["fallbacks"])
    for name, why in (("nonsense_op", "unknown op"), ("negative_shape", "bad shape"), ("cpu_rejects", "CPU eager")):
        assert recs[name]["status"] == diff.ERROR and name in recs[name]["detail"] and why in recs[name]["detail"]


def test_cli_json_exit_code_and_max_numel(tmp_path: Path, report, capsys: pytest.CaptureFixture[str],
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "240")  # the table folds long cells in narrow terminals
    path = tmp_path / "unit.yaml"
    path.write_text(FILE)
    out = tmp_path / "out.json"
    code = cli_main(["workloads", str(path), "--json", str(out), "--max-numel", "150", "--case", "mul_strided",
                           "--case", "view_only"])
    doc = json.loads(out.read_text())
    assert code == 0
    assert doc["summary"] == {"total": 2, "passed": 0, "passed_no_kernel": 1, "fallback": 0, "failed": 0,
                              "errors": 0, "skipped": 1}
    skipped = next(c for c in doc["cases"] if c["name"] == "mul_strided")
    assert skipped["status"] == diff.SKIPPED and "--max-numel" in skipped["detail"]
    assert "view_only" in capsys.readouterr().out
    assert cli_main(["workloads", str(path), "--case", "nonsense_op"]) == 1  # a case that cannot be built
    with pytest.raises(SystemExit) as exit_info:  # a file that does not exist: checked before any work
        cli_main(["workloads", str(tmp_path / "missing.yaml")])
    assert exit_info.value.code == 2 and "missing.yaml" in capsys.readouterr().err


def test_workloads_subcommand_registers(tmp_path: Path) -> None:
    from spyre_adapter.cli.argcheck import ArgumentParser
    from spyre_adapter.cli.workloads import register

    a, b = tmp_path / "a.yaml", tmp_path / "b.yaml"
    a.write_text(FILE)
    b.write_text(FILE)
    parser = ArgumentParser()
    register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["workloads", str(a), str(b), "--json", str(tmp_path / "x.json"), "--max-numel", "5"])
    assert [wf.path for wf in args.files] == [a, b] and args.json == str(tmp_path / "x.json")
    assert args.max_numel == 5 and args.files[0].cases[0].name


def test_progress_is_a_line_per_file_when_stderr_is_not_a_terminal(tmp_path: Path, report,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "unit.yaml"
    path.write_text(FILE)
    recs = run_files([path], progress=True, cases=["view_only", "mul_strided"])
    err = capsys.readouterr().err.splitlines()
    assert len(recs) == 2
    assert err[0].endswith("unit.yaml: 2 case(s)") and "unit.yaml: done (" in err[-1], err


# ------------------------------------------------------------------ real-model quick subset

QUICK = ["torch.le.1", "torch.getitem.1", "torch.neg.1", "torch.cat.2", "torch.index_copy_.2", "torch.to.5",
         "torch.arange.1", "torch.Tensor.expand.1", "torch.nn.functional.silu.2", "torch.mean.2"]


@pytest.mark.parametrize("path", REAL_FILES, ids=lambda p: p.stem)
def test_real_model_quick_subset_passes_or_falls_back_visibly(path: Path, report) -> None:
    recs = run_files([path], progress=False, cases=QUICK)
    assert len(recs) == len(QUICK)
    for r in recs:
        assert r["status"] in OK, r
        if r["status"] == diff.FALLBACK:
            assert r["fallbacks"], r
