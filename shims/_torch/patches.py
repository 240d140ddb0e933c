"""The one registry for changes the shims make to torch's own state.

A patch names its target (``"module:attr.path"``), states what the target must
look like (existence, and the leading parameter names when it is callable),
and builds its replacement from the original. Registering verifies the target
(so a release that moved it fails loudly, naming the target); applying is
scoped (a context manager, or held while a backend is registered) and always
restored; the replacement reports each time it fires.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from ..errors import PatchTargetError

log = logging.getLogger("spyre_shims.patches")
_MISSING = object()


@dataclasses.dataclass
class Patch:
    """One registered change to torch."""

    name: str
    target: str
    make: Callable[[Any, Callable[[], None]], Any]  # (original, fired) -> replacement
    reason: str
    params: tuple[str, ...] | None = None  # expected leading parameters of a callable target
    allow_none: bool = False  # the target may currently hold None (config slots)
    key: Any = None  # patch one entry of a dict target instead of the attribute itself
    new_key: bool = False  # the entry may be absent: added on apply, removed on restore
    fired: int = 0
    active: bool = False
    _saved: Any = _MISSING
    _raw: Any = _MISSING
    _inherited: bool = False


def _resolve(target: str) -> tuple[Any, str]:
    mod_name, _, path = target.partition(":")
    obj: Any = importlib.import_module(mod_name)
    *parents, leaf = path.split(".")
    for p in parents:
        obj = getattr(obj, p)
    return obj, leaf


class PatchRegistry:
    """Registered patches by name."""

    def __init__(self) -> None:
        self._patches: dict[str, Patch] = {}

    def register(self, patch: Patch) -> Patch:
        """Verify the target and record the patch (not applied yet)."""
        try:
            owner, leaf = _resolve(patch.target)
        except (ImportError, AttributeError) as exc:
            raise PatchTargetError(f"patch {patch.name!r}: target {patch.target} does not exist ({exc})") from exc
        current = getattr(owner, leaf, _MISSING)
        if patch.key is not None and current is not _MISSING:
            if not isinstance(current, dict):
                raise PatchTargetError(f"patch {patch.name!r}: target {patch.target} is not a table")
            current = current.get(patch.key, _MISSING)
            where = f"{patch.target}[{patch.key}]"
        else:
            where = patch.target
        if current is _MISSING and not (patch.new_key and patch.key is not None):
            raise PatchTargetError(f"patch {patch.name!r}: target {where} does not exist")
        if current is None and not patch.allow_none:
            raise PatchTargetError(f"patch {patch.name!r}: target {where} is None")
        if patch.params is not None and current is not None:
            try:
                got = tuple(inspect.signature(current).parameters)
            except (TypeError, ValueError) as exc:
                raise PatchTargetError(f"patch {patch.name!r}: cannot read the signature of {patch.target}") from exc
            if got[: len(patch.params)] != patch.params:
                raise PatchTargetError(f"patch {patch.name!r}: {patch.target} has parameters {got}, "
                                       f"expected {patch.params}")
        self._patches[patch.name] = patch
        return patch

    def apply(self, name: str) -> None:
        """Install a registered patch until :meth:`restore`."""
        p = self._patches[name]
        if p.active:
            return
        owner, leaf = _resolve(p.target)
        p._saved = getattr(owner, leaf).get(p.key, _MISSING) if p.key is not None else getattr(owner, leaf)
        # A class attribute is restored as the descriptor it was (a classmethod
        # or staticmethod, not the function getattr unwrapped).
        p._raw = vars(owner).get(leaf, _MISSING) if isinstance(owner, type) and p.key is None else _MISSING
        p._inherited = isinstance(owner, type) and p.key is None and leaf not in vars(owner)

        def fired() -> None:
            p.fired += 1
            if p.fired == 1:
                log.info("patch %s fired (%s)", p.name, p.reason)
            else:
                log.debug("patch %s fired (%d)", p.name, p.fired)

        replacement = p.make(None if p._saved is _MISSING else p._saved, fired)
        if p.key is not None:
            getattr(owner, leaf)[p.key] = replacement
        else:
            setattr(owner, leaf, replacement)
        p.active = True
        log.info("patch %s applied to %s: %s", p.name, p.target, p.reason)

    def restore(self, name: str) -> None:
        """Put the original back."""
        p = self._patches[name]
        if not p.active:
            return
        owner, leaf = _resolve(p.target)
        if p.key is not None and p._saved is _MISSING:
            getattr(owner, leaf).pop(p.key, None)
        elif p.key is not None:
            getattr(owner, leaf)[p.key] = p._saved
        elif p._raw is _MISSING and isinstance(owner, type) and p._inherited:
            delattr(owner, leaf)  # the class had none of its own: inherit again
        else:
            setattr(owner, leaf, p._saved if p._raw is _MISSING else p._raw)
        p.active, p._saved, p._raw, p._inherited = False, _MISSING, _MISSING, False
        log.info("patch %s restored", p.name)

    @contextmanager
    def applied(self, name: str) -> Iterator[Patch]:
        """Apply for the duration of a block."""
        was = self._patches[name].active
        self.apply(name)
        try:
            yield self._patches[name]
        finally:
            if not was:
                self.restore(name)

    def report(self) -> list[dict[str, Any]]:
        """Every patch: target, reason, whether active, how often it fired."""
        return [{"name": p.name, "target": p.target, "reason": p.reason, "active": p.active, "fired": p.fired}
                for p in self._patches.values()]


REGISTRY = PatchRegistry()
