"""Add parameters to a ``def`` the way its author would have written them.

A parameter list keeps its layout: one per line stays one per line (with the trailing
comma and the closing parenthesis where they were), a run of parameters on one line
is extended on that line, and a line that would grow past the file's limit is broken
before the new parameters. Only the separators next to the new parameters change.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Union

import libcst as cst

from .api_index import Param

__all__ = ["MAX_LINE", "NO_SPACE", "add_params", "fit_call_args", "line_limit"]

_Item = Union[cst.Param, cst.ParamStar, cst.ParamSlash]
NO_SPACE = cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace(""))
_EMPTY = cst.SimpleWhitespace("")


#: the longest line length a file is taken to have
MAX_LINE = 120


def line_limit(source: str) -> int:
    """The file's line length: its longest code line, between PEP 8's 79 and 120."""
    longest = max((len(line) for line in source.splitlines() if not line.lstrip().startswith("#")), default=0)
    return max(79, min(MAX_LINE, longest))


def _items(p: cst.Parameters) -> list[_Item]:
    out: list[_Item] = [*p.posonly_params]
    if isinstance(p.posonly_ind, cst.ParamSlash):
        out.append(p.posonly_ind)
    out += p.params
    if isinstance(p.star_arg, (cst.Param, cst.ParamStar)):
        out.append(p.star_arg)
    out += p.kwonly_params
    if p.star_kwarg is not None:
        out.append(p.star_kwarg)
    return out


def _new_param(param: Param) -> cst.Param:
    return cst.Param(name=cst.Name(param.name), default=cst.parse_expression(param.default or "None"),
                     equal=NO_SPACE)


def _closing(item: _Item) -> tuple[bool, cst.BaseParenthesizableWhitespace]:
    """(has a trailing comma, whitespace before the closing parenthesis)."""
    if isinstance(item.comma, cst.Comma):
        return True, item.comma.whitespace_after
    if isinstance(item, cst.Param):
        return False, item.whitespace_after_param
    if isinstance(item, cst.ParamSlash):
        return False, item.whitespace_after
    return False, _EMPTY


def _with_comma(item: _Item, comma: cst.Comma | cst.MaybeSentinel, after: cst.BaseParenthesizableWhitespace) -> _Item:
    if isinstance(item, cst.Param):
        return item.with_changes(comma=comma, whitespace_after_param=after)
    if isinstance(item, cst.ParamSlash):
        return item.with_changes(comma=comma, whitespace_after=after)
    return item.with_changes(comma=comma)


def add_params(fn: cst.FunctionDef, params: Sequence[Param], limit: int = 120, block_indent: int = 0) -> cst.FunctionDef:
    """``fn`` with ``params`` appended: positional ones after its positional parameters,
    keyword-only ones after its keyword-only parameters (a bare ``*`` added if needed).
    ``block_indent``: the column of the ``def``, for the line-length check."""
    p = fn.params
    old = _items(p)
    positional = [*p.params, *(_new_param(x) for x in params if x.kind != "kwonly")]
    kwonly = [*p.kwonly_params, *(_new_param(x) for x in params if x.kind == "kwonly")]
    star = p.star_arg
    if len(kwonly) > len(p.kwonly_params) and not isinstance(star, (cst.Param, cst.ParamStar)):
        star = cst.ParamStar()
    rebuilt = p.with_changes(params=positional, kwonly_params=kwonly, star_arg=star)
    items = _items(rebuilt)
    if len(items) == len(old):
        return fn
    fresh = {id(i) for i in items} - {id(i) for i in old}
    trailing, closing = _closing(old[-1]) if old else (False, _EMPTY)
    # the separator this list already uses between two parameters
    sep = next((i.comma for i in reversed(old[:-1]) if isinstance(i.comma, cst.Comma)), None)
    if sep is None:
        if isinstance(closing, cst.ParenthesizedWhitespace):
            sep = cst.Comma(whitespace_after=fn.whitespace_before_params)
        else:
            sep = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
    result = _assemble(fn, rebuilt, items, fresh, old, sep, trailing, closing)
    if isinstance(sep.whitespace_after, cst.SimpleWhitespace) and _too_long(result, [x.name for x in params], limit - block_indent):
        # break before the new parameters, continuing under the first parameter
        before = fn.whitespace_before_params
        if isinstance(before, cst.ParenthesizedWhitespace):
            broken: cst.BaseParenthesizableWhitespace = before
        else:
            column = len("async " if fn.asynchronous else "") + len("def ") + len(fn.name.value) + 1
            broken = cst.ParenthesizedWhitespace(indent=True, last_line=cst.SimpleWhitespace(" " * column))
        result = _assemble(fn, rebuilt, items, fresh, old, sep, trailing, closing,
                           first=sep.with_changes(whitespace_after=broken))
    return result


def _assemble(fn: cst.FunctionDef, rebuilt: cst.Parameters, items: list[_Item], fresh: set[int], old: list[_Item],
              sep: cst.Comma, trailing: bool, closing: cst.BaseParenthesizableWhitespace,
              first: cst.Comma | None = None) -> cst.FunctionDef:
    """The items with separators: ``first`` (default ``sep``) before the first new one."""
    last = len(items) - 1
    out: list[_Item] = []
    for n, item in enumerate(items):
        if n == last:
            item = _with_comma(item, cst.Comma(whitespace_after=closing) if trailing else cst.MaybeSentinel.DEFAULT,
                               _EMPTY if trailing else closing)
        elif id(item) not in fresh and id(items[n + 1]) in fresh:
            item = _with_comma(item, first or sep, _EMPTY)
        elif id(item) in fresh:  # (an old separator between old parameters is kept)
            item = _with_comma(item, sep, _EMPTY)
        out.append(item)
    return fn.with_changes(params=_reassemble(rebuilt, out))


def _too_long(fn: cst.FunctionDef, names: list[str], limit: int) -> bool:
    """Does a line holding a new parameter pass ``limit`` (counted from the ``def``'s column)?"""
    header = cst.Module(body=[]).code_for_node(
        fn.with_changes(body=cst.SimpleStatementSuite([]), leading_lines=[], decorators=[]))
    header = header.rstrip("\n").removesuffix(" pass")  # (libcst renders an empty suite as `: pass`)
    return any(len(line) > limit for line in header.splitlines()
               if any(re.search(rf"\b{re.escape(n)}\b", line) for n in names))


def _reassemble(p: cst.Parameters, items: list[_Item]) -> cst.Parameters:
    it = iter(items)
    posonly = [next(it) for _ in p.posonly_params]
    slash = next(it) if isinstance(p.posonly_ind, cst.ParamSlash) else p.posonly_ind
    params = [next(it) for _ in p.params]
    star = next(it) if isinstance(p.star_arg, (cst.Param, cst.ParamStar)) else p.star_arg
    kwonly = [next(it) for _ in p.kwonly_params]
    star_kwarg = next(it) if p.star_kwarg is not None else None
    return p.with_changes(posonly_params=posonly, posonly_ind=slash, params=params, star_arg=star,
                          kwonly_params=kwonly, star_kwarg=star_kwarg)


def fit_call_args(call: cst.Call, first: int, limit: int, indent: int, prefix: int, suffix: int) -> cst.Call:
    """A one-line ``call`` at column ``indent + prefix`` (``suffix`` characters after it on its
    line) that would pass ``limit``: broken before argument ``first``, continuing under the
    first argument; one argument per line when that is still too long."""
    code = cst.Module(body=[]).code_for_node(call)
    if "\n" in code or indent + prefix + len(code) + suffix <= limit or not 0 < first < len(call.args):
        return call
    column = prefix + len(cst.Module(body=[]).code_for_node(call.func)) + 1
    broken = cst.ParenthesizedWhitespace(indent=True, last_line=cst.SimpleWhitespace(" " * column))

    def break_before(args: list[cst.Arg], at: int) -> None:
        comma = args[at - 1].comma if isinstance(args[at - 1].comma, cst.Comma) else cst.Comma()
        args[at - 1] = args[at - 1].with_changes(comma=comma.with_changes(whitespace_after=broken))

    args = list(call.args)
    break_before(args, first)
    once = call.with_changes(args=args)
    if indent + len(cst.Module(body=[]).code_for_node(once).split("\n")[-1]) + suffix <= limit:
        return once
    for at in range(first + 1, len(args)):  # still too long: one argument per line
        break_before(args, at)
    return call.with_changes(args=args)
