"""The file driver and the command line: bytes in/out, exit codes, reports,
parallel runs, and files that cannot be processed."""

from __future__ import annotations

import argparse
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import libcst as cst
import pytest

from spyre_codemods import cli
from spyre_codemods.driver import Job, process_file, run
from spyre_codemods.report import Finding
from spyre_codemods.rule_table import RULES

OLD = b"from torch._inductor.virtualized import V\nV.graph.sizevars.guard_equals(x, 1)\n"
NEW = b"from torch._inductor.virtualized import V\nV.graph.sizevars.check_equals(x, 1)\n"


def _cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "spyre_codemods", *args], capture_output=True, text=True, cwd=cwd)


def _tree(tmp_path: Path, files: dict[str, bytes]) -> Path:
    for name, data in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return tmp_path


def test_untouched_files_stay_byte_identical(tmp_path: Path) -> None:
    # BOM, CRLF, trailing whitespace, tabs, no final newline: and a word that passes the pre-filter
    data = b"\xef\xbb\xbfimport os \r\n\r\nx = 'sizevars.size_hint'\t\r\ny = 1"
    path = _tree(tmp_path, {"a.py": data}) / "a.py"
    for mode in ("diff", "check", "write"):
        result = process_file(path, Job("upgrade", "2.4", "2.15", mode=mode))  # type: ignore[arg-type]
        assert result.status == "unchanged" and not result.prefiltered
        assert path.read_bytes() == data


def test_changed_file_keeps_bom_and_crlf(tmp_path: Path) -> None:
    data = b"\xef\xbb\xbf# coding: utf-8\r\n" + OLD.replace(b"\n", b"\r\n") + b"y = 2  \r\n"
    path = _tree(tmp_path, {"a.py": data}) / "a.py"
    result = process_file(path, Job("upgrade", "2.4", "2.15", mode="write"))
    assert result.status == "changed"
    assert path.read_bytes() == data.replace(b"guard_equals", b"check_equals")


def test_write_is_atomic_and_keeps_the_mode(tmp_path: Path) -> None:
    path = _tree(tmp_path, {"pkg/a.py": OLD}) / "pkg" / "a.py"
    path.chmod(0o640)
    process_file(path, Job("upgrade", "2.4", "2.15", mode="write"))
    assert path.read_bytes() == NEW
    assert stat.S_IMODE(path.stat().st_mode) == 0o640
    assert sorted(p.name for p in path.parent.iterdir()) == ["a.py"]  # no temp file left


def test_unparsable_file_is_reported_and_untouched(tmp_path: Path) -> None:
    bad = b"def broken(:\n    V.graph.sizevars.size_hint(x)\n"
    path = _tree(tmp_path, {"bad.py": bad}) / "bad.py"
    result = process_file(path, Job("upgrade", "2.4", "2.15", mode="write"))
    assert result.status == "error" and "does not parse" in (result.error or "")
    assert path.read_bytes() == bad


def test_result_that_would_not_compile_is_not_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    class Breaks(cst.CSTTransformer):  # stands in for a faulty rule (which records its rewrite)
        findings = [Finding(1, "faulty-rule", "rewrite", "nonlocal at module level")]

        def __init__(self, context: object) -> None:
            super().__init__()

        def transform_module(self, tree: cst.Module) -> cst.Module:
            return tree.with_changes(body=[cst.parse_statement("nonlocal x\n"), *tree.body])

    monkeypatch.setattr(Job, "make_command", lambda self, context: Breaks(context))
    path = _tree(tmp_path, {"a.py": OLD}) / "a.py"
    result = process_file(path, Job("upgrade", "2.4", "2.15", mode="write"))
    assert result.status == "error" and "would not compile" in (result.error or "")
    assert path.read_bytes() == OLD


def test_relative_imports_use_the_package_on_disk(tmp_path: Path) -> None:
    root = _tree(tmp_path, {
        "torch/__init__.py": b"",
        "torch/_inductor/__init__.py": b"",
        "torch/_inductor/codegen/__init__.py": b"",
        "torch/_inductor/codegen/accel.py": b"from .wrapper import WrapperCodeGen\nW = WrapperCodeGen\n",
    })
    path = root / "torch/_inductor/codegen/accel.py"
    process_file(path, Job("upgrade", "2.5", "2.6", mode="write"))
    assert path.read_bytes() == b"from .wrapper import PythonWrapperCodegen\nW = PythonWrapperCodegen\n"


