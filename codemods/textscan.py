"""Byte-level scans that sharpen the pre-filter for call-pattern rules.

They read raw source bytes without parsing, and err on the side of "may match":
when a scan cannot tell (unbalanced brackets, end of file), it says yes, and the
real decision is left to the libcst transform.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from functools import lru_cache

__all__ = ["call_arguments", "method_access"]

_KEYWORD_ARG = re.compile(rb"\s*([A-Za-z_]\w*)\s*=(?!=)")
_OPEN, _CLOSE = b"([{", b")]}"
# Between a receiver and `.method`: spaces, line continuations, comments, closing parens.
_GAP = rb"(?:\s|\\\n|#[^\n]*\n|\))*"


@lru_cache(maxsize=None)
def method_access(receiver: str, method: str) -> re.Pattern[bytes]:
    """Pattern for ``<...receiver>.method`` (``V.graph.sizevars .size_hint`` included)."""
    return re.compile(rb"\b" + re.escape(receiver.encode()) + _GAP + rb"\.\s*" + re.escape(method.encode()) + rb"\b")


def _skip_string(data: bytes, i: int) -> int:
    """Index just past the string literal starting at ``data[i]`` (a quote)."""
    quote = data[i:i + 3] if data[i:i + 3] in (b'"""', b"'''") else data[i:i + 1]
    i += len(quote)
    while i < len(data):
        if data[i] == 0x5C:  # backslash: skip the escaped byte
            i += 2
            continue
        if data.startswith(quote, i):
            return i + len(quote)
        if len(quote) == 1 and data[i] == 0x0A:  # unterminated one-line string
            return i
        i += 1
    return i


def _arguments_at(data: bytes, i: int) -> list[bytes] | None:
    """Top-level argument texts of the call whose ``(`` is at ``data[i]``."""
    depth, start, args = 0, i + 1, []
    while i < len(data):
        c = data[i]
        if c in b"\"'":
            i = _skip_string(data, i)
            continue
        if c == 0x23:  # '#': comment to end of line
            end = data.find(b"\n", i)
            i = len(data) if end < 0 else end
            continue
        if c in _OPEN:
            depth += 1
        elif c in _CLOSE:
            depth -= 1
            if depth == 0:
                last = data[start:i]
                if last.strip():
                    args.append(last)
                return args
        elif c == 0x2C and depth == 1:  # ','
            args.append(data[start:i])
            start = i + 1
        i += 1
    return None


def call_arguments(data: bytes, name: str) -> Iterator[tuple[int, list[str]] | None]:
    """For each ``name(`` call: ``(positional count, keyword names)``; ``None`` when
    the arguments could not be delimited (the caller must then assume a match).
    A ``*args``/``**kwargs`` call reports a positional count of -1."""
    pattern = re.compile(rb"\b" + re.escape(name.encode()) + rb"\s*\(")
    for match in pattern.finditer(data):
        args = _arguments_at(data, match.end() - 1)
        if args is None:
            yield None
            continue
        positional, keywords = 0, list[str]()
        for arg in args:
            stripped = arg.strip()
            if stripped.startswith(b"*"):
                positional = -1
                break
            keyword = _KEYWORD_ARG.match(arg)
            if keyword:
                keywords.append(keyword.group(1).decode())
            else:
                positional += 1
        yield positional, keywords
