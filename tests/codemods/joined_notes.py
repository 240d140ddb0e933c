"""Compare codemod output with notes joined: the rule tests check what a note says;
how it is wrapped to the file's line length is checked in test_codemod_notes.py and by
the fixtures' hand-written expected upgrades."""

from __future__ import annotations

import re

from libcst.codemod import CodemodTest

# a TODO line followed by its continuation lines ("#   more words"), at any indentation
_CONTINUED = re.compile(r"(# TODO\(spyre-adapter [a-z]+\):[^\n]*)((?:\n[ \t]*#   [^\n]*)+)")


def join_notes(code: str) -> str:
    """``code`` with every wrapped TODO note back on one line."""
    return _CONTINUED.sub(lambda m: " ".join([m.group(1), *(ln.strip()[4:].strip() for ln in
                                                            m.group(2).strip("\n").split("\n"))]), code)


class JoinedNotesTest(CodemodTest):
    """A CodemodTest whose text comparisons ignore how notes are wrapped."""

    def assertEqual(self, first: object, second: object, msg: object = None) -> None:  # noqa: N802
        if isinstance(first, str) and isinstance(second, str):
            first, second = join_notes(first), join_notes(second)
        super().assertEqual(first, second, msg)
