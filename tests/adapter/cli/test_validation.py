"""Bad input on the command line: every row runs ``spyre-adapter`` as a real
subprocess and expects one line on stderr naming the argument, the value and what
is accepted; exit status 2; nothing on stdout; no traceback; nothing written.
The rows fail before torch loads, so the table is fast (checked below too).

The rows cover the inputs issue 14 lists and the same classes of input for every
command: out-of-range and non-numeric numbers, unknown choices and names, bad
machine overrides, missing/malformed input files, output paths whose folder is
missing or a file, unknown options.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.workloads import TINY_WORKLOAD

from spyre_adapter.cli import main as cli
from spyre_adapter.cli import opinfo as opinfo_cli
from spyre_adapter.opinfo import corpus
from spyre_adapter.zoo import blocks as models
from spyre_adapter.zoo import config as model_config

#: (id, argv, fragments the one line must contain: the argument, the value, what is accepted).
ROWS: list[tuple[str, list[str], list[str]]] = [
    # run: sizes (issue 14's list first)
    ("hidden-negative", ["run", "--hidden", "-64"], ["--hidden", "-64", "integer from 1 to"]),
    ("intermediate-negative", ["run", "--intermediate", "-1"], ["--intermediate", "-1", "integer from 1 to"]),
    ("hidden-zero", ["run", "--hidden", "0"], ["--hidden", "'0'", "integer from 1 to"]),
    ("seq-zero", ["run", "--seq", "0"], ["--seq", "'0'", "integer from 1 to"]),
    ("batch-zero", ["run", "--batch", "0"], ["--batch", "'0'", "integer from 1 to"]),
    ("seq-negative", ["run", "--seq", "-3"], ["--seq", "-3", "integer from 1 to"]),
    ("heads-zero", ["run", "--heads", "0"], ["--heads", "'0'", "integer from 1 to"]),
    ("kv-heads-not-divisor", ["run", "--heads", "8", "--kv-heads", "3"], ["--kv-heads", "3", "divisor of --heads"]),
    ("odd-head-dim", ["run", "--hidden", "520", "--heads", "8"], ["--hidden", "520", "even head size"]),
    ("hidden-not-multiple", ["run", "--hidden", "500", "--heads", "8"], ["--hidden", "500", "multiple of --heads"]),
    ("heads-not-divisor-of-default", ["run", "--heads", "3"], ["--heads", "3", "multiple of --heads"]),
    ("hidden-too-large", ["run", "--hidden", "100000"], ["--hidden", "100000", "integer from 1 to 16384"]),
    ("hidden-not-a-number", ["run", "--hidden", "x"], ["--hidden", "'x'", "integer from 1 to"]),
    ("layers-zero", ["run", "--layers", "0", "--model", "llama-tiny"], ["--layers", "'0'", "integer from 1 to"]),
    ("layers-on-a-block", ["run", "--layers", "0"], ["--layers", "'0'", "integer"]),
    ("layers-unused-by-block", ["run", "--layers", "3"], ["--layers", "3", "llama-tiny"]),
    ("heads-unused-by-mlp", ["run", "--model", "mlp", "--heads", "4"], ["--heads", "4", "llama-block"]),
    ("nested-regions-on-a-block", ["run", "--nested-regions"], ["--nested-regions", "llama-block", "llama-tiny"]),
    ("nested-regions-on-hf", ["run", "--model", "hf:llama", "--nested-regions"],
     ["--nested-regions", "hf:llama", "built-in"]),
    ("max-autotune-on-hf", ["run", "--model", "hf:llama", "--max-autotune"],
     ["--max-autotune", "hf:llama", "built-in"]),
    ("top-negative", ["run", "--top", "-1"], ["--top", "-1", "integer >= 0"]),
    ("atol-negative", ["run", "--atol", "-1"], ["--atol", "-1", "number >= 0"]),
    ("atol-nan", ["run", "--atol", "nan"], ["--atol", "nan", "number >= 0"]),
    ("model-unknown", ["run", "--model", "gpt5"], ["--model", "gpt5", "llama-block"]),
    ("tp-zero", ["run", "--model", "hf:llama", "--tp", "0"], ["--tp", "'0'", "integer from 1 to 64"]),
    ("tp-on-a-block", ["run", "--tp", "2"], ["--tp", "2", "expected 1 for this model", "hf:granite"]),
    ("tp-family-without-plan", ["run", "--model", "hf:gemma3", "--tp", "2"], ["--tp", "2", "hf:llama"]),
    ("tp-with-autocast", ["run", "--model", "hf:llama", "--tp", "2", "--autocast", "fp16"],
     ["--autocast", "fp16", "not available with --tp 2"]),
    ("tp-with-batch", ["run", "--model", "hf:llama", "--tp", "4", "--batch", "2"],
     ["--batch", "2", "not available with --tp 4"]),
    ("dtype-unknown", ["run", "--dtype", "fp64"], ["--dtype", "fp64", "fp16"]),
    ("option-unknown", ["run", "--hiden", "64"], ["--hiden", "spyre-adapter run --help"]),
    # run: machine overrides
    ("machine-garbage", ["run", "--machine", "garbage"], ["--machine", "garbage", "name=value"]),
    ("machine-not-a-number", ["run", "--machine", "cores=abc"], ["--machine", "cores='abc'", "a number"]),
    ("machine-unknown-name", ["run", "--machine", "warp_drive=9"], ["--machine", "warp_drive", "lx_kib"]),
    ("machine-lx-zero", ["run", "--machine", "lx_kib=0"], ["--machine", "lx_kib=0", "> 0"]),
    ("machine-cores-zero", ["run", "--machine", "cores=0"], ["--machine", "cores=0", "> 0"]),
    ("machine-cores-negative", ["run", "--machine", "cores=-4"], ["--machine", "cores=-4", "> 0"]),
    ("machine-cores-fraction", ["run", "--machine", "cores=2.5"], ["--machine", "cores=2.5", "whole number"]),
    ("machine-file-missing", ["run", "--machine", "/missing.json"], ["--machine", "/missing.json", "does not exist"]),
    ("machine-file-truncated", ["run", "--machine", "{tmp}/truncated.json"],
     ["--machine", "truncated.json", "not valid JSON"]),
    ("machine-file-not-object", ["run", "--machine", "{tmp}/list.json"], ["--machine", "list.json", "an object"]),
    ("machine-yaml-malformed", ["run", "--machine", "{tmp}/bad.yaml"], ["--machine", "bad.yaml", "not valid YAML"]),
    # run: output paths
    ("json-folder-missing", ["run", "--json", "{tmp}/nodir/r.json"], ["--json", "nodir/r.json", "does not exist"]),
    ("json-parent-is-a-file", ["run", "--json", "{tmp}/afile/r.json"], ["--json", "afile/r.json", "not a folder"]),
    ("trace-is-a-folder", ["run", "--trace", "{tmp}"], ["--trace", "{tmp}", "got a folder"]),
    ("trace-same-as-json", ["run", "--trace", "{tmp}/t.json", "--json", "{tmp}/t.json"],
     ["--trace", "t.json", "different file"]),
    # workloads
    ("case-unknown", ["workloads", "--case", "no_such_case", "{tmp}/ok.yaml"],
     ["--case", "no_such_case", "add_basic"]),
    ("workload-yaml-malformed", ["workloads", "{tmp}/bad.yaml"], ["FILE", "bad.yaml", "not valid YAML"]),
    ("workload-not-a-workload", ["workloads", "{tmp}/list.json"], ["FILE", "list.json", "'cases' list"]),
    ("workload-missing", ["workloads", "{tmp}/missing.yaml"], ["FILE", "missing.yaml", "existing file"]),
    ("workload-json-folder-missing", ["workloads", "{tmp}/ok.yaml", "--json", "{tmp}/nodir/w.json"],
     ["--json", "nodir/w.json", "does not exist"]),
    ("workload-max-numel-zero", ["workloads", "{tmp}/ok.yaml", "--max-numel", "0"],
     ["--max-numel", "'0'", "integer >= 1"]),
    ("workload-reset-every-zero", ["workloads", "{tmp}/ok.yaml", "--reset-every", "0"],
     ["--reset-every", "'0'", "integer >= 1"]),
    # bench
    ("bench-json-parent-is-a-file", ["bench", "--json", "{tmp}/afile/b.json"], ["--json", "afile/b.json", "folder"]),
    ("bench-machine-cores-zero", ["bench", "--machine", "cores=0"], ["--machine", "cores=0", "> 0"]),
    ("bench-max-numel-negative", ["bench", "--max-numel", "-1"], ["--max-numel", "-1", "integer >= 1"]),
    ("bench-workload-malformed", ["bench", "--workloads", "{tmp}/bad.yaml"], ["--workloads", "bad.yaml", "YAML"]),
    # probe
    ("probe-json-folder-missing", ["probe", "--json", "{tmp}/nodir/p.json"], ["--json", "nodir/p.json", "exist"]),
    # opinfo
    ("opinfo-max-samples-zero", ["opinfo", "--max-samples", "0"], ["--max-samples", "'0'", "from 1 to 7"]),
    ("opinfo-max-samples-too-many", ["opinfo", "--max-samples", "8"], ["--max-samples", "'8'", "from 1 to 7"]),
    ("opinfo-workers-zero", ["opinfo", "--workers", "0"], ["--workers", "'0'", "integer >= 1"]),
    ("opinfo-timeout-zero", ["opinfo", "--timeout", "0"], ["--timeout", "'0'", "number > 0"]),
    ("opinfo-dtype-unknown", ["opinfo", "--dtypes", "fp64"], ["--dtypes", "fp64", "fp32"]),
    ("opinfo-out-missing", ["opinfo", "--out", "{tmp}/nodir"], ["--out", "nodir", "existing folder"]),
    ("opinfo-workdir-is-a-file", ["opinfo", "--workdir", "{tmp}/afile"], ["--workdir", "afile", "is a file"]),
    ("opinfo-summarize-without-workdir", ["opinfo", "--summarize-only"], ["--summarize-only", "--workdir"]),
    ("models-family-unknown", ["models", "--sweep", "--families", "nope"], ["--families", "nope", "causal-LM"]),
    ("models-shapes-unknown", ["models", "--shapes", "huge"], ["--shapes", "huge", "static"]),
    ("models-workers-zero", ["models", "--sweep", "--workers", "0"], ["--workers", "0", "integer >= 1"]),
    ("models-summarize-without-workdir", ["models", "--sweep", "--summarize-only"], ["--summarize-only", "--workdir"]),
    ("models-out-missing", ["models", "--sweep", "--out", "{tmp}/nodir"], ["--out", "nodir", "existing folder"]),
    # upgrade / migrate (arguments defined by spyre_codemods.cli)
    ("upgrade-jobs-zero", ["upgrade", "--from", "2.6", "-j", "0", "{tmp}"], ["-j/--jobs", "0", "integer >= 1"]),
    ("upgrade-from-unknown", ["upgrade", "--from", "1.0", "{tmp}"], ["--from", "1.0", "2.4 to 2.15"]),
    ("upgrade-to-unknown", ["upgrade", "--from", "2.6", "--to", "3.0", "{tmp}"], ["--to", "3.0", "2.4 to 2.15"]),
    ("upgrade-to-not-a-release", ["upgrade", "--from", "2.6", "--to", "banana", "{tmp}"], ["--to", "banana", "2.9"]),
    ("upgrade-path-missing", ["upgrade", "--from", "2.6", "{tmp}/missing"], ["PATHS", "missing", "existing file"]),
    ("upgrade-json-folder-missing", ["upgrade", "--from", "2.6", "--json", "{tmp}/nodir/u.json", "{tmp}"],
     ["--json", "nodir/u.json", "does not exist"]),
    ("migrate-jobs-zero", ["migrate", "-j", "0", "{tmp}"], ["-j/--jobs", "0", "integer >= 1"]),
    ("migrate-from-unknown", ["migrate", "--from", "9.9", "{tmp}"], ["--from", "9.9", "2.4 to 2.15"]),
    ("migrate-no-paths", ["migrate"], ["PATHS", "at least one"]),
    # the matrix commands (arguments defined by spyre_matrix.cli)
    ("surface-release-unknown", ["surface", "9.9"], ["releases", "9.9", "2.13.0"]),
    ("surface-out-missing", ["surface", "--installed", "--out", "{tmp}/nodir"], ["--out", "nodir", "existing folder"]),
    ("compat-run-release-unknown", ["compat-run", "--torch", "1.0"], ["--torch", "1.0", "2.13.0"]),
    ("compat-run-results-missing", ["compat-run", "--torch", "2.13.0", "--results", "{tmp}/nodir"],
     ["--results", "nodir", "existing folder"]),
    # the command itself
    ("command-unknown", ["bogus"], ["COMMAND", "bogus", "run"]),
]


@pytest.fixture
def inputs(tmp_path: Path) -> Path:
    (tmp_path / "ok.yaml").write_text(TINY_WORKLOAD)
    (tmp_path / "bad.yaml").write_text("cases: [\n  - name: x\n    op: {\n")
    (tmp_path / "truncated.json").write_text('{"cores": 4')
    (tmp_path / "list.json").write_text("[1, 2]")
    (tmp_path / "afile").write_text("a file, not a folder\n")
    return tmp_path


def _spyre_adapter(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    code = "import sys; from spyre_adapter.cli.main import main; sys.exit(main())"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=120)


def _tree(root: Path) -> set[tuple[str, int]]:
    return {(str(p.relative_to(root)), p.stat().st_size) for p in root.rglob("*")}


#: Rows whose check needs transformers (the hf extra; the torch 2.6 compat cell has none, and
#: the command's one line then names the missing extra instead of the family).
NEEDS_HF = {"models-family-unknown"}
_HAS_HF = importlib.util.find_spec("transformers") is not None


@pytest.mark.parametrize(("argv", "fragments"), [
    pytest.param(a, f, id=i, marks=pytest.mark.skipif(i in NEEDS_HF and not _HAS_HF, reason="the hf extra"))
    for i, a, f in ROWS])
def test_bad_input_is_one_line_exit_2_nothing_written(inputs: Path, argv: list[str], fragments: list[str]) -> None:
    before = _tree(inputs)
    res = _spyre_adapter(*(a.format(tmp=inputs) for a in argv), env={"COLUMNS": "400"})
    assert res.returncode == 2, res.stderr
    assert res.stdout == "" and "Traceback" not in res.stderr
    lines = res.stderr.splitlines()
    assert len(lines) == 1, res.stderr
    assert lines[0].startswith("spyre-adapter") and ": error: " in lines[0], lines[0]
    for fragment in fragments:
        assert fragment.format(tmp=inputs) in lines[0], (fragment, lines[0])
    assert _tree(inputs) == before  # nothing written


def test_bad_input_fails_before_torch_or_the_compiler_load(inputs: Path) -> None:
    """The rows above are cheap because nothing heavy is imported before the checks."""
    code = ("import sys\nfrom spyre_adapter.cli.main import main\ntry:\n    main(sys.argv[1:])\nexcept SystemExit:\n"
            "    print(sorted(m for m in ('torch', 'sympy', 'libcst', 'spyre_adapter.zoo.command') if m in sys.modules))\n")
    for argv in (["run", "--hidden", "-64"], ["run", "--machine", "cores=0"],
                 ["workloads", "--case", "x", str(inputs / "ok.yaml")], ["bench", "--max-numel", "0"],
                 ["opinfo", "--workers", "0"], ["probe", "--json", str(inputs / "afile" / "p.json")],
                 ["models", "--sweep", "--families", "nope"]):
        res = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=120)
        assert res.stdout.strip() == "[]", (argv, res.stdout, res.stderr)


def test_the_model_tables_agree() -> None:
    """run's light model table (checked before torch loads) lists the models that exist."""
    from spyre_adapter.zoo import hf as hf_models

    assert {m for m in model_config.MODEL_SIZES if not m.startswith("hf:")} == set(models.MODELS)
    assert set(model_config.HF_FAMILIES) == set(hf_models.FAMILIES)
    assert set(model_config.TP_FAMILIES) <= set(hf_models.FAMILIES)
    assert {k for k in model_config.TP_SIZES} <= set(hf_models.SIZE_KEYS)
    assert set(opinfo_cli.DTYPE_NAMES) == set(corpus.DTYPES)


