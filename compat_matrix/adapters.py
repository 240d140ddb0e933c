"""Release-specific shim code: ``shims/_torch/adapters/*.py``, each declaring which releases it serves.

An adapter module declares ``RELEASES = "<PEP 440 specifier>"`` and ``FEATURES = [...]``
at module level; both are read with ``ast`` (adapters import torch internals, so
they are never imported here).
"""

from __future__ import annotations

import ast
import io
import tokenize
from dataclasses import dataclass
from pathlib import Path

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import Version

from spyre_matrix.paths import ADAPTERS_DIR

# Tokens that do not make a line "code".
_NON_CODE = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT,
             tokenize.ENCODING, tokenize.ENDMARKER}


@dataclass(frozen=True)
class Adapter:
    name: str  # module name inside the adapters package
    releases: SpecifierSet
    features: tuple[str, ...]
    lines: int  # non-blank, non-comment lines

    def active_for(self, version: str | Version) -> bool:
        return self.releases.contains(Version(str(version)), prereleases=True)


def code_lines(source: str) -> int:
    """Lines holding code: blank and comment-only lines excluded (a multi-line string counts every line)."""
    rows: set[int] = set()
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type not in _NON_CODE:
            rows.update(range(token.start[0], token.end[0] + 1))
    return len(rows)


def _module_constant(tree: ast.Module, name: str) -> object:
    for stmt in tree.body:
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target] if isinstance(stmt, ast.AnnAssign) else []
        if any(isinstance(t, ast.Name) and t.id == name for t in targets) and stmt.value is not None:
            return ast.literal_eval(stmt.value)
    return None


def read_adapter(path: Path) -> Adapter | None:
    """The adapter declared in ``path``; None for modules without ``RELEASES`` (shared helpers)."""
    source = path.read_text(encoding="utf-8")
    tree = ast.parse(source, filename=str(path))
    releases = _module_constant(tree, "RELEASES")
    if releases is None:
        return None
    try:
        specifier = SpecifierSet(str(releases))
    except InvalidSpecifier as exc:
        raise ValueError(f"{path}: RELEASES = {releases!r} is not a PEP 440 specifier") from exc
    features = _module_constant(tree, "FEATURES") or ()
    return Adapter(path.stem, specifier, tuple(str(f) for f in features), code_lines(source))


def load_adapters(directory: Path = ADAPTERS_DIR) -> list[Adapter] | None:
    """All declared adapters, by name; None when the adapters folder does not exist (yet)."""
    if not directory.is_dir():
        return None
    adapters = (read_adapter(p) for p in sorted(directory.glob("*.py")) if p.name != "__init__.py")
    return [a for a in adapters if a is not None]


def active_adapters(adapters: list[Adapter] | None, version: str) -> list[Adapter]:
    return [a for a in adapters or [] if a.active_for(version)]
