"""The JSON form of frozen dataclasses, read back without running anything.

The Kernel IR (:mod:`spyre_shims.kernel_ir`) is stored and exchanged as JSON; a
vendor's own formats (compiled programs, caches) can use the same form. A
dataclass becomes an object ``{"$t": class name, field: value, ...}``, a tuple a
list, a non-finite float ``{"$f": "inf"}``; other values are JSON's own.
Types JSON lacks (the Kernel IR's index expressions) are :class:`Leaf` values,
an object with one marker key.

Reading is checked, never evaluated: a class is looked up by name in the table
the caller passes (a name outside it is an error, nothing is imported), every
value is checked against its field's annotation, integers must fit in 64 bits,
nesting is bounded, and a leaf is rebuilt by its own decoder from plain data.
Anything else raises :class:`FormatError`, one line naming where in the document
the problem is.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import types
import typing
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Union

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

__all__ = ["FormatError", "Leaf", "encode", "decode", "loads", "INT_MIN", "INT_MAX", "MAX_DEPTH"]

#: Integers a document may hold: the int64 and uint64 ranges.
INT_MIN = -(2**63)
INT_MAX = 2**64 - 1
#: Default bound on the nesting of lists and objects.
MAX_DEPTH = 64

_NONFINITE = {"inf": math.inf, "-inf": -math.inf, "nan": math.nan}


class FormatError(ValueError):
    """A document that is not the JSON form of what was expected; the message
    names the place (``GraphIR.kernels[0].name``) and what was wrong."""


@dataclasses.dataclass(frozen=True)
class Leaf:
    """A value JSON has no type for, stored as ``{key: encode(value)}``.

    ``kind`` is the annotation it stands for (a field annotated ``kind`` accepts
    only this leaf); ``encode`` turns a value (an instance of ``kind``) into
    plain JSON data and ``decode`` rebuilds it, raising :class:`ValueError` or
    :class:`TypeError` on data it does not accept. A leaf with ``encode=None``
    is only read (an older spelling of a value).
    """

    key: str
    kind: type
    encode: Callable[[Any], Any] | None
    decode: Callable[[Any], Any]


# ----------------------------------------------------------------------------- writing


def encode(obj: Any, leaves: Iterable[Leaf] = ()) -> Any:
    """``obj`` (dataclasses, tuples, lists, leaves, JSON scalars) as JSON data."""
    writers = [leaf for leaf in leaves if leaf.encode is not None]
    return _enc(obj, writers)


def _enc(obj: Any, leaves: list[Leaf]) -> Any:
    for leaf in leaves:
        if isinstance(obj, leaf.kind):
            assert leaf.encode is not None
            return {leaf.key: leaf.encode(obj)}
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        out: dict[str, Any] = {"$t": type(obj).__name__}
        for f in dataclasses.fields(obj):
            out[f.name] = _enc(getattr(obj, f.name), leaves)
        return out
    if isinstance(obj, (tuple, list)):
        return [_enc(x, leaves) for x in obj]
    if isinstance(obj, float) and not math.isfinite(obj):
        return {"$f": repr(obj)}
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    raise TypeError(f"cannot serialise {type(obj).__name__} in JSON form: {obj!r}")


# ----------------------------------------------------------------------------- reading


def loads(text: str | bytes, expected: Any, classes: Iterable[type], leaves: Iterable[Leaf] = (), *,
          what: str = "document", max_depth: int = MAX_DEPTH,
          check: Callable[[Any], None] | None = None) -> Any:
    """Parse JSON ``text`` and :func:`decode` it; every problem, the JSON syntax
    included, is one :class:`FormatError` starting with ``what``."""
    if not isinstance(text, (str, bytes, bytearray)):
        raise FormatError(f"{what}: expected JSON text, got {type(text).__name__}")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise FormatError(f"{what}: not JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})") from None
    except (ValueError, RecursionError, UnicodeDecodeError) as exc:  # e.g. a 5000-digit integer
        raise FormatError(f"{what}: not readable JSON ({type(exc).__name__}: {_short(exc)})") from None
    return decode(data, expected, classes, leaves, what=what, max_depth=max_depth, check=check)


def decode(data: Any, expected: Any, classes: Iterable[type], leaves: Iterable[Leaf] = (), *,
           what: str = "document", max_depth: int = MAX_DEPTH,
           check: Callable[[Any], None] | None = None) -> Any:
    """Rebuild a value of type ``expected`` from JSON data.

    ``classes`` are the dataclasses a ``"$t"`` may name; ``leaves`` the extra
    value types; ``check`` is called on every rebuilt dataclass instance and
    may raise :class:`ValueError` to reject it (e.g. a reference to a later
    instruction). Raises :class:`FormatError` naming the place of the problem.
    """
    classes = tuple(classes)
    odd = [c.__name__ for c in classes if not dataclasses.is_dataclass(c)]
    if odd:  # a caller's mistake, not bad data
        raise TypeError(f"decode: classes must be dataclasses, not {', '.join(odd)}")
    named = {c.__name__: c for c in classes if dataclasses.is_dataclass(c)}
    reader = _Reader(named, {leaf.key: leaf for leaf in leaves}, max_depth, check)
    try:
        return reader.value(data, expected, what, 0)
    except RecursionError:
        raise FormatError(f"{what}: nested too deeply") from None


class _Path:
    """Where a value sits in the document, rendered only when an error names it
    (building the text for every value of a large document costs more than
    reading it)."""

    __slots__ = ("parent", "part")

    def __init__(self, parent: "_Path | str", part: int | str) -> None:
        self.parent, self.part = parent, part

    def __str__(self) -> str:
        parts: list[str] = []
        p: _Path | str = self
        while isinstance(p, _Path):
            parts.append(f"[{p.part}]" if isinstance(p.part, int) else f".{p.part}")
            p = p.parent
        return str(p) + "".join(reversed(parts))

    def __format__(self, spec: str) -> str:
        return format(str(self), spec)


#: A place in the document: the document's name, or a path below it.
_Where = typing.Union[_Path, str]


@functools.lru_cache(maxsize=None)
def _shape(tp: Any) -> tuple[Any, tuple[Any, ...]]:
    return typing.get_origin(tp), typing.get_args(tp)


@dataclasses.dataclass
class _Reader:
    classes: dict[str, type[DataclassInstance]]
    leaves: dict[str, Leaf]
    max_depth: int
    check: Callable[[Any], None] | None

    def value(self, data: Any, tp: Any, where: _Where, depth: int) -> Any:
        if depth > self.max_depth:
            raise FormatError(f"{where}: nested deeper than {self.max_depth} levels")
        if tp is Any or tp is object:
            return self.free(data, where, depth)
        origin, args = _shape(tp)
        if origin is typing.Literal:
            if any(type(data) is type(a) and data == a for a in args):
                return data
            raise FormatError(f"{where}: expected one of {', '.join(map(repr, args))}, got {_show(data)}")
        if origin in (Union, types.UnionType):
            return self.union(data, args, where, depth)
        if origin is tuple:
            return self.sequence(data, args, where, depth)
        if tp is type(None) or tp is None:
            if data is None:
                return None
            raise FormatError(f"{where}: expected null, got {_show(data)}")
        if isinstance(tp, type):
            leaf = self.leaf_for(data)
            if leaf is not None and issubclass(leaf.kind, tp):
                return self.leaf(leaf, data, where)
            if dataclasses.is_dataclass(tp):
                return self.instance(data, tp, where, depth)
            if tp not in (bool, int, float, str):
                keys = [k for k, leaf in self.leaves.items() if issubclass(leaf.kind, tp) and leaf.encode is not None]
                form = f" (an object {{{keys[0]!r}: ...}})" if keys else ", which has no JSON form here"
                raise FormatError(f"{where}: expected {tp.__name__}{form}, got {_show(data)}")
            return self.scalar(data, tp, where)
        raise FormatError(f"{where}: cannot read a value of type {tp!r}")  # a reader bug, reported as such

    def free(self, data: Any, where: _Where, depth: int) -> Any:
        """A value whose field is annotated ``Any``: whatever the form holds."""
        if isinstance(data, list):
            return tuple(self.free(x, _Path(where, i), depth + 1) for i, x in enumerate(data))
        if isinstance(data, dict):
            leaf = self.leaf_for(data)
            if leaf is not None:
                return self.leaf(leaf, data, where)
            return self.instance(data, object, where, depth)
        if isinstance(data, int) and not isinstance(data, bool):
            return _int(data, where)
        if data is None or isinstance(data, (bool, float, str)):
            return data
        raise FormatError(f"{where}: unexpected {_show(data)}")

    def union(self, data: Any, options: tuple[Any, ...], where: _Where, depth: int) -> Any:
        if data is None and type(None) in options:
            return None
        options = tuple(o for o in options if o is not type(None))
        tag = data.get("$t") if isinstance(data, dict) else None
        cls = self.classes.get(tag) if isinstance(tag, str) else None
        named = [o for o in options if cls is not None and isinstance(o, type) and issubclass(cls, o)]
        if named or len(options) == 1:  # the object names its alternative: its own errors are the clear ones
            return self.value(data, (named or options)[0], where, depth)
        if all(dataclasses.is_dataclass(o) for o in options):
            names = ", ".join(o.__name__ for o in options)
            if isinstance(data, dict):
                raise FormatError(f"{where}: unknown object type {_show(data.get('$t'))} (expected one of {names})")
            raise FormatError(f"{where}: expected an object (one of {names}), got {_show(data)}")
        problems = []
        for option in options:
            try:
                return self.value(data, option, where, depth)
            except FormatError as exc:
                problems.append(str(exc).removeprefix(f"{where}: "))
        raise FormatError(f"{where}: none of the accepted forms ({'; '.join(dict.fromkeys(problems))})")

    def sequence(self, data: Any, args: tuple[Any, ...], where: _Where, depth: int) -> tuple[Any, ...]:
        if not isinstance(data, list):
            raise FormatError(f"{where}: expected a list, got {_show(data)}")
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(self.value(x, args[0], _Path(where, i), depth + 1) for i, x in enumerate(data))
        if not args:
            args = (Any,) * len(data)
        if len(data) != len(args):
            raise FormatError(f"{where}: expected a list of {len(args)}, got {len(data)} items")
        return tuple(self.value(x, t, _Path(where, i), depth + 1) for i, (x, t) in enumerate(zip(data, args)))

    def instance(self, data: Any, base: type, where: _Where, depth: int) -> Any:
        if not isinstance(data, dict):
            raise FormatError(f"{where}: expected an object{_of(base)}, got {_show(data)}")
        name = data.get("$t")
        cls = self.classes.get(name) if isinstance(name, str) else None
        if cls is None:
            raise FormatError(f"{where}: unknown object type {_show(name)} (expected {_choices(self.classes, base)})")
        if not issubclass(cls, base):
            raise FormatError(f"{where}: expected {base.__name__}, got {name}")
        hints = _hints(cls)
        fields = {f.name: f for f in dataclasses.fields(cls)}
        extra = sorted(set(data) - set(fields) - {"$t"})
        if extra:
            raise FormatError(f"{where}: unknown field(s) {', '.join(map(repr, extra))} of {name}")
        missing = [n for n, f in fields.items() if n not in data and _required(f)]
        if missing:
            raise FormatError(f"{where}: {name} lacks field(s) {', '.join(map(repr, missing))}")
        kwargs = {n: self.value(v, hints[n], _Path(where, n), depth + 1) for n, v in data.items() if n != "$t"}
        try:
            obj = cls(**kwargs)
            if self.check is not None:
                self.check(obj)
        except (TypeError, ValueError) as exc:
            raise FormatError(f"{where}: bad {name}: {_short(exc)}") from None
        return obj

    def scalar(self, data: Any, tp: type, where: _Where) -> Any:
        if tp is bool:
            if isinstance(data, bool):
                return data
        elif tp is int:
            if isinstance(data, int) and not isinstance(data, bool):
                return _int(data, where)
        elif tp is float:
            if isinstance(data, (int, float)) and not isinstance(data, bool):
                return float(_int(data, where) if isinstance(data, int) else data)
        elif isinstance(data, str):
            return data
        raise FormatError(f"{where}: expected {_kind(tp)}, got {_show(data)}")

    def leaf_for(self, data: Any) -> Leaf | None:
        if isinstance(data, dict) and len(data) == 1:
            (key,) = data
            if key == "$f":
                return _FLOAT_LEAF
            return self.leaves.get(key)
        return None

    def leaf(self, leaf: Leaf, data: Any, where: _Where) -> Any:
        try:
            return leaf.decode(data[leaf.key])
        except FormatError as exc:
            raise FormatError(f"{where}: {exc}") from None
        except (TypeError, ValueError, ArithmeticError, RecursionError) as exc:
            raise FormatError(f"{where}: bad {leaf.kind.__name__} ({_short(exc)})") from None


def _nonfinite(text: Any) -> float:
    if text not in _NONFINITE:
        raise ValueError(f"expected 'inf', '-inf' or 'nan', got {_show(text)}")
    return _NONFINITE[text]


_FLOAT_LEAF = Leaf("$f", float, None, _nonfinite)


def _int(value: int, where: _Where) -> int:
    if not INT_MIN <= value <= INT_MAX:
        raise FormatError(f"{where}: integer out of the 64-bit range ({_show(value)})")
    return value


@functools.cache
def _hints(cls: type[Any]) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _required(f: dataclasses.Field[Any]) -> bool:
    return f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING


def _of(base: type) -> str:
    return "" if base is object else f" ({base.__name__})"


def _choices(classes: Mapping[str, type], base: type) -> str:
    names = sorted(n for n, c in classes.items() if issubclass(c, base))
    return "one of " + ", ".join(names) if names else "no object here"


def _kind(tp: type) -> str:
    return {bool: "true or false", int: "an integer", float: "a number", str: "a string"}.get(tp, tp.__name__)


def _show(value: Any) -> str:
    """A short rendering of a value from the document (never its whole text)."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > 10**30:
        return f"an integer of {value.bit_length()} bits"
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "a list"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _short(exc: BaseException) -> str:
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return text if len(text) <= 200 else text[:197] + "..."
