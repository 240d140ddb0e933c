"""Resolution of ``spyre_shims.compat.<module>.<name>`` on the installed release.

The generated table (``surface/compat_table.json``, from the per-release API
index) says where each stable name lives in every release of the window. The
installed release's entry is tried first; the other known places follow (a
release newer than the table, a patch release that moved something), so
resolution is feature detection guided by the table, never a version switch.
"""

from __future__ import annotations

import functools
from typing import Any

from spyre_surface.compat_api import load_compat_table

from .._lookup import lookup
from ..errors import UnsupportedTorchError
from .version import WINDOW_TEXT, installed


def _minor() -> str:
    v = installed()
    return f"{v.major}.{v.minor}"


def exported(module: str) -> frozenset[str]:
    """The re-exported names of ``spyre_shims.compat.<module>`` (table order)."""
    return frozenset(load_compat_table()["modules"][module])


def candidates(module: str, name: str) -> list[str]:
    """``"module:attr"`` places to try, the installed release's first."""
    entry = load_compat_table()["modules"][module][name]
    minor = _minor()
    where: dict[str, list[str]] = entry["where"]
    mine = [loc for loc, releases in where.items() if minor in releases]
    newest_first = sorted(where, key=lambda loc: max(tuple(int(x) for x in r.split(".")) for r in where[loc]),
                          reverse=True)
    return mine + [loc for loc in newest_first if loc not in mine]


@functools.cache
def resolve(module: str, name: str) -> Any:
    """The object behind ``spyre_shims.compat.<module>.<name>`` on this release."""
    tried = candidates(module, name)
    for loc in tried:
        try:
            return lookup(loc if not loc.endswith(":") else loc[:-1])
        except (ImportError, AttributeError):
            continue
    raise UnsupportedTorchError(f"compat.{module}.{name}", str(installed()), WINDOW_TEXT,
                                f"none of {', '.join(tried)} exists")
