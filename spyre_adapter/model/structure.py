"""A kernel's *structure*: its Kernel IR with buffer names and run-time size
symbols positional and kernel names and origins dropped. Identical layers of a
model have the same structure, so what is derived from it alone (a planned
program, a division's estimate) is computed once for all of them. Under dynamic
shapes each layer's KV cache has a size symbol of its own (``s87`` in one layer,
``s61`` in the next): sizes bound to a structure are therefore keyed by position
(:func:`structure_sizes`), never by symbol name."""

from __future__ import annotations

import hashlib
import json
import weakref
from collections.abc import Mapping
from typing import Any

from spyre_shims import kernel_ir as kir

__all__ = ["buffer_names", "positional_names", "symbol_names", "structure_text", "structure_digest",
           "structure_sizes"]

#: id(kernel) -> (a weak reference to it, its structure text, its digest): the
#: program cache, residency and the executables ask about the same kernels many times.
_STRUCTURES: dict[int, tuple[weakref.ref, bytes, bytes]] = {}
#: id(kernel) -> (a weak reference to it, its run-time size symbols in structure order)
_SYMBOLS: dict[int, tuple[weakref.ref, tuple[str, ...]]] = {}


def buffer_names(kernel: Any) -> tuple[str, ...]:
    """The kernel's buffer names in order (the positional renaming's source)."""
    return tuple(dict.fromkeys(b.name for b in kernel.buffers))


def positional_names(kernel: Any) -> dict[str, str]:
    """Each buffer name of the kernel -> its positional name ``#b<n>``, and each
    run-time size symbol -> ``#s<n>``."""
    canon = {name: f"#b{n}" for n, name in enumerate(buffer_names(kernel))}
    canon.update(_symbol_positions(kernel))
    return canon


def _symbol_positions(kernel: Any) -> dict[str, str]:
    return {name: f"#s{n}" for n, name in enumerate(symbol_names(kernel))}


def symbol_names(kernel: Any) -> tuple[str, ...]:
    """The kernel's run-time size symbols in the order its buffers' layouts first
    use them (sizes, strides, offset, buffer by buffer; then any they do not
    use, in the kernel's own order). Not by name: how a release numbers its
    symbols (``s0`` for the first input, or for the first size it meets) must not
    make identical kernels look different."""
    declared = tuple(getattr(kernel, "symbols", ()) or ())
    if len(declared) < 2:
        return declared
    got = _SYMBOLS.get(id(kernel))
    if got is not None and got[0]() is kernel:
        return got[1]
    wanted, seen = set(declared), dict[str, None]()
    for b in getattr(kernel, "buffers", ()):
        for e in (*b.size, *b.stride, b.offset):
            for sym in sorted(getattr(e, "free_symbols", ()), key=str):
                if sym.name in wanted:
                    seen.setdefault(sym.name)
    order = tuple(seen) + tuple(n for n in declared if n not in seen)
    try:
        _SYMBOLS[id(kernel)] = (weakref.ref(kernel), order)
        weakref.finalize(kernel, _SYMBOLS.pop, id(kernel), None)
    except TypeError:  # not weakly referable: not memoised
        pass
    return order


def structure_sizes(kernel: Any, sizes: Mapping[Any, int]) -> tuple[tuple[str, int], ...]:
    """A size binding of ``kernel`` keyed by the symbols' positions (``#s<n>``), as
    its structure names them: equal for identical kernels whose symbols differ.
    A bound symbol the kernel does not declare keeps its name."""
    canon = _symbol_positions(kernel)
    return tuple(sorted((canon.get(str(k), str(k)), int(v)) for k, v in sizes.items()))


def _entry(kernel: Any) -> tuple[Any, bytes, bytes]:
    got = _STRUCTURES.get(id(kernel))
    if got is not None and got[0]() is kernel:
        return got
    text = json.dumps(_rename(json.loads(kir.to_json(kernel)), positional_names(kernel)), sort_keys=True).encode()
    entry = (None, text, hashlib.sha256(text).digest())
    try:
        ref = weakref.ref(kernel)
    except TypeError:  # not weakly referable: not memoised
        return entry
    _STRUCTURES[id(kernel)] = (ref, text, entry[2])
    weakref.finalize(kernel, _STRUCTURES.pop, id(kernel), None)
    return entry


def structure_text(kernel: Any) -> bytes:
    """The kernel's structure as canonical JSON (computed once per kernel object)."""
    return _entry(kernel)[1]


def structure_digest(kernel: Any) -> bytes:
    """SHA-256 of :func:`structure_text`."""
    return _entry(kernel)[2]


#: Operators of the index language's expression trees whose operands commute.
_COMMUTATIVE = frozenset({"+", "*", "min", "max"})


def _position(name: Any) -> tuple[int, str]:
    text = str(name)
    return (int(text[2:]), text) if text.startswith("#s") and text[2:].isdigit() else (1 << 30, text)


def _rename(doc: Any, canon: dict[str, str]) -> Any:
    """A Kernel IR JSON document with buffer names positional and kernel names,
    origins and the group's name dropped (they differ between identical layers)."""
    if isinstance(doc, dict):
        out = {}
        for k, v in doc.items():
            if k in ("name",) and doc.get("$t") in ("LoopKernel", "KernelGroup", "ExternKernel"):
                continue
            if k == "origins":
                continue
            out[k] = _rename(v, canon)
            if k == "symbols" and isinstance(out[k], list):
                out[k] = sorted(out[k], key=_position)  # declared by name: listed by position
        return out
    if isinstance(doc, list):
        items = [_rename(x, canon) for x in doc]
        if len(items) > 2 and isinstance(items[0], str) and items[0] in _COMMUTATIVE:
            # sympy orders a sum's or product's terms by symbol name: by position here
            items = [items[0], *sorted(items[1:], key=lambda x: json.dumps(x, sort_keys=True))]
        return items
    if isinstance(doc, str):
        return canon.get(doc, doc)
    return doc
