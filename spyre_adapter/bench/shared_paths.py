"""Where the project's shared data lives: ``shared/`` beside the checkout (real
workload files, IBM's torch-spyre cost model as reference data).

A git worktree sits deeper than the main checkout and an installed package has
no checkout around it, so the folder is found, in order: from an environment
variable naming it, else by searching upward from this package for
``shared/<relative>``. Nothing is ever copied from it.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["find_shared", "REFERENCE_ENV", "REFERENCE_RELATIVE"]

#: Environment variable naming the torch-spyre cost-model folder itself.
REFERENCE_ENV = "SPYRE_REFERENCE_DIR"
#: The cost-model folder relative to ``shared``'s parent.
REFERENCE_RELATIVE = Path("shared") / "reference" / "torch-spyre-cost-model"


def find_shared(relative: str | os.PathLike[str], env: str | None = None) -> tuple[Path | None, list[Path]]:
    """The folder ``relative`` (e.g. ``shared/workloads``): ``$env`` when that
    variable is set (taken as is, found or not), else the first ancestor of this
    package holding ``relative``. Returns the folder (None when not found) and
    every place looked at, for the error message."""
    if env and os.environ.get(env):
        path = Path(os.environ[env]).expanduser()
        return (path if path.is_dir() else None), [path]
    looked = []
    for parent in Path(__file__).resolve().parents[1:]:
        candidate = parent / relative
        looked.append(candidate)
        if candidate.is_dir():
            return candidate, looked
    return None, looked
