"""Files in and out: discovery, package names, atomic writes. Bytes only: the codemods
never decode a file themselves (libcst does, honouring BOMs and coding cookies), and
never import or execute what they read."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable, Iterator
from functools import lru_cache
from pathlib import Path

__all__ = ["iter_python_files", "module_names", "atomic_write"]

_SKIP_DIRS = frozenset({"__pycache__", ".git", ".hg", ".svn", ".tox", ".nox", ".venv", "venv", "node_modules"})


def iter_python_files(paths: Iterable[str | os.PathLike[str]]) -> Iterator[Path]:
    """Files named on the command line, and ``*.py`` under named directories
    (sorted, hidden and tool directories skipped). Missing paths are yielded so
    the driver can report them."""
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            for dirpath, dirnames, filenames in os.walk(path):
                dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS and not d.startswith("."))
                for name in sorted(filenames):
                    if name.endswith(".py"):
                        yield Path(dirpath) / name
        else:
            yield path


@lru_cache(maxsize=4096)
def _package_of_dir(directory: Path) -> str | None:
    if not (directory / "__init__.py").is_file():
        return None
    parent = _package_of_dir(directory.parent) if directory.parent != directory else None
    return f"{parent}.{directory.name}" if parent else directory.name


def module_names(path: Path) -> tuple[str | None, str | None]:
    """``(full module name, package)`` of a file, from the ``__init__.py`` files
    above it; relative imports resolve against the package. ``(None, None)`` for a
    loose script."""
    path = path.resolve()
    package = _package_of_dir(path.parent)
    stem = path.stem
    if package is None:
        return None, None
    module = package if stem == "__init__" else f"{package}.{stem}"
    return module, package


def _umask() -> int:
    current = os.umask(0o022)  # the only way to read it is to set it: put it straight back
    os.umask(current)
    return current


def atomic_write(path: str | os.PathLike[str], data: bytes) -> None:
    """Replace ``path`` with ``data`` so readers see the old or the new file, never a
    mix; the file keeps its permission bits (a new file gets what the umask allows)."""
    target = Path(path)
    try:
        mode = target.stat().st_mode & 0o7777
    except FileNotFoundError:
        mode = 0o666 & ~_umask()  # a new file gets the mode open() would give it, not mkstemp's 0600
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