def test_check_mode_exit_codes_and_json(tmp_path: Path) -> None:
    root = _tree(tmp_path, {"old.py": OLD, "current.py": NEW, "pkg/empty.py": b""})
    report = tmp_path / "report.json"
    res = _cli("upgrade", "--from", "2.4", "--to", "2.15", "--check", "--json", str(report), str(root))
    assert res.returncode == 1, res.stderr
    assert "would change" in res.stdout and "old.py" in res.stdout and "current.py" not in res.stdout
    data = json.loads(report.read_text())
    assert data["summary"]["files"] == 3 and data["summary"]["changed"] == 1
    (entry,) = data["files"]
    assert entry["path"].endswith("old.py") and entry["findings"][0]["rule"] == "sizevars-check-equals"
    assert (root / "old.py").read_bytes() == OLD  # --check writes nothing

    res = _cli("upgrade", "--from", "2.4", "--to", "2.15", "--check", str(root / "current.py"))
    assert res.returncode == 0, res.stderr


def test_default_mode_prints_a_unified_diff_and_write_applies_it(tmp_path: Path) -> None:
    root = _tree(tmp_path, {"old.py": OLD})
    res = _cli("upgrade", "--from", "2.4", "old.py", cwd=root)
    assert res.returncode == 0
    assert res.stdout.startswith("--- a/old.py\n+++ b/old.py\n")
    assert "-V.graph.sizevars.guard_equals(x, 1)\n+V.graph.sizevars.check_equals(x, 1)\n" in res.stdout
    assert (root / "old.py").read_bytes() == OLD
    res = _cli("upgrade", "--from", "2.4", "--write", "old.py", cwd=root)
    assert res.returncode == 0 and (root / "old.py").read_bytes() == NEW
    assert _cli("upgrade", "--from", "2.4", "--check", "old.py", cwd=root).returncode == 0


def test_unprocessable_file_exits_2(tmp_path: Path) -> None:
    # (a file the pre-filter rules out is never parsed, so the broken one mentions sizevars)
    root = _tree(tmp_path, {"bad.py": b"x = (sizevars.size_hint\n", "old.py": OLD})
    res = _cli("upgrade", "--from", "2.4", "--check", str(root))
    assert res.returncode == 2 and "bad.py" in res.stderr
    res = _cli("migrate", "--check", str(root / "missing.py"))
    assert res.returncode == 2 and "cannot read" in res.stderr


def test_parallel_run_matches_serial(tmp_path: Path) -> None:
    files = {f"m{i}.py": (OLD if i % 3 else NEW) + f"# {i}\n".encode() for i in range(12)}
    root = _tree(tmp_path, files)
    serial = run([root], Job("upgrade", "2.4", "2.15", mode="check"), jobs=1)
    parallel = run([root], Job("upgrade", "2.4", "2.15", mode="check"), jobs=2)
    assert [(f.path, f.status) for f in serial.files] == [(f.path, f.status) for f in parallel.files]
    assert len(serial.changed) == 8


def test_migrate_cli(tmp_path: Path) -> None:
    code = b"from torch._inductor.utils import IndentedBuffer\nbuf = IndentedBuffer()\n"
    root = _tree(tmp_path, {"m.py": code})
    res = _cli("migrate", "--write", "--json", str(tmp_path / "r.json"), str(root / "m.py"))
    assert res.returncode == 0, res.stderr
    assert (root / "m.py").read_bytes() == b"from spyre_shims.compat import IndentedBuffer\nbuf = IndentedBuffer()\n"
    assert json.loads((tmp_path / "r.json").read_text())["summary"]["findings"] == {"rewrite": 1}


def test_cli_arguments(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["upgrade", "--from", "2.8", "--to", "2.9", "--list-rules"]) == 0
    listed = capsys.readouterr().out
    assert "register-backend-keywords" in listed and "free-symbol-uses" not in listed
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["upgrade", "--from", "two", "x.py"])
    assert exit_info.value.code == 2
    assert cli.main(["upgrade", "--from", "2.9", "--to", "2.8", "x.py"]) == 2
    assert cli.main(["upgrade", "--from", "2.4", "--rule", "no-such-rule", "x.py"]) == 2


def test_register_adds_both_subcommands() -> None:
    parser = argparse.ArgumentParser(prog="spyre-adapter")
    cli.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["migrate", "--from", "2.8", "-j", "2", "a.py"])
    assert args.func is cli.run_migrate and args.jobs == 2 and args.source == "2.8"
    args = parser.parse_args(["upgrade", "--from", "2.4.1", "--to", "2.13.0", "--write", "src"])
    assert args.func is cli.run_upgrade and (args.source, args.target, args.mode) == ("2.4", "2.13", "write")


def test_docs_list_every_rule() -> None:
    docs = Path(__file__).resolve().parents[2] / "docs" / "codemods.md"
    text = docs.read_text(encoding="utf-8")
    assert cli.rules_markdown() in text, "regenerate the table in docs/codemods.md"
    assert cli.advisories_markdown() in text, "regenerate the advisory table in docs/codemods.md"
    assert cli.redesigns_markdown() in text, "regenerate the redesign table in docs/codemods.md"


def test_no_torch_internals_imported_by_the_codemods() -> None:
    # the codemods read torch sources as text only: importing them must not load Inductor
    code = "import sys, spyre_codemods.cli, spyre_codemods.driver; print([m for m in sys.modules if m.startswith('torch')])"
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env={**os.environ})
    assert res.returncode == 0 and res.stdout.strip() == "[]", res.stdout + res.stderr


