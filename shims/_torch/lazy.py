"""Run code right after torch imports one of its modules, without importing it.

A device registered from a ``torch.backends`` entry point runs inside every
``import torch``, so it must not load Dynamo, Inductor or sympy (seconds of
imports). What those need from a backend is installed when torch itself imports
them: :func:`after_import` wraps the loader of the named module, so the callback
runs once, right after the module body has run, before the importing code uses
it. Torch imports ``torch._inductor.compile_fx`` when Inductor first compiles and
``torch._dynamo`` on the first ``torch.compile``; both run after their packages
are complete (checked in ``tests/adapter/backend/test_lazy_registration.py``).
"""

from __future__ import annotations

import importlib.abc
import sys
import threading
import warnings
from collections.abc import Callable, Sequence
from importlib.machinery import ModuleSpec
from types import ModuleType
from typing import Any

_lock = threading.RLock()
#: module name -> callbacks still waiting for that module.
_PENDING: dict[str, list[Callable[[], None]]] = {}


class _AfterImportFinder(importlib.abc.MetaPathFinder):
    """Finds nothing itself: asks the other finders and wraps the loader of a
    module that has callbacks waiting."""

    def find_spec(self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None) -> ModuleSpec | None:
        if fullname not in _PENDING:
            return None
        spec = None
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            if finder is self or find is None:
                continue
            spec = find(fullname, path, target)
            if spec is not None:
                break
        loader = spec.loader if spec is not None else None
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        original = loader.exec_module

        def exec_module(module: ModuleType) -> None:
            try:
                original(module)
            finally:
                # The loader is this module's own (a new one per find_spec): put it back.
                vars(loader).pop("exec_module", None)
            _fire(fullname)

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


_FINDER = _AfterImportFinder()


def _run(name: str, callback: Callable[[], None]) -> None:
    """Run one callback from inside an import: an exception must not fail the
    import of torch's own module, so it becomes a warning."""
    try:
        callback()
    except Exception as exc:  # noqa: BLE001 - reported, never raised into torch's import
        warnings.warn(f"spyre_shims: setup after importing {name} failed: {type(exc).__name__}: {exc}",
                      RuntimeWarning, stacklevel=2)


def _fire(name: str) -> None:
    with _lock:
        callbacks = _PENDING.pop(name, [])
        if not _PENDING and _FINDER in sys.meta_path:
            sys.meta_path.remove(_FINDER)
    for callback in callbacks:
        _run(name, callback)


def after_import(name: str, callback: Callable[[], None]) -> None:
    """Call ``callback()`` right after module ``name`` is imported, or now if it
    already is (then exceptions propagate to the caller)."""
    with _lock:
        if name not in sys.modules:
            _PENDING.setdefault(name, []).append(callback)
            if _FINDER not in sys.meta_path:
                sys.meta_path.insert(0, _FINDER)
            return
    callback()


def pending() -> dict[str, int]:
    """Callbacks still waiting, by module (for tests and the probe)."""
    with _lock:
        return {k: len(v) for k, v in _PENDING.items()}


def resolve(ref: str) -> Any:
    """The object a ``"module:attr.path"`` reference names (imports the module)."""
    mod_name, _, path = ref.partition(":")
    obj: Any = importlib.import_module(mod_name)
    for part in filter(None, path.split(".")):
        obj = getattr(obj, part)
    return obj
