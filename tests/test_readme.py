"""The README's code blocks work as written.

Each ```python block runs as a script in a fresh process, as a user would paste
it (torch's device autoload on, a private Inductor cache). Each ```bash line is
split into commands: cheap ones run (``spyre-adapter ... --help``); expensive ones
are checked without running: ``spyre-adapter`` commands are parsed and checked by
the CLI itself (the same code as a real run up to the work), pytest options must
be pytest's, pip extras must exist in pyproject.toml. A command the test does not
know fails it, so a new kind of snippet gets a checker.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from collections.abc import Callable
from functools import cache
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

import pytest

from spyre_adapter.cli import main as cli

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
FENCE = re.compile(r"^```(\w+)\n(.*?)^```", re.M | re.S)


def _blocks(language: str) -> list[str]:
    return [body for lang, body in FENCE.findall(README.read_text()) if lang == language]


def _commands(block: str) -> list[list[str]]:
    """Shell commands of a block: one per line, ``&&`` splits, comments dropped."""
    out: list[list[str]] = []
    for line in block.splitlines():
        words = shlex.split(line, comments=True)
        current: list[str] = []
        for word in words:
            if word == "&&":
                out.append(current)
                current = []
            else:
                current.append(word)
        if current:
            out.append(current)
    return out


def _env(tmp_path: Path) -> dict[str, str]:
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")}
    env.pop("TORCH_DEVICE_BACKEND_AUTOLOAD", None)
    env.pop("PYTEST_XDIST_WORKER", None)
    return env


@pytest.mark.parametrize("index", range(len(_blocks("python"))), ids=lambda i: f"python-{i}")
def test_python_block_runs_in_a_fresh_process(index: int, tmp_path: Path) -> None:
    script = tmp_path / "snippet.py"
    script.write_text(_blocks("python")[index])
    res = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=_env(tmp_path), capture_output=True,
                         text=True, timeout=600)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-3000:]


# ------------------------------------------------------------------ shell commands

def _spyre_adapter(argv: list[str], tmp_path: Path) -> None:
    if "--help" in argv or "-h" in argv:  # cheap: run it
        res = subprocess.run([sys.executable, "-m", "spyre_adapter.cli", *argv], cwd=tmp_path, env=_env(tmp_path),
                             capture_output=True, text=True, timeout=120)
        assert res.returncode == 0 and "usage: spyre-adapter" in res.stdout, res.stderr
        return
    if "--hf-config" in argv:  # a config the reader brings: stand one in
        config = tmp_path / argv[argv.index("--hf-config") + 1]
        config.parent.mkdir(parents=True, exist_ok=True)
        config.write_text('{"model_type": "llama"}')
    cwd = Path.cwd()
    os.chdir(tmp_path)  # relative output paths as a user in a fresh folder would give them
    try:
        if "--nested-regions" in argv and not _has_nested_regions():
            # the README names the releases that have it; on others the command refuses it
            with pytest.raises(SystemExit) as refused:
                cli.check_args(argv)
            assert refused.value.code == 2
            return
        cli.check_args(argv)  # exits 2 on a bad argument
    finally:
        os.chdir(cwd)


def _has_nested_regions() -> bool:
    import torch
    return hasattr(torch.compiler, "nested_compile_region")


@cache
def _pytest_help() -> str:
    return subprocess.run([sys.executable, "-m", "pytest", "--help"], cwd=ROOT, capture_output=True, text=True,
                          timeout=300).stdout


def _python(argv: list[str], tmp_path: Path) -> None:
    assert argv[:2] == ["-m", "pytest"], f"unknown python command in the README: {argv}"
    for word in argv[2:]:
        if word.startswith("-"):
            assert re.search(rf"(^|[\s,]){re.escape(word.split('=')[0])}[\s,=]", _pytest_help(), re.M), word


def _pip(argv: list[str], tmp_path: Path) -> None:
    assert argv[0] == "install", argv
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    for word in argv[1:]:
        match = re.fullmatch(r"\.\[(.*)\]", word)
        if match:
            assert set(match.group(1).split(",")) <= set(extras), word
        elif not word.startswith("-"):
            assert re.fullmatch(r"[A-Za-z0-9_.-]+(==[\w.+]+)?", word), word


def _torchrun(argv: list[str], tmp_path: Path) -> None:
    """A torchrun launch of one of the package's modules: its launcher options are
    torchrun's, and the module parses the arguments given to it."""
    assert "-m" in argv, argv
    at = argv.index("-m")
    launcher, module, args = argv[:at], argv[at + 1], argv[at + 2:]
    assert launcher[:1] == ["--nproc-per-node"] and launcher[1].isdigit(), launcher
    assert module.startswith("spyre_adapter."), module
    code = f"import sys, {module} as m; m._args(sys.argv[1:])"
    res = subprocess.run([sys.executable, "-c", code, *args], cwd=tmp_path, env=_env(tmp_path), capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]


CHECKERS: dict[str, Callable[[list[str], Path], None]] = {
    "spyre-adapter": _spyre_adapter, "python": _python, "pip": _pip, "torchrun": _torchrun,
}
COMMANDS = [c for block in _blocks("bash") for c in _commands(block)]


@pytest.mark.parametrize("command", COMMANDS, ids=[" ".join(c)[:60] for c in COMMANDS])
def test_shell_command_is_valid(command: list[str], tmp_path: Path) -> None:
    assert command[0] in CHECKERS, f"the README runs {command[0]!r}: add a checker for it here"
    CHECKERS[command[0]](command[1:], tmp_path)


def test_the_readme_has_snippets_of_each_kind() -> None:
    assert len(_blocks("python")) >= 2 and len(COMMANDS) >= 4
