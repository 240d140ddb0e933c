"""An import-linter contract for what grimp cannot see.

grimp's graph drops imports of C-extension modules (``torch._C._acc``) and never
sees attribute access (``torch._inductor.config.x`` after ``import torch``). This
contract parses the source of every module under ``source_modules`` and fails
on any import of, or dotted attribute path into, the ``forbidden`` names.
"""

from __future__ import annotations

import ast
import importlib.util

from importlinter import Contract, ContractCheck, fields, output


def _dotted(node: ast.AST) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


def _hits(name: str, forbidden: list[str]) -> str | None:
    for f in forbidden:
        if name == f or name.startswith(f + "."):
            return f
    return None


def violations_in(source: str, forbidden: list[str]) -> list[tuple[int, str]]:
    """(line, text) of each forbidden import or attribute path in ``source``."""
    out = []
    for node in ast.walk(ast.parse(source)):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Attribute):
            d = _dotted(node)
            names = [d] if d else []
        for n in names:
            if _hits(n, forbidden):
                out.append((getattr(node, "lineno", 0), n))
                break
    return sorted(set(out))


class NoSourceReferenceContract(Contract):
    type_name = "no_source_reference"

    source_modules = fields.ListField(subfield=fields.ModuleField())
    forbidden = fields.ListField(subfield=fields.StringField())

    def check(self, graph, verbose: bool) -> ContractCheck:  # type: ignore[no-untyped-def]
        found = []
        forbidden = [str(f) for f in self.forbidden]
        for src in self.source_modules:
            mods = {src.name} | set(graph.find_descendants(src.name))
            for mod in sorted(mods):
                spec = importlib.util.find_spec(mod)
                if spec is None or not spec.origin or not spec.origin.endswith(".py"):
                    continue
                with open(spec.origin, encoding="utf-8") as f:
                    for line, name in violations_in(f.read(), forbidden):
                        found.append(f"{mod}:{line} references {name}")
        return ContractCheck(kept=not found, metadata={"violations": found})

    def render_broken_contract(self, check: ContractCheck) -> None:
        for v in check.metadata["violations"]:
            output.print_error(v)
