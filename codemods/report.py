"""What a codemod run found, per file and in total, and its JSON form."""

from __future__ import annotations

import json
import os
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from .fileio import atomic_write

__all__ = ["Finding", "FileResult", "RunReport", "write_json"]

FindingKind = Literal["rewrite", "todo", "skipped", "advisory"]
FileStatus = Literal["unchanged", "changed", "error"]


@dataclass(frozen=True)
class Finding:
    """One event in a file: a rewrite, a TODO left for a human, an advisory TODO
    (behaviour changed behind an unchanged name), or a match that was deliberately
    skipped (inside a compat block, marked with a TODO by the upgrade)."""

    line: int
    rule: str
    kind: FindingKind
    message: str
    #: the extension point a ``migrate`` finding concerns (``ir``, ``sched``...); empty otherwise
    category: str = ""


@dataclass
class FileResult:
    """Outcome for one file (``diff`` is filled in diff mode only)."""

    path: str
    status: FileStatus
    lines: int = 0
    findings: list[Finding] = field(default_factory=list)
    error: str | None = None
    diff: str = ""
    prefiltered: bool = False
    #: rules left to ``--modernize`` whose words appear in the file
    optional: list[str] = field(default_factory=list)
    #: TODO notes in the output (one may cover several sites)
    notes: int = 0

    def to_json(self) -> dict[str, Any]:
        """JSON-ready view (bytes and the diff text are left out)."""
        data: dict[str, Any] = {
            "path": self.path,
            "status": self.status,
            "lines": self.lines,
            "findings": [asdict(f) for f in self.findings],
            "notes": self.notes,
        }
        if self.error:
            data["error"] = self.error
        if self.optional:
            data["optional_rules"] = self.optional
        return data


@dataclass
class RunReport:
    """All files of one run plus the command that produced them."""

    command: str
    options: dict[str, Any]
    files: list[FileResult] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def changed(self) -> list[FileResult]:
        return [f for f in self.files if f.status == "changed"]

    @property
    def errors(self) -> list[FileResult]:
        return [f for f in self.files if f.status == "error"]

    def advisories(self) -> dict[str, int]:
        """Advisory id -> number of use sites marked."""
        found: Counter[str] = Counter(x.rule for f in self.files for x in f.findings if x.kind == "advisory")
        return dict(sorted(found.items()))

    def by_category(self) -> dict[str, dict[str, int]]:
        """``migrate``: per extension point, the internal-use sites found, rewritten
        onto stable names, left with a TODO, and left alone in compat blocks."""
        table: dict[str, Counter[str]] = {}
        for f in self.files:
            for x in f.findings:
                if x.category:
                    counts = table.setdefault(x.category, Counter())
                    counts[x.kind] += 1
                    counts["sites"] += 1
        return {c: {"sites": n["sites"], "rewritten": n["rewrite"], "todo": n["todo"], "skipped": n["skipped"]}
                for c, n in sorted(table.items())}

    def summary(self) -> dict[str, Any]:
        """Counts by status, by finding kind and by rule (and, for ``migrate``, the
        internal-use sites by category)."""
        kinds: Counter[str] = Counter()
        rules: Counter[str] = Counter()
        for f in self.files:
            for finding in f.findings:
                kinds[finding.kind] += 1
                rules[finding.rule] += 1
        return {
            "files": len(self.files),
            "changed": len(self.changed),
            "errors": len(self.errors),
            "unchanged": len(self.files) - len(self.changed) - len(self.errors),
            "lines": sum(f.lines for f in self.files),
            "findings": dict(sorted(kinds.items())),
            "by_rule": dict(sorted(rules.items())),
            "advisories": self.advisories(),
            # sites needing a human (TODO, advisory, compat block) and the notes that mark them
            "noted_sites": kinds["todo"] + kinds["advisory"] + kinds["skipped"],
            "notes": sum(f.notes for f in self.files),
            "optional_rules": sorted({r for f in self.files for r in f.optional}),
            "seconds": round(self.seconds, 3),
            **self._sites(),
        }

    def _sites(self) -> dict[str, Any]:
        categories = self.by_category()
        if not categories:
            return {}
        total = {k: sum(c[k] for c in categories.values()) for k in ("sites", "rewritten", "todo", "skipped")}
        share = total["rewritten"] / total["sites"] if total["sites"] else 0.0
        return {"sites": {**total, "rewritten_share": round(share, 4)}, "by_category": categories}

    def to_json(self) -> dict[str, Any]:
        """The ``--json`` document."""
        return {
            "command": self.command,
            "options": self.options,
            "summary": self.summary(),
            "files": [f.to_json() for f in self.files if f.findings or f.optional or f.status != "unchanged"],
        }


def write_json(path: str | os.PathLike[str], data: dict[str, Any]) -> None:
    """Write ``data`` as JSON atomically (a reader never sees half a report)."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(target, (json.dumps(data, indent=2) + "\n").encode("utf-8"))
