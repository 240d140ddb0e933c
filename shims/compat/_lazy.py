"""The one way a ``spyre_shims.compat.<module>`` serves its re-exported names.

Each module lists its names in ``__all__`` (checked against the declaration,
``surface/compat_api.toml``, by the tests and recorded in the API snapshot) and
resolves them on first access through the per-release table: nothing outside
``__all__`` is ever handed out, so the module is not a window onto
``torch._inductor``.
"""

from __future__ import annotations

from typing import Any

from .._torch import compat_api


def resolve(module: str, name: str) -> Any:
    """``spyre_shims.compat.<module>.<name>`` (``module`` is the full module name)."""
    short = module.rpartition(".")[2]
    if name not in compat_api.exported(short):
        raise AttributeError(f"module {module!r} has no attribute {name!r}")
    return compat_api.resolve(short, name)