def test_prefilter_is_sharp_but_conservative() -> None:
    # (rules only: without --rule, any file naming torch internals is checked against the index)
    prefilter = Job("upgrade", "2.4", "2.15", rule_ids=tuple(r.id for r in RULES)).prefilter()

    def check(data: bytes) -> bool:
        return prefilter(data, None)

    assert not check(b"import os\n")
    assert not check(b"hint = size_hint(sizevars)\n")  # both words, but not `sizevars.size_hint`
    assert check(b"n = V.graph.sizevars.size_hint(x)\n")
    assert check(b"n = (V.graph.sizevars  # why\n    ).size_hint(x)\n")
    # generate_kernel_call: only calls with extra positional or dropped keyword arguments
    assert not check(b"w.generate_kernel_call(name, args, triton=False)\n")
    assert not check(b"w.generate_kernel_call(*args, **kwargs)\n")
    assert check(b"w.generate_kernel_call(name, args, grid)\n")
    assert check(b"w.generate_kernel_call(name, f(a, b), device_index=0)\n")
    assert check(b"w.generate_kernel_call(name, ')', grid, 0)\n")  # brackets inside strings
    assert check(b"w.generate_kernel_call(name, args,\n")  # cannot tell: say yes


BAD_ARGUMENTS = [
    (["upgrade", "-j", "0", "--from", "2.6"], "argument -j/--jobs: '0'"),
    (["upgrade", "-j", "two", "--from", "2.6"], "argument -j/--jobs: 'two'"),
    (["migrate", "-j", "-1"], "argument -j/--jobs: '-1'"),
    (["upgrade", "--from", "1.0"], "argument --from: '1.0' is not a torch release"),
    (["upgrade", "--from", "2.6", "--to", "3.0"], "argument --to: '3.0' is not a torch release"),
    (["upgrade", "--from", "two"], "argument --from: 'two'"),
    (["migrate", "--from", "9.9"], "argument --from: '9.9'"),
    (["upgrade", "--from", "2.9", "--to", "2.8"], "argument --to: 2.8 is older than --from 2.9"),
    (["upgrade", "--from", "2.6", "--rule", "no-such-rule"], "argument --rule: unknown rule id(s) no-such-rule"),
    (["upgrade", "--from", "2.6", "--modernize=yes"], "--modernize: ignored explicit argument 'yes'"),
    (["upgrade", "--from", "2.6", "--json", "{file}/report.json"], "argument --json: cannot write a report"),
]


@pytest.mark.parametrize(("argv", "expected"), BAD_ARGUMENTS, ids=[" ".join(a) for a, _ in BAD_ARGUMENTS])
def test_bad_arguments_get_one_line_exit_2_and_nothing_written(
    tmp_path: Path, argv: list[str], expected: str
) -> None:
    root = _tree(tmp_path, {"old.py": OLD, "afile": b""})
    argv = [a.replace("{file}", str(root / "afile")) for a in argv]
    res = _cli(*argv, str(root / "old.py"), "--write")
    assert res.returncode == 2, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and expected in lines[0], res.stderr
    assert "Traceback" not in res.stderr and (root / "old.py").read_bytes() == OLD
    assert sorted(p.name for p in root.iterdir()) == ["afile", "old.py"]


def test_no_paths_is_an_argument_error() -> None:
    res = _cli("upgrade", "--from", "2.6")
    assert res.returncode == 2 and res.stderr.strip() == (
        "spyre-adapter upgrade: error: argument PATHS: none given (accepted: Python files or directories)")


def test_modernize_and_the_diff_header(tmp_path: Path) -> None:
    code = b"from torch._inductor.ir import LoopBody\nfrom torch._inductor.virtualized import V\n" \
           b"V.graph.sizevars.guard_equals(x, 1)\nB = LoopBody\n"
    root = _tree(tmp_path, {"m.py": code})
    res = _cli("upgrade", "--from", "2.4", "--to", "2.15", "m.py", cwd=root)
    assert res.returncode == 0
    # the old spelling of loop-body-module still works on 2.15: only said, not done
    assert res.stdout.startswith("# m.py: not applied, the old spelling still works on 2.15 (pass --modernize): "
                                 "loop-body-module\n--- a/m.py\n")
    assert "loop_body" not in res.stdout and "pass --modernize): loop-body-module" in res.stderr
    res = _cli("upgrade", "--from", "2.4", "--to", "2.15", "--modernize", "--write", "m.py", cwd=root)
    assert res.returncode == 0
    assert b"from torch._inductor.loop_body import LoopBody\n" in (root / "m.py").read_bytes()
    listed = _cli("upgrade", "--from", "2.4", "--to", "2.15", "--list-rules").stdout
    assert "loop-body-module" in listed and "(only with --modernize)" in listed
