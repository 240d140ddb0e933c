"""What ``torch._inductor``, ``torch._dynamo`` and ``torch._functorch`` (AOTAutograd) contain in each supported release.

Generated from the release wheels by :mod:`spyre_codemods.index_build` (nox session
``api_index``) and shipped as package data (``data/api_index.json.gz``). Per module:
every name bound at its top level (classes, functions with their signatures, values,
and the names it imports, which resolve at runtime too), each class's bases and
methods with signatures, and its star imports. Each fact carries the bit mask of the
releases where it holds.

The codemods ask it whether ``from M import X`` resolves on a release, where ``X``
lives now, and how a function's or method's parameters changed between two releases.
"""

from __future__ import annotations

import difflib
import gzip
import json
from dataclasses import dataclass
from functools import cached_property, lru_cache
from pathlib import Path
from typing import Any

from .releases import Release, parse_release

__all__ = [
    "SCHEMA",
    "INDEXED_PACKAGES",
    "INDEX_PATH",
    "ApiIndex",
    "ReleaseApi",
    "Signature",
    "Param",
    "load_index",
    "bodies_path",
    "is_indexed",
]

SCHEMA = 1
#: Packages whose modules the index describes.
INDEXED_PACKAGES: tuple[str, ...] = ("torch._inductor", "torch._dynamo", "torch._functorch")
INDEX_PATH = Path(__file__).resolve().parent / "data" / "api_index.json.gz"
_MAX_DEPTH = 20  # import chains are short; this only stops cycles


def is_indexed(qualname: str) -> bool:
    """True for a name under one of :data:`INDEXED_PACKAGES`."""
    return any(qualname == p or qualname.startswith(p + ".") for p in INDEXED_PACKAGES)


@dataclass(frozen=True)
class Param:
    """One parameter: ``kind`` is ``positional`` (positional-or-keyword), ``posonly``,
    ``kwonly``, ``varargs`` or ``varkw``; ``default`` is the rendered default or ``None``."""

    name: str
    kind: str
    default: str | None

    def __str__(self) -> str:
        prefix = {"varargs": "*", "varkw": "**"}.get(self.kind, "")
        return prefix + self.name + ("" if self.default is None else f"={self.default}")


@dataclass(frozen=True)
class Signature:
    """A function's parameters as the index records them (``text`` as written)."""

    text: str
    kind: str  # f function/method, s staticmethod, c classmethod

    @cached_property
    def params(self) -> tuple[Param, ...]:
        out: list[Param] = []
        kind = "positional"
        for part in _split_params(self.text):
            if part == "/":
                out = [Param(p.name, "posonly", p.default) for p in out]
                continue
            if part == "*":
                kind = "kwonly"
                continue
            if part.startswith("**"):
                out.append(Param(part[2:], "varkw", None))
                continue
            if part.startswith("*"):
                out.append(Param(part[1:], "varargs", None))
                kind = "kwonly"
                continue
            name, eq, default = part.partition("=")
            out.append(Param(name, kind, default if eq else None))
        return tuple(out)

    @property
    def bound_params(self) -> tuple[Param, ...]:
        """Parameters a caller passes (``self``/``cls`` dropped for methods)."""
        params = self.params
        if self.kind in ("f", "c") and params and params[0].kind in ("positional", "posonly") \
                and params[0].name in ("self", "cls"):
            return params[1:]
        return params

    def render(self, name: str) -> str:
        """``name(a, b=1, *, c)`` for messages."""
        return f"{name}({self.text})"


