"""Inductor's cache folder, made private before a backend compiles into it.

Generated code, and the Kernel IR payloads inside it, are written to and loaded
back from Inductor's cache (``$TORCHINDUCTOR_CACHE_DIR``, else
``<tmp>/torchinductor_<user>``). Code loaded from there runs, so the folder must
be the user's own: it is created with mode 0700 when missing, tightened to 0700
when the user owns it, and refused when another user owns it or it is a symbolic
link (anyone can create a folder of that name in a shared ``/tmp`` first).
"""

from __future__ import annotations

import getpass
import os
import re
import stat
import tempfile
from pathlib import Path

__all__ = ["UnsafeCacheDirError", "cache_dir", "ensure_private"]

ENV = "TORCHINDUCTOR_CACHE_DIR"


class UnsafeCacheDirError(RuntimeError):
    """The cache folder is not the user's own; the message names it and the way out."""


def cache_dir() -> Path:
    """The folder Inductor uses (the same rule as Inductor: the environment
    variable, else a per-user folder in the temporary directory)."""
    if os.environ.get(ENV):
        return Path(os.environ[ENV]).absolute()
    try:
        user = getpass.getuser()
    except (KeyError, ModuleNotFoundError, OSError):
        user = f"uid_{os.getuid()}" if hasattr(os, "getuid") else "unknown_user"
    return Path(tempfile.gettempdir()) / ("torchinductor_" + re.sub(r'[\\/:*?"<>|]', "_", user))


def ensure_private(path: Path | None = None) -> Path:
    """Make ``path`` (default :func:`cache_dir`) a folder only this user can
    read or write, and point Inductor at it. Raises :class:`UnsafeCacheDirError`
    when that cannot be had."""
    path = path or cache_dir()
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        path.mkdir(mode=0o700)
    except FileExistsError:
        pass
    info = path.lstat()
    way_out = f"set {ENV} to a folder you own"
    if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode):
        raise UnsafeCacheDirError(f"Inductor cache {path} is not a plain folder (a link or a file): {way_out}")
    if hasattr(os, "getuid") and info.st_uid != os.getuid():
        raise UnsafeCacheDirError(f"Inductor cache {path} belongs to another user (uid {info.st_uid}): {way_out}")
    if info.st_mode & 0o077:
        path.chmod(0o700)
    os.environ[ENV] = str(path)
    return path
