"""Snapshot of the stable API's public surface: every public name and signature.

    python tools/api_snapshot.py                    compare with api/spyre_shims.json (exit 1 on a difference)
    python tools/api_snapshot.py --update           record an additive change (new names)
    python tools/api_snapshot.py --update --allow-breaking
                                                    record a removal or a changed entry (docs/api-policy.md)
    python tools/api_snapshot.py --print            the current surface as JSON

The stable API is every public module of ``spyre_shims`` (no leading underscore);
its public names are ``__all__`` (or, without one, what the module defines). Per
name the snapshot keeps its kind and, for functions, its signature as written
(annotation text, defaults); for classes, bases, dataclass fields and public
members; for constants, the type and (for literals and collections of literals)
the value: the op set is part of the contract. Output is deterministic across
hash seeds and Python versions.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import enum
import importlib
import inspect
import json
import pkgutil
import sys
import textwrap
import types
import typing
from collections.abc import Callable, Mapping
from pathlib import Path, PurePath
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "spyre_shims"
SNAPSHOT = ROOT / "api" / f"{PACKAGE}.json"
POLICY = "docs/api-policy.md"
FORMAT = 1

Entry = dict[str, Any]
_LITERALS = (str, int, float, bool, type(None))


# ----------------------------------------------------------------------------- values


def _name_of(obj: Any) -> str:
    module = getattr(obj, "__module__", None)
    qualname = getattr(obj, "__qualname__", None) or getattr(obj, "__name__", None) or type(obj).__name__
    return qualname if module in (None, "builtins") else f"{module}.{qualname}"


def _type_text(tp: Any) -> str:
    """A typing construct as text that does not depend on the Python version."""
    if isinstance(tp, str):
        return tp
    if tp is type(None) or tp is None:
        return "None"
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is typing.Literal:
        return f"Literal[{', '.join(repr(a) for a in args)}]"
    if origin in (typing.Union, types.UnionType):
        return f"Union[{', '.join(_type_text(a) for a in args)}]"
    if origin is not None:
        inner = [f"[{', '.join(_type_text(x) for x in a)}]" if isinstance(a, list) else _type_text(a) for a in args]
        return f"{_name_of(origin)}[{', '.join(inner)}]" if inner else _name_of(origin)
    return _name_of(tp)


def _value(obj: Any) -> str:
    """A deterministic rendering of a default or constant value."""
    if isinstance(obj, enum.Enum):
        return f"{type(obj).__name__}.{obj.name}"
    if isinstance(obj, _LITERALS):
        return repr(obj)
    if isinstance(obj, (frozenset, set)):
        return f"{type(obj).__name__}({{{', '.join(sorted(_value(x) for x in obj))}}})"
    if isinstance(obj, (tuple, list)):
        return f"{type(obj).__name__}({', '.join(_value(x) for x in obj)})"
    if isinstance(obj, Mapping):
        return f"{type(obj).__name__}(keys={{{', '.join(sorted(_value(k) for k in obj))}}})"
    if isinstance(obj, PurePath):
        return "Path(...)"
    if type(obj).__module__.startswith("sympy"):
        import sympy

        return f"sympy:{sympy.srepr(obj)}"
    if callable(obj):
        return f"<callable {getattr(obj, '__name__', type(obj).__name__)}>"
    return f"<{type(obj).__name__}>"


def _constant(obj: Any) -> Entry:
    if typing.get_origin(obj) is not None:
        return {"kind": "alias", "value": _type_text(obj)}
    keys = obj.keys() if isinstance(obj, Mapping) else obj if isinstance(obj, (set, frozenset)) else None
    if keys is not None and all(isinstance(k, _LITERALS) for k in keys):
        # A set of names (the op set): growing it is additive, shrinking it is not.
        return {"kind": "constant", "type": type(obj).__name__, "items": sorted(_value(k) for k in keys)}
    return {"kind": "constant", "type": _constant_type(obj), "value": _value(obj)}


def _constant_type(obj: Any) -> str:
    return "Path" if isinstance(obj, PurePath) else type(obj).__name__


# ----------------------------------------------------------------------------- callables


def signature_text(fn: Callable[..., Any]) -> str:
    """``(a: int, /, *, b: str = 'x') -> None``, annotations as written in the source."""
    sig = inspect.signature(fn)
    params = list(sig.parameters.values())
    parts: list[str] = []
    for i, p in enumerate(params):
        if p.kind is p.KEYWORD_ONLY and (i == 0 or params[i - 1].kind not in (p.KEYWORD_ONLY, p.VAR_POSITIONAL)):
            parts.append("*")
        text = {p.VAR_POSITIONAL: "*", p.VAR_KEYWORD: "**"}.get(p.kind, "") + p.name
        if p.annotation is not p.empty:
            text += f": {_type_text(p.annotation)}"
        if p.default is not p.empty:
            text += f" = {_value(p.default)}"
        parts.append(text)
        if p.kind is p.POSITIONAL_ONLY and (i + 1 == len(params) or params[i + 1].kind is not p.POSITIONAL_ONLY):
            parts.append("/")
    out = f"({', '.join(parts)})"
    if sig.return_annotation is not sig.empty:
        out += f" -> {_type_text(sig.return_annotation)}"
    return out


def _function(fn: Callable[..., Any], kind: str = "function") -> Entry:
    entry: Entry = {"kind": kind, "signature": signature_text(fn)}
    if getattr(fn, "__isabstractmethod__", False):
        entry["abstract"] = True
    return entry


# ----------------------------------------------------------------------------- classes


def _member(cls: type, name: str, raw: Any) -> Entry | None:
    if isinstance(raw, staticmethod):
        return _function(raw.__func__, "staticmethod")
    if isinstance(raw, classmethod):
        return _function(raw.__func__, "classmethod")
    if isinstance(raw, property):
        entry: Entry = {"kind": "property"}
        if raw.fget is not None and "return" in raw.fget.__annotations__:
            entry["type"] = _type_text(raw.fget.__annotations__["return"])
        return entry
    if inspect.isfunction(raw):
        return _function(raw, "method")
    if isinstance(raw, type):
        return None  # nested classes are not part of the surface
    entry = _constant(raw)
    annotation = cls.__dict__.get("__annotations__", {}).get(name)
    if annotation is not None:
        entry["annotation"] = _type_text(annotation)
    return entry


def _body_names(cls: type) -> set[str]:
    """Names assigned in the class body as written (metaclasses such as sympy's add
    attributes of their own, which are not this API's surface)."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    except (OSError, TypeError, SyntaxError):
        return set(vars(cls))
    names: set[str] = set()
    for node in tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else ():
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        names.update(t.id for t in targets if isinstance(t, ast.Name))
    return names


def _class(cls: type) -> Entry:
    entry: Entry = {"kind": "class", "bases": [_name_of(b) for b in cls.__bases__ if b is not object]}
    fields: dict[str, str] = {}  # in declaration order: positional construction depends on it
    if dataclasses.is_dataclass(cls):
        params = getattr(cls, "__dataclass_params__", None)
        entry["frozen"] = bool(getattr(params, "frozen", False))
        for f in dataclasses.fields(cls):
            text = _type_text(f.type)
            if f.default is not dataclasses.MISSING:
                text += f" = {_value(f.default)}"
            elif f.default_factory is not dataclasses.MISSING:
                text += f" = {_value(f.default_factory())}"
            if not f.init:
                text += " (no init)"
            fields[f.name] = f"{f.name}: {text}"
        entry["fields"] = list(fields.values())
    members: dict[str, Entry] = {}
    for klass in reversed(cls.__mro__):
        if not klass.__module__.startswith(PACKAGE):
            continue
        assigned = _body_names(klass)
        for name, raw in vars(klass).items():
            public = not name.startswith("_") or (name == "__init__" and not dataclasses.is_dataclass(cls))
            if not public or name in fields:
                continue
            if not callable(raw) and not isinstance(raw, (property, staticmethod, classmethod)) and name not in assigned:
                continue
            member = _member(klass, name, raw)
            if member is not None:
                members[name] = member
    entry["members"] = dict(sorted(members.items()))
    return entry


# ----------------------------------------------------------------------------- modules


def public_names(module: types.ModuleType) -> list[str]:
    """``__all__``, or the names the module itself defines."""
    names = getattr(module, "__all__", None)
    if names is not None:
        return sorted(names)
    return sorted(
        n for n, v in vars(module).items()
        if not n.startswith("_") and not isinstance(v, types.ModuleType)
        and getattr(v, "__module__", module.__name__) == module.__name__
    )


def describe_module(module: types.ModuleType) -> dict[str, Entry]:
    """Every public name of ``module``."""
    out: dict[str, Entry] = {}
    for name in public_names(module):
        if name not in vars(module):
            out[name] = {"kind": "lazy"}  # served by the module's __getattr__ (resolved per release)
            continue
        obj = vars(module)[name]
        if isinstance(obj, type):
            out[name] = _class(obj)
        elif inspect.isfunction(obj) or inspect.isbuiltin(obj):
            out[name] = _function(obj)
        elif isinstance(obj, types.ModuleType):
            out[name] = {"kind": "module", "value": obj.__name__}
        elif name.startswith("__"):
            out[name] = {"kind": "constant", "type": type(obj).__name__}  # __version__: its value is no API
        else:
            out[name] = _constant(obj)
    return out


def stable_modules(package: str = PACKAGE) -> list[str]:
    """The package and its public submodules (recursively, no leading underscore)."""
    root = importlib.import_module(package)
    names = [package]
    for info in pkgutil.walk_packages(root.__path__, prefix=f"{package}."):
        if not any(part.startswith("_") for part in info.name.split(".")):
            names.append(info.name)
    return sorted(names)


def snapshot(package: str = PACKAGE) -> dict[str, Any]:
    """The current public surface of ``package``."""
    # torch first: ``import torch`` may autoload a backend that imports spyre_shims,
    # which must not start while spyre_shims/__init__ is half-initialised.
    importlib.import_module("torch")
    modules = {name: describe_module(importlib.import_module(name)) for name in stable_modules(package)}
    root = importlib.import_module(package)
    return {"format": FORMAT, "package": package, "api_level": getattr(root, "API_LEVEL", None), "modules": modules}


# ----------------------------------------------------------------------------- comparison


def _flatten(snap: Mapping[str, Any]) -> dict[str, Any]:
    flat: dict[str, Any] = {"API_LEVEL": snap.get("api_level")}
    for module, names in snap["modules"].items():
        flat[module] = "module"
        for name, entry in names.items():
            entry = dict(entry)
            members = entry.pop("members", {})
            flat[f"{module}.{name}"] = entry
            for member, value in members.items():
                flat[f"{module}.{name}.{member}"] = value
    return flat


@dataclasses.dataclass(frozen=True)
class Diff:
    """What changed between a recorded surface and the current one."""

    added: tuple[str, ...]
    removed: tuple[str, ...]
    changed: tuple[tuple[str, Any, Any], ...]
    #: collections of names that only grew: (path, the new items)
    extended: tuple[tuple[str, tuple[str, ...]], ...] = ()

    @property
    def breaking(self) -> bool:
        """Removals and changed entries break vendors (docs/api-policy.md)."""
        return bool(self.removed or [c for c in self.changed if c[0] != "API_LEVEL"])

    def __bool__(self) -> bool:
        return bool(self.added or self.removed or self.changed or self.extended)

    def report(self) -> str:
        """Human-readable summary, one line per difference."""
        lines = [f"+ {p}" for p in self.added] + [f"- {p}" for p in self.removed]
        lines += [f"+ {p}: {', '.join(items)}" for p, items in self.extended]
        for path, old, new in self.changed:
            lines.append(f"~ {path}\n    was: {json.dumps(old, sort_keys=True)}\n    now: {json.dumps(new, sort_keys=True)}")
        return "\n".join(lines)


def _parameters(signature: str) -> tuple[list[tuple[str, str, bool]], str] | None:
    """(parameters as (kind, text, has default), return annotation) of a recorded signature."""
    try:
        fn = ast.parse(f"def _f{signature}: ...").body[0]
    except SyntaxError:
        return None
    assert isinstance(fn, ast.FunctionDef)
    a = fn.args
    positional = a.posonlyargs + a.args
    defaults = [None] * (len(positional) - len(a.defaults)) + list(a.defaults)
    params = [("positional", ast.unparse(p), d is not None) for p, d in zip(positional, defaults)]
    params += [("varargs", ast.unparse(a.vararg), False)] if a.vararg else []
    params += [("keyword", ast.unparse(p), d is not None) for p, d in zip(a.kwonlyargs, a.kw_defaults)]
    params += [("varkw", ast.unparse(a.kwarg), False)] if a.kwarg else []
    return params, ast.unparse(fn.returns) if fn.returns else ""


def _appended(old: Any, new: Any) -> tuple[str, ...] | None:
    """The parameters ``new`` adds when it is ``old`` with parameters appended
    that all have defaults (an additive change: every existing call still
    binds the same way), else None."""
    if not (isinstance(old, dict) and isinstance(new, dict) and "signature" in old and "signature" in new):
        return None
    if {k: v for k, v in old.items() if k != "signature"} != {k: v for k, v in new.items() if k != "signature"}:
        return None
    was, now = _parameters(old["signature"]), _parameters(new["signature"])
    if was is None or now is None or was[1] != now[1]:
        return None
    before, after = was[0], now[0]
    kept = [p for p in after if p in before]
    extra = [p for p in after if p not in before]
    if kept != before or not extra or any(kind in ("varargs", "varkw") or not default for kind, _, default in extra):
        return None
    # appended positional parameters must come after every old positional one
    last_old = max((i for i, p in enumerate(after) if p in before and p[0] == "positional"), default=-1)
    if any(i < last_old for i, p in enumerate(after) if p in extra):
        return None
    return tuple(f"parameter {text.split(':')[0]}" for _, text, _ in extra)


def _grown(old: Any, new: Any) -> tuple[str, ...] | None:
    """The added items when ``new`` is ``old`` with more items (or more
    defaulted parameters), else None."""
    appended = _appended(old, new)
    if appended is not None:
        return appended
    if not (isinstance(old, dict) and isinstance(new, dict) and "items" in old and "items" in new):
        return None
    same_rest = {k: v for k, v in old.items() if k != "items"} == {k: v for k, v in new.items() if k != "items"}
    if not same_rest or not set(old["items"]) <= set(new["items"]):
        return None
    return tuple(sorted(set(new["items"]) - set(old["items"])))


def compare(recorded: Mapping[str, Any], current: Mapping[str, Any]) -> Diff:
    """Differences from ``recorded`` to ``current``."""
    old, new = _flatten(recorded), _flatten(current)
    differing = [p for p in sorted(set(old) & set(new)) if old[p] != new[p]]
    grown = {p: _grown(old[p], new[p]) for p in differing}
    return Diff(
        added=tuple(sorted(set(new) - set(old))),
        removed=tuple(sorted(set(old) - set(new))),
        changed=tuple((p, old[p], new[p]) for p in differing if grown[p] is None),
        extended=tuple((p, items) for p, items in grown.items() if items is not None),
    )


def dumps(snap: Mapping[str, Any]) -> str:
    """The committed form: sorted keys, one key per line."""
    return json.dumps(snap, indent=1, sort_keys=True) + "\n"


def load(path: Path = SNAPSHOT) -> dict[str, Any]:
    """A recorded snapshot."""
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return data


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--update", action="store_true", help="write the current surface to the snapshot")
    parser.add_argument("--allow-breaking", action="store_true", help="with --update: accept removals/changes")
    parser.add_argument("--print", action="store_true", help="print the current surface and exit")
    parser.add_argument("--snapshot", type=Path, default=SNAPSHOT, help=f"default {SNAPSHOT.relative_to(ROOT)}")
    args = parser.parse_args(argv)
    current = snapshot()
    if args.print:
        sys.stdout.write(dumps(current))
        return 0
    recorded = load(args.snapshot) if args.snapshot.is_file() else {"modules": {}, "api_level": None}
    diff = compare(recorded, current)
    if not diff:
        print(f"{args.snapshot.name}: the stable API matches the snapshot (API level {current['api_level']})")
        return 0
    print(diff.report())
    if not args.update:
        print(f"\nthe stable API differs from {args.snapshot}: if intended, follow {POLICY} and run "
              "`python tools/api_snapshot.py --update`", file=sys.stderr)
        return 1
    if diff.breaking and not args.allow_breaking:
        print(f"\nremovals or changed entries break vendor backends: see {POLICY} (deprecate first, raise the "
              "API level), then rerun with --update --allow-breaking", file=sys.stderr)
        return 1
    args.snapshot.parent.mkdir(parents=True, exist_ok=True)
    args.snapshot.write_text(dumps(current), encoding="utf-8")
    print(f"wrote {args.snapshot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
