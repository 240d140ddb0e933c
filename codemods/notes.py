"""TODO notes as comment lines: wrapped to the file's line length, and read back.

A note is one ``# TODO(tag): text`` line followed by its continuation lines, each
``#   more text`` (a hanging indent of three spaces after the ``#``). Reading a note
back joins those lines, so a re-run compares the note's words, not its layout.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence

import libcst as cst

__all__ = ["CONTINUATION", "MIN_WIDTH", "Note", "joined", "read_notes", "relaid", "same_words", "wrap_note"]

#: what starts a note's continuation line
CONTINUATION = "#   "
#: the narrowest a note is wrapped to, however deep its statement is indented
MIN_WIDTH = 40


def wrap_note(comment: str, width: int) -> list[str]:
    """``comment`` (one ``# TODO...`` line) as comment lines of at most ``width`` columns
    (a word longer than that keeps its own line: URLs and qualified names are not split)."""
    width = max(MIN_WIDTH, width)
    if len(comment) <= width:
        return [comment]
    body = comment[1:].strip()  # without the "#"
    return textwrap.wrap(body, width=width, initial_indent="# ", subsequent_indent=CONTINUATION,
                         break_long_words=False, break_on_hyphens=False)


class Note:
    """A note found in a run of comment lines: lines ``start``..``end`` (exclusive), their
    comments, and its text joined back into one ``# TODO...`` line."""

    __slots__ = ("start", "end", "lines", "text")

    def __init__(self, start: int, lines: list[str]) -> None:
        self.start, self.end, self.lines = start, start + len(lines), lines
        self.text = joined(lines)


def read_notes(lines: Sequence[cst.EmptyLine], prefix: str) -> list[Note]:
    """The notes starting with ``prefix`` (``# TODO(tag): ``) among ``lines`` (a statement's
    leading lines or the module header), with their continuation lines."""
    notes: list[Note] = []
    i = 0
    while i < len(lines):
        comment = lines[i].comment
        if comment is None or not comment.value.startswith(prefix):
            i += 1
            continue
        parts = [comment.value]
        j = i + 1
        while j < len(lines):
            nxt = lines[j].comment
            if nxt is None or not nxt.value.startswith(CONTINUATION) or nxt.value.startswith(prefix):
                break
            parts.append(nxt.value)
            j += 1
        notes.append(Note(i, parts))
        i = j
    return notes


def same_words(a: str, b: str) -> bool:
    """Do two notes say the same thing, however each is wrapped?"""
    return a.split() == b.split()


def joined(lines: Sequence[str]) -> str:
    """A note's lines (its first and continuation comments) as one ``# TODO...`` line."""
    return " ".join([lines[0], *(line[len(CONTINUATION):].strip() for line in lines[1:])])


def relaid(present: Sequence[str] | None, comment: str, width: int, widest: int) -> list[str] | None:
    """The lines to write for ``comment`` where an earlier run left the note ``present``
    (its lines; ``None``: none), or ``None`` to keep those. A note with the same words is
    kept while its lines fit ``widest`` (the width at the longest line length a file may
    have): an upgrade that lengthens or shortens a file's longest line must not get its
    notes re-wrapped on the next run."""
    if present is not None and same_words(joined(present), comment) \
            and all(len(line) <= max(MIN_WIDTH, widest) for line in present):
        return None
    return wrap_note(comment, width)
