"""Inductor's cache folder (generated code and the payloads in it are loaded
back from there) is the user's own before a backend compiles into it."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from spyre_shims._torch.cachedir import ENV, UnsafeCacheDirError, ensure_private


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_missing_folder_is_created_private_and_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "nested" / "inductor"
    monkeypatch.setenv(ENV, str(target))
    assert ensure_private() == target
    assert _mode(target) == 0o700 and target.stat().st_uid == os.getuid()
    assert os.environ[ENV] == str(target)


def test_an_open_folder_of_the_user_is_tightened(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "open"
    target.mkdir(mode=0o777)
    target.chmod(0o777)
    monkeypatch.setenv(ENV, str(target))
    ensure_private()
    assert _mode(target) == 0o700


def test_a_link_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    monkeypatch.setenv(ENV, str(tmp_path / "link"))
    with pytest.raises(UnsafeCacheDirError, match="not a plain folder.*TORCHINDUCTOR_CACHE_DIR"):
        ensure_private()


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="giving a folder away needs root")
def test_another_users_folder_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "theirs"
    target.mkdir(mode=0o700)
    os.chown(target, 54321, -1)
    monkeypatch.setenv(ENV, str(target))
    with pytest.raises(UnsafeCacheDirError, match="another user"):
        ensure_private()


def test_the_folder_inductor_compiles_into_is_private(tmp_path: Path) -> None:
    """In a fresh process, a compile for the spyre device (which registers the
    backend) writes its generated code into a folder created private."""
    target = tmp_path / "cache"
    script = ("import torch; out = torch.compile(lambda x: x * 2 + 1)(torch.ones(8, device='spyre')); "
              "assert torch.equal(out.cpu(), torch.full((8,), 3.0))")
    env = {**os.environ, ENV: str(target)}
    res = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    assert [p for p in target.rglob("*") if p.is_file()], "nothing was written to the cache folder"
    assert _mode(target) == 0o700
