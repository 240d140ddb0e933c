"""The stable API's own implementations of ``spyre_shims.compat`` names on
releases where Inductor lacks them (``shim`` entries of ``surface/compat_api.toml``).

Delete each when the window no longer includes the releases it serves.
"""

from __future__ import annotations

from typing import Any

RELEASES = "<2.7"
FEATURES = ["compat.ops_handlers.DefaultHandler"]


class DefaultHandler:
    """Ops handler routing every op to ``_default(name, args, kwargs)`` (Inductor's
    own ``DefaultHandler`` from 2.7; 2.6 dispatches ops by attribute look-up, so
    an attribute hook gives the same contract). COMPAT(>= 2.7): delete."""

    def _default(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        raise NotImplementedError(f"{type(self).__name__} does not implement op {name!r}")

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)

        def op(*args: Any, **kwargs: Any) -> Any:
            return self._default(name, args, kwargs)

        op.__name__ = name
        return op
