"""Does a block's source text name anything a transform looks for?

A set intersection with the block's identifiers, not one big regex: the word lists
(symbols of the selected rules, callables whose signatures changed, advisory names)
differ from file to file, and compiling an alternation of hundreds of words costs
more than scanning the text.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

__all__ = ["WordTest"]

_IDENTIFIER = re.compile(rb"[A-Za-z_][A-Za-z0-9_]*")


class WordTest:
    """``words``: identifiers that make a block relevant anywhere; ``attributes``:
    receiver -> method names relevant only as ``receiver.method``."""

    def __init__(self, words: Iterable[str], attributes: Mapping[str, Iterable[str]] = {}) -> None:
        self.words = frozenset(w.encode() for w in words)
        self.attributes = {r.encode(): frozenset(m.encode() for m in ms) for r, ms in attributes.items() if ms}
        receivers = b"|".join(re.escape(r) for r in sorted(self.attributes))
        # the method in a lookahead: in ``V.graph.sizevars.m`` the ``graph.sizevars`` match
        # must not consume the ``sizevars`` of ``sizevars.m``
        self._access = re.compile(rb"\b(" + receivers + rb")(?=\s*\.\s*([A-Za-z_]\w*))") \
            if self.attributes else None

    def __bool__(self) -> bool:
        return bool(self.words or self.attributes)

    def hits(self, text: bytes, methods: Iterable[str] = ()) -> bool:
        """Does ``text`` name a word, a ``receiver.method``, or ``.m`` for ``m`` in ``methods``?"""
        if not self.words.isdisjoint(_IDENTIFIER.findall(text)):
            return True
        if any(b"." + m.encode() in text for m in methods):
            return True
        if self._access is not None:
            for match in self._access.finditer(text):
                if match.group(2) in self.attributes[match.group(1)]:
                    return True
        return False
