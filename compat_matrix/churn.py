"""Churn between two releases: API diffs (added / removed / moved / signature-changed) and tree diffs."""

from __future__ import annotations

import shutil
import subprocess
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

CATEGORIES = ("added", "removed", "moved", "signature_changed")


@dataclass(frozen=True)
class ApiDiff:
    """How an API mapping ("module:qualname" -> descriptor) changed between two releases."""

    added: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    moved: tuple[tuple[str, str], ...] = ()  # (old key, new key)
    signature_changed: tuple[tuple[str, str, str], ...] = ()  # (key, old, new descriptor)

    def counts(self) -> dict[str, int]:
        return {name: len(getattr(self, name)) for name in CATEGORIES}

    @property
    def total(self) -> int:
        return sum(self.counts().values())


def _split(key: str) -> tuple[str, str]:
    module, _, qualname = key.partition(":")
    return module, qualname


def _top_level_moves(
    old: Mapping[str, str], new: Mapping[str, str], renames: Mapping[str, str]
) -> dict[str, str]:
    """Old key -> new key for names that vanished from one place and appear at another.

    Known renames (the shims' aliases) apply at any depth; otherwise a top-level
    name counts as moved when the same name appears, newly, in another module.
    """
    appeared: dict[str, list[str]] = defaultdict(list)
    for key in new:
        if key not in old:
            module, qualname = _split(key)
            if "." not in qualname:
                appeared[qualname].append(key)
    moves: dict[str, str] = {}
    for key in old:
        if key in new:
            continue
        if key in renames and renames[key] in new:
            moves[key] = renames[key]
            continue
        module, qualname = _split(key)
        elsewhere = [k for k in appeared.get(qualname, []) if _split(k)[0] != module]
        if "." not in qualname and elsewhere:
            moves[key] = sorted(elsewhere)[0]
    # A member alias whose class moved the same way is carried along, not moved itself.
    for key in sorted(moves, key=len, reverse=True):
        others = {old_key: new_key for old_key, new_key in moves.items() if old_key != key}
        if _carried(key, others) == moves[key]:
            del moves[key]
    return moves


def _carried(key: str, moves: Mapping[str, str]) -> str | None:
    """Where a member of a moved owner went (the longest moved prefix wins)."""
    module, qualname = _split(key)
    parts = qualname.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        owner = f"{module}:{'.'.join(parts[:cut])}"
        if owner in moves:
            return f"{moves[owner]}.{'.'.join(parts[cut:])}"
    return None


def diff_api(
    old: Mapping[str, str], new: Mapping[str, str], renames: Mapping[str, str] | None = None
) -> ApiDiff:
    """Classify every difference between two API mappings.

    Members of a moved class that come along unchanged are not churn (a vendor
    updates one import), so they are compared at their new place instead of
    being counted as removed + added.
    """
    moves = _top_level_moves(old, new, renames or {})
    matched_new: set[str] = set(moves.values())
    removed: list[str] = []
    changed: list[tuple[str, str, str]] = []
    for key, descriptor in old.items():
        if key in moves:
            continue
        target = key if key in new else _carried(key, moves)
        if target is None or target not in new:
            removed.append(key)
            continue
        matched_new.add(target)
        if new[target] != descriptor:
            changed.append((key, descriptor, new[target]))
    added = [key for key in new if key not in old and key not in matched_new]
    return ApiDiff(
        added=tuple(sorted(added)),
        removed=tuple(sorted(removed)),
        moved=tuple(sorted(moves.items())),
        signature_changed=tuple(sorted(changed)),
    )


# -- whole-tree churn (lines of source) ------------------------------------------------


@dataclass(frozen=True)
class TreeStats:
    files: int
    lines: int


def tree_stats(root: Path, suffix: str = ".py") -> TreeStats:
    files = sorted(p for p in root.rglob(f"*{suffix}") if p.is_file())
    lines = sum(len(p.read_bytes().splitlines()) for p in files)
    return TreeStats(files=len(files), lines=lines)


@dataclass
class TreeDiff:
    added_lines: int = 0
    removed_lines: int = 0
    files_added: int = 0
    files_removed: int = 0
    files_changed: int = 0
    per_file: dict[str, tuple[int, int]] = field(default_factory=dict, repr=False)

    @property
    def diff_lines(self) -> int:
        return self.added_lines + self.removed_lines


def tree_diff(old: Path, new: Path, suffix: str = ".py") -> TreeDiff:
    """Line diff of two directories with ``git diff --no-index --numstat`` (fast, standard)."""
    git = shutil.which("git")
    if git is None:
        raise RuntimeError("git is needed to diff release trees")
    proc = subprocess.run(
        [git, "diff", "--no-index", "--numstat", "--no-renames", "-z", "--", str(old), str(new)],
        capture_output=True,
        check=False,
    )
    if proc.returncode not in (0, 1):  # 1 means "differences found"
        raise RuntimeError(f"git diff failed: {proc.stderr.decode(errors='replace')}")
    return _parse_numstat(proc.stdout.decode("utf-8", errors="replace"), old, new, suffix)


def _numstat_records(out: str) -> list[tuple[str, str, str]]:
    """(added, removed, path) from ``--numstat -z``; --no-index always prints the
    rename form "a\tr\t\0old\0new\0" (old or new is /dev/null for whole-file changes)."""
    tokens = out.split("\0")
    records = []
    i = 0
    while i < len(tokens):
        if not tokens[i]:
            i += 1
            continue
        added, removed, path = tokens[i].split("\t", 2)
        if path:
            i += 1
        else:
            old_path, new_path = tokens[i + 1], tokens[i + 2]
            path = old_path if new_path == "/dev/null" else new_path
            i += 3
        records.append((added, removed, path))
    return records


def _parse_numstat(out: str, old: Path, new: Path, suffix: str) -> TreeDiff:
    diff = TreeDiff()
    old_files = {p.relative_to(old).as_posix() for p in old.rglob(f"*{suffix}")}
    new_files = {p.relative_to(new).as_posix() for p in new.rglob(f"*{suffix}")}
    for added, removed, path in _numstat_records(out):
        if not path.endswith(suffix) or added == "-":
            continue  # other file types, binaries
        rel = _relative(path, old, new)
        counts = (int(added), int(removed))
        diff.per_file[rel] = counts
        diff.added_lines += counts[0]
        diff.removed_lines += counts[1]
    diff.files_added = len(new_files - old_files)
    diff.files_removed = len(old_files - new_files)
    diff.files_changed = len([f for f in diff.per_file if f in old_files and f in new_files])
    return diff


def _relative(path: str, old: Path, new: Path) -> str:
    candidate = Path(path)
    for root in (new, old):
        for base in (root, root.resolve()):
            try:
                return candidate.relative_to(base).as_posix()
            except ValueError:
                continue
    return candidate.as_posix()
