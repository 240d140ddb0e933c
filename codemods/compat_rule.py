"""Generate ``surface/compat_rule.toml``: tier 2's names chosen by rule, not by hand.

    python -m spyre_codemods.compat_rule            exit 1 when the committed file is stale
    python -m spyre_codemods.compat_rule --write    regenerate it (and the modules' ``__all__``)

The rule, applied to the per-release API index only (no vendor backend is read):
each module listed in ``[extension_modules]`` of ``surface/compat_api.toml`` is
the home of an Inductor extension point; every public class and function it
defines itself (for ``torch._dynamo``, a package, every public name it binds
from inside itself) becomes a stable name of its ``spyre_shims.compat`` module
when it

- exists at the same place in every release of the window, and
- for a function, keeps a caller-compatible signature from each release to the next.

A public name that fails either test becomes a documented no-equivalent saying
why (added in, removed in, signature changed in). Hand-written declarations
in ``compat_api.toml`` win over the rule (a name it already serves, or a
no-equivalent it already explains, is left out here).
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from spyre_surface.compat_api import DECLARATION_PATH, RULE_PATH, load_compat_api

from .api_index import ApiIndex, Signature, load_index
from .compat_table import resolve_in

__all__ = ["apply_rule", "compatible", "render", "main"]

#: the shims' tier-2 modules, whose ``__all__`` the rule's names join
COMPAT_DIR = Path(__file__).resolve().parents[1] / "shims" / "compat"


def compatible(old: str, new: str) -> bool:
    """Can every call written against signature ``old`` still bind to ``new``?
    (each parameter keeps its name, kind and position; new ones have defaults)."""
    a, b = Signature(old, "f").params, Signature(new, "f").params
    positional = [p for p in a if p.kind in ("positional", "posonly")]
    if [(p.name, p.kind) for p in b[: len(positional)]] != [(p.name, p.kind) for p in positional]:
        return False
    names = {p.name: p for p in b}
    return all(p.name in names and names[p.name].kind == p.kind for p in a) and all(
        p.default is not None or p.kind in ("varargs", "varkw") or p.name in {q.name for q in a} for p in b)


def _candidates(index: ApiIndex, module: str) -> dict[str, dict[str, str]]:
    """Public class/function names ``module`` defines (or, for a package, binds from
    inside itself), release -> entry."""
    seen: dict[str, dict[str, str]] = {}
    for release in index.release_names:
        view = index.view(release)
        assert view is not None
        names = view.names(module)
        package = view.has_module(f"{module}.__init__") or any(m.startswith(module + ".") for m in view.modules)
        for name, entry in names.items():
            if name.startswith("_"):
                continue
            if entry == "c" or entry.startswith("f:"):
                seen.setdefault(name, {})[release] = entry
            elif package and entry.startswith("i:") and entry[2:].startswith(module + "."):
                origin = view.origin(module, name)
                if origin is None or not origin[1]:
                    continue
                defined = view.names(origin[0]).get(origin[1], "")
                if defined == "c" or defined.startswith("f:"):
                    seen.setdefault(name, {})[release] = defined
    return seen


def _minor(release: str) -> str:
    return ".".join(release.split(".")[:2])


def _verdict(releases: list[str], entries: dict[str, str]) -> str | None:
    """``None`` when stable; otherwise why not."""
    present = [r for r in releases if r in entries]
    if len(present) < len(releases):
        first, last = releases.index(present[0]), releases.index(present[-1])
        if present == releases[first:last + 1]:
            if first > 0 and last == len(releases) - 1:
                return f"added in {_minor(present[0])}"
            if first == 0:
                return f"removed in {_minor(releases[last + 1])}"
            return f"only in {_minor(present[0])}-{_minor(present[-1])}"
        return "missing from " + ", ".join(_minor(r) for r in releases if r not in entries)
    kinds = {e[:1] for e in entries.values()}
    if len(kinds) > 1:
        return "changed between a class and a function inside the window"
    sigs = [entries[r][2:] for r in releases if entries[r].startswith("f:")]
    for r, (old, new) in zip(releases[1:], zip(sigs, sigs[1:])):
        if old != new and not compatible(old, new):
            return f"its signature changed in {_minor(r)} in a way that breaks callers written for older releases"
    return None


def _same_object(index: ApiIndex, qualname: str, others: list[str]) -> bool:
    """Does ``qualname`` name, in every release, the object one of ``others`` names there
    (``torch._dynamo.backends.registry.list_backends`` is ``torch._dynamo.list_backends``)?"""
    for release in index.release_names:
        view = index.view(release)
        assert view is not None
        mine = resolve_in(view, qualname)
        if mine is None or all((r := resolve_in(view, q)) is None or r[0] != mine[0] for q in others):
            return False
    return True


def apply_rule(index: ApiIndex | None = None) -> tuple[dict[str, dict[str, str]], dict[str, str]]:
    """``({stable module: {name: qualname}}, {qualname: reason})`` the rule adds."""
    index = index or load_index()
    api = load_compat_api(include_rule=False)
    releases = list(index.release_names)
    served = api.internal_names()
    names: dict[str, dict[str, str]] = {}
    excluded: dict[str, str] = {}
    for module, stable in api.extension_modules.items():
        taken = set(api.modules[stable].exported) | set(names.get(stable, {}))
        for name, entries in sorted(_candidates(index, module).items()):
            qualname = f"{module}.{name}"
            if qualname in served or qualname in api.no_equivalent:
                continue
            reason = _verdict(releases, entries)
            if reason is None and name in taken:
                same = [q for q in api.modules[stable].names[name].locations] if name in api.modules[stable].names \
                    else [names[stable][name]] if name in names.get(stable, {}) else []
                if same and _same_object(index, qualname, same):
                    continue  # another spelling of a name the module serves: migrate follows it there
                reason = f"its name is taken in {stable} by another Inductor object"
            if reason is not None:
                excluded[qualname] = reason
            else:
                names.setdefault(stable, {})[name] = qualname
                taken.add(name)
    return names, excluded


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def render(names: dict[str, dict[str, str]], excluded: dict[str, str]) -> str:
    """The TOML text of ``surface/compat_rule.toml``."""
    lines = [
        "# Generated by `python -m spyre_codemods.compat_rule --write` from the API index and the",
        "# [extension_modules] of compat_api.toml (see spyre_codemods.compat_rule). Do not edit.",
        "",
    ]
    for stable in sorted(names):
        lines += [f"[module.{stable}.names]"]
        lines += [f"{name} = {_quote(q)}" for name, q in names[stable].items()]
        lines.append("")
    lines.append("[no_equivalent]")
    for qualname, reason in sorted(excluded.items()):
        instead = ("keep it vendor-owned behind one module of yours, with a check for the releases that "
                   "lack it or call it differently")
        lines.append(f"{_quote(qualname)} = {{ reason = {_quote(reason)}, instead = {_quote(instead)} }}")
    return "\n".join(lines) + "\n"


_ALL = re.compile(r"^__all__ = \[\n(?:    .*\n)*\]\n", re.M)


def module_all(module: str) -> str:
    """The ``__all__`` literal of ``spyre_shims.compat.<module>`` for the whole declaration."""
    exported = load_compat_api().modules[module].exported
    return "__all__ = [\n" + "".join(f"    {name!r},\n" for name in exported) + "]\n"


def _write_modules() -> list[Path]:
    load_compat_api.cache_clear()
    changed = []
    for module in load_compat_api().modules:
        path = COMPAT_DIR / f"{module}.py"
        text = path.read_text(encoding="utf-8")
        new, count = _ALL.subn(module_all(module), text, count=1)
        if count != 1:
            raise SystemExit(f"{path}: no `__all__ = [` block to regenerate")
        if new != text:
            path.write_text(new, encoding="utf-8")
            changed.append(path)
    return changed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m spyre_codemods.compat_rule",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help=f"regenerate {RULE_PATH.name} and the modules' __all__")
    args = parser.parse_args(argv)
    text = render(*apply_rule())
    if args.write:
        RULE_PATH.write_text(text, encoding="utf-8")
        print(f"wrote {RULE_PATH}")
        for path in _write_modules():
            print(f"wrote {path}")
        return 0
    if not RULE_PATH.exists() or RULE_PATH.read_text(encoding="utf-8") != text:
        print(f"{RULE_PATH} is stale: run python -m spyre_codemods.compat_rule --write "
              f"(after changing {DECLARATION_PATH.name} or the API index)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