def _split_params(text: str) -> list[str]:
    """Split a rendered parameter list at top-level commas (defaults may hold commas)."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:i].strip())
            start = i + 1
    last = text[start:].strip()
    if last:
        parts.append(last)
    return parts


def _pick(entries: list[list[Any]], bit: int) -> Any:
    for value, mask in entries:
        if mask & bit:
            return value
    return None


class ReleaseApi:
    """The index as it stands in one release (views are cheap: modules are decoded on use)."""

    def __init__(self, index: ApiIndex, release: str, bit: int) -> None:
        self.index = index
        self.release = release
        self._bit = bit
        self._names: dict[str, dict[str, str]] = {}
        self._classes: dict[tuple[str, str], tuple[list[str], dict[str, str]] | None] = {}

    @property
    def minor(self) -> Release:
        return parse_release(self.release)

    @cached_property
    def modules(self) -> frozenset[str]:
        """Every indexed module present in this release."""
        return frozenset(m for m, info in self.index.modules.items() if info["in"] & self._bit)

    def has_module(self, module: str) -> bool:
        return module in self.modules

    def names(self, module: str) -> dict[str, str]:
        """Name -> entry for everything ``module`` binds at its top level (empty if absent)."""
        cached = self._names.get(module)
        if cached is None:
            info = self.index.modules.get(module)
            cached = {}
            if info is not None and info["in"] & self._bit:
                for name, entries in info["names"].items():
                    value = _pick(entries, self._bit)
                    if value is not None:
                        cached[name] = value
            self._names[module] = cached
        return cached

    def _star(self, module: str) -> list[str]:
        info = self.index.modules.get(module)
        return (_pick(info["star"], self._bit) or []) if info else []

    def _opaque(self, module: str) -> bool:
        """Contents unknown or lazy (``__getattr__``, a file newer than the indexer)."""
        info = self.index.modules.get(module)
        return "__getattr__" in self.names(module) or bool(info and info.get("unparsed"))

    def resolves(self, module: str, name: str, _depth: int = 0) -> bool:
        """Would ``from module import name`` work in this release? (Modules outside the
        indexed packages are assumed to.)"""
        if not is_indexed(module):
            return True
        if not self.has_module(module):
            return False
        if name in self.names(module) or self.has_module(f"{module}.{name}") or self._opaque(module):
            return True
        if _depth < _MAX_DEPTH:
            return any(self.resolves(star, name, _depth + 1) for star in self._star(module))
        return False

    def resolves_qualname(self, qualname: str) -> bool:
        """Does the dotted module path or ``module.name`` exist in this release?"""
        if self.has_module(qualname) or not is_indexed(qualname):
            return True
        module, _, name = qualname.rpartition(".")
        return bool(module) and self.resolves(module, name)

    def origin(self, module: str, name: str, _depth: int = 0) -> tuple[str, str] | None:
        """Where ``module.name`` is defined, following imports and star imports
        (``(module, name)``; a module outside the index ends the chain)."""
        if not is_indexed(module):
            return module, name
        entry = self.names(module).get(name)
        if entry is None:
            if self.has_module(f"{module}.{name}"):
                return f"{module}.{name}", ""
            for star in self._star(module):
                found = self.origin(star, name, _depth + 1) if _depth < _MAX_DEPTH else None
                if found:
                    return found
            return None
        if entry.startswith("i:") and _depth < _MAX_DEPTH:
            src_module, _, src_name = entry[2:].rpartition(".")
            if self.has_module(entry[2:]) and not self.names(src_module).get(src_name):
                return entry[2:], ""
            return self.origin(src_module, src_name, _depth + 1) or (src_module, src_name)
        if entry.startswith("m:"):
            return entry[2:], ""
        return module, name

    @cached_property
    def _homes(self) -> dict[str, list[str]]:
        homes: dict[str, list[str]] = {}
        for module in sorted(self.modules):
            for name, entry in self.names(module).items():
                if not entry.startswith(("i:", "m:")):
                    homes.setdefault(name, []).append(module)
        return homes

    def homes(self, name: str) -> list[str]:
        """Modules that define (not merely import) ``name`` at their top level."""
        return self._homes.get(name, [])

    def close_names(self, module: str, name: str, n: int = 3) -> list[str]:
        """Names in ``module`` spelled like ``name`` (for "did you mean" hints)."""
        return difflib.get_close_matches(name, list(self.names(module)), n=n, cutoff=0.75)

    # ---- classes and signatures ---------------------------------------------------
    def class_info(self, module: str, name: str) -> tuple[list[str], dict[str, str]] | None:
        """``(bases, methods)`` of class ``module.name`` (after following imports; memoised)."""
        key = (module, name)
        if key not in self._classes:
            self._classes[key] = self._class_info(module, name)
        return self._classes[key]

    def _class_info(self, module: str, name: str) -> tuple[list[str], dict[str, str]] | None:
        found = self.origin(module, name)
        if found is None or not found[1]:
            return None
        module, name = found
        info = self.index.modules.get(module)
        cls = info["classes"].get(name) if info and self.names(module).get(name) == "c" else None
        if cls is None:
            return None
        bases = _pick(cls["bases"], self._bit) or []
        methods = {m: s for m, entries in cls["methods"].items() if (s := _pick(entries, self._bit)) is not None}
        return bases, methods

    def method(self, class_qualname: str, method: str, _depth: int = 0) -> tuple[str, Signature] | None:
        """``(defining class, signature)`` of ``method`` looked up on the class and its
        bases, in declaration order (``None``: not a plain method anywhere indexed)."""
        module, _, name = class_qualname.rpartition(".")
        info = self.class_info(module, name) if module else None
        if info is None:
            return None
        bases, methods = info
        entry = methods.get(method)
        if entry is not None:
            if entry == "p":
                return None
            kind, _, text = entry.partition(":")
            return class_qualname, Signature(text, kind)
        if _depth < _MAX_DEPTH:
            for base in bases:
                found = self.method(base, method, _depth + 1)
                if found is not None:
                    return found
        return None

    def mro(self, cls: str, _depth: int = 0) -> list[str]:
        """``cls`` and its indexed bases, depth first (duplicates dropped)."""
        module, _, name = cls.rpartition(".")
        info = self.class_info(module, name) if module else None
        if info is None:
            return []
        out = [cls]
        if _depth < _MAX_DEPTH:
            for base in info[0]:
                out += [b for b in self.mro(base, _depth + 1) if b not in out]
        return out

    def is_class(self, qualname: str) -> bool:
        module, _, name = qualname.rpartition(".")
        return bool(module) and self.class_info(module, name) is not None

    def body(self, module: str, name: str) -> str | None:
        """Fingerprint of the body of ``module``'s own function ``name`` or method
        ``Class.name`` on this release (see :func:`index_build.body_fingerprint`)."""
        info = self.index.modules.get(module)
        if info is None or not info["in"] & self._bit:
            return None
        entries = self.index.bodies.get(module, {}).get(name)
        return _pick(entries, self._bit) if entries else None

    def function(self, qualname: str) -> Signature | None:
        """Signature of a module-level function, or of ``Class.method`` (``None`` otherwise)."""
        module, _, name = qualname.rpartition(".")
        if not module:
            return None
        if self.has_module(module) or not is_indexed(module):
            found = self.origin(module, name)
            if found is not None and found[1]:
                entry = self.names(found[0]).get(found[1], "")
                if entry[:2] in ("f:", "s:", "c:"):
                    return Signature(entry[2:], entry[0])
            return None
        cls_module, _, cls = module.rpartition(".")
        if cls_module and self.class_info(cls_module, cls) is not None:
            found_method = self.method(module, name)
            return found_method[1] if found_method else None
        return None


class ApiIndex:
    """The whole index: releases and the facts with their release masks."""

    def __init__(self, data: dict[str, Any], bodies: Path | None = None) -> None:
        if data.get("schema") != SCHEMA:
            raise ValueError(f"API index schema {data.get('schema')!r}, expected {SCHEMA}: regenerate it")
        self.release_names: tuple[str, ...] = tuple(data["releases"])
        self.modules: dict[str, Any] = data["modules"]
        self._bodies_path = bodies
        self._bodies: dict[str, Any] | None = data.get("bodies")
        self._views: dict[str, ReleaseApi] = {}
        self._changed: dict[tuple[str, ...], dict[str, frozenset[str]]] = {}
        self._changed_methods: dict[tuple[str, str, str], frozenset[str]] = {}

    @property
    def bodies(self) -> dict[str, Any]:
        """Module -> function/method -> fingerprints with release masks, read on first
        use (empty when the index has none)."""
        if self._bodies is None:
            path = self._bodies_path
            found: dict[str, Any] = {}
            if path is not None and path.is_file():
                with gzip.open(path, "rb") as fh:
                    data = json.loads(fh.read())
                if data.get("releases") == list(self.release_names):
                    found = data["bodies"]
            self._bodies = found
        return self._bodies

    @property
    def releases(self) -> tuple[Release, ...]:
        """The indexed releases as ``major.minor``, oldest first."""
        return tuple(parse_release(r) for r in self.release_names)

    def covers(self, release: Release | str) -> bool:
        return parse_release(release) in self.releases

    def view(self, release: Release | str) -> ReleaseApi | None:
        """The index in ``release`` (any patch of an indexed minor); ``None`` if not indexed."""
        minor = parse_release(release)
        for i, name in enumerate(self.release_names):
            if parse_release(name) == minor:
                if name not in self._views:
                    self._views[name] = ReleaseApi(self, name, 1 << i)
                return self._views[name]
        return None

    def views_between(self, after: Release | str, upto: Release | str) -> list[ReleaseApi]:
        """Views of the indexed releases in ``(after, upto]``, oldest first."""
        low, high = parse_release(after), parse_release(upto)
        return [v for r in self.releases if low < r <= high and (v := self.view(r)) is not None]

    def changed_functions(self, old: ReleaseApi, new: ReleaseApi) -> dict[str, frozenset[str]]:
        """Module-level functions whose parameters differ between two views: name ->
        the modules defining it (memoised)."""
        key = (old.release, new.release)
        if key not in self._changed:
            found: dict[str, set[str]] = {}
            for module, info in self.modules.items():
                if not (info["in"] & old._bit and info["in"] & new._bit):
                    continue
                before = old.names(module)
                for name, entry in new.names(module).items():
                    if entry[:2] in ("f:", "s:", "c:") and before.get(name, entry) != entry:
                        found.setdefault(name, set()).add(module)
            self._changed[key] = {name: frozenset(mods) for name, mods in found.items()}
        return self._changed[key]

    def changed_bodies(self, old: ReleaseApi, new: ReleaseApi) -> dict[str, frozenset[str]]:
        """Module-level functions whose body's fingerprint differs between two views:
        name -> the modules defining it."""
        key = ("bodies", old.release, new.release)
        if key in self._changed:
            return self._changed[key]
        found: dict[str, set[str]] = {}
        for module, table in self.bodies.items():
            for name, entries in table.items():
                if "." in name:
                    continue  # a method
                before, after = _pick(entries, old._bit), _pick(entries, new._bit)
                if before is not None and after is not None and before != after:
                    found.setdefault(name, set()).add(module)
        self._changed[key] = {name: frozenset(mods) for name, mods in found.items()}
        return self._changed[key]

    def changed_methods(self, old: ReleaseApi, new: ReleaseApi, cls: str) -> frozenset[str]:
        """Methods of class ``cls`` (its own or inherited, on ``new``) whose parameters
        differ between two views, or that ``new`` no longer has (memoised)."""
        key = (old.release, new.release, cls)
        if key not in self._changed_methods:
            names: set[str] = set()
            for view in (old, new):
                for owner in view.mro(cls):
                    module, _, name = owner.rpartition(".")
                    info = view.class_info(module, name)
                    names.update(info[1] if info else ())
            changed = set()
            for method in names:
                a, b = old.method(cls, method), new.method(cls, method)
                if (a is None) != (b is None) or (a and b and a[1].bound_params != b[1].bound_params):
                    changed.add(method)
            self._changed_methods[key] = frozenset(changed)
        return self._changed_methods[key]

    def nearest_view(self, release: Release | str) -> ReleaseApi | None:
        """The view of ``release``, or of the oldest indexed release when ``release`` is older."""
        view = self.view(release)
        if view is None and self.releases and parse_release(release) < self.releases[0]:
            view = self.view(self.releases[0])
        return view


def bodies_path(index_path: Path) -> Path:
    """Where the bodies' fingerprints of the index at ``index_path`` live."""
    base = index_path.name.removesuffix(".json.gz")
    base = base.replace("api_index", "api_bodies") if "api_index" in base else f"{base}.bodies"
    return index_path.with_name(f"{base}.json.gz")


@lru_cache(maxsize=2)
def load_index(path: Path = INDEX_PATH) -> ApiIndex:
    """The committed index (read once per process; its bodies on first use)."""
    with gzip.open(path, "rb") as fh:
        return ApiIndex(json.loads(fh.read()), bodies_path(path))
