"""Line numbers of a few nodes, for findings, in one light code-generation pass.

libcst's PositionProvider records a range for every node of the module (hundreds
of thousands on a large Inductor file); a report needs the line of a handful. This
pass generates the code once, counting newlines, and notes the line where each
wanted node starts (a statement's own line: below its leading comments).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import libcst as cst
from libcst._nodes.internal import CodegenState

__all__ = ["node_lines"]


@dataclass
class _LineCounter(CodegenState):
    wanted: frozenset[int] = frozenset()
    line: int = 1
    found: dict[int, int] = field(default_factory=dict)
    last_token: str = ""

    def add_indent_tokens(self) -> None:
        self.last_token = "".join(self.indent_tokens) or self.last_token

    def add_token(self, value: str) -> None:
        if "\n" in value or "\r" in value:
            self.line += value.count("\n") + value.replace("\r\n", "").count("\r")
        self.last_token = value

    def pop_trailing_newline(self) -> None:
        pass  # only lines before the wanted nodes matter

    def before_codegen(self, node: cst.CSTNode) -> None:
        key = id(node)
        if key in self.wanted and key not in self.found:
            leading = getattr(node, "leading_lines", ())
            self.found[key] = self.line + len(leading)


def node_lines(
    module: cst.Module, nodes: Iterable[cst.CSTNode], within: cst.CSTNode | None = None, first_line: int = 1
) -> dict[int, int]:
    """``id(node) -> 1-based line`` for each of ``nodes`` found in ``module``, or only in
    its statement ``within`` (whose code, leading lines included, starts at ``first_line``)."""
    state = _LineCounter(default_indent=module.default_indent, default_newline=module.default_newline,
                         wanted=frozenset(id(n) for n in nodes), line=first_line)
    (within or module)._codegen(state)
    return state.found
