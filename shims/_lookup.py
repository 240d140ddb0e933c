"""Objects named by ``"module:attr.path"`` text (backend references in
generated code, torch internals that move between releases)."""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["lookup"]


def lookup(ref: str) -> Any:
    """The object ``ref`` names: the module is imported, the attributes walked.
    Raises :class:`ImportError` or :class:`AttributeError` when it is not there
    (:class:`ValueError` for an empty module name)."""
    module, _, path = ref.partition(":")
    obj: Any = importlib.import_module(module)
    for part in path.split(".") if path else ():
        obj = getattr(obj, part)
    return obj