def test_every_command_is_listed_and_every_option_explained() -> None:
    parser = cli.build_parser(full=True)
    commands = cli.subparsers_of(parser)
    assert set(commands) == set(cli.COMMANDS)
    text = parser.format_help()
    for name in cli.COMMANDS:
        assert name in text
    for name, sub in commands.items():
        help_text = sub.format_help()
        assert "``" not in help_text and ":func:" not in help_text and ":mod:" not in help_text, name
        for action in sub._actions:
            assert action.help, f"{name}: {action.option_strings or action.dest} has no help"


def test_defaults_are_shown_in_help() -> None:
    res = _spyre_adapter("run", "--help", env={"COLUMNS": "400"})
    assert res.returncode == 0
    for fragment in ("(default: llama-block)", "(default: fp16;", "(default: 512)", "(default: 12)",
                     "(default by dtype"):
        assert fragment in res.stdout, fragment


def test_a_reader_that_goes_away_is_not_an_error() -> None:
    """``spyre-adapter models | head``: the listing meets a closed pipe; exit 0,
    no traceback."""
    pytest.importorskip("transformers", reason="the listing reads transformers' auto mapping")
    proc = subprocess.Popen([sys.executable, "-m", "spyre_adapter.cli", "models"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    proc.stdout.close()  # before the process has written a line
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 0 and "Traceback" not in err, err
