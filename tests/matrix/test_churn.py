"""Release-to-release churn: API diff classification and line diffs of source trees."""

from __future__ import annotations

from pathlib import Path

import pytest

from spyre_matrix.churn import diff_api, tree_diff, tree_stats


def test_unchanged_api_has_no_churn() -> None:
    api = {"m:f": "def(a)", "m:C": "class", "m:C.g": "def(self)"}
    diff = diff_api(api, dict(api))
    assert diff.total == 0


def test_each_category_is_counted() -> None:
    old = {"m:keep": "def(a)", "m:gone": "def()", "m:sig": "def(a)", "m:Moved": "class", "m:Moved.x": "def(self)"}
    new = {"m:keep": "def(a)", "m:sig": "def(a, b)", "n:Moved": "class", "n:Moved.x": "def(self)", "m:fresh": "attr"}
    diff = diff_api(old, new)
    assert diff.counts() == {"added": 1, "removed": 1, "moved": 1, "signature_changed": 1}
    assert diff.moved == (("m:Moved", "n:Moved"),)  # found by name in another module
    assert diff.added == ("m:fresh",)
    assert diff.signature_changed == (("m:sig", "def(a)", "def(a, b)"),)


def test_member_changed_inside_moved_class_is_a_signature_change() -> None:
    old = {"m:C": "class", "m:C.f": "def(self)"}
    new = {"m:D": "class", "m:D.f": "def(self, extra)"}
    diff = diff_api(old, new, {"m:C": "m:D"})
    assert diff.moved == (("m:C", "m:D"),)
    assert diff.signature_changed == (("m:C.f", "def(self)", "def(self, extra)"),)
    assert diff.added == diff.removed == ()


def test_known_member_rename_is_a_move_not_remove_plus_add() -> None:
    old = {"m:S": "class", "m:S.size_hint": "def(self, expr)"}
    new = {"m:S": "class", "m:S.optimization_hint": "def(self, expr)"}
    assert diff_api(old, new).counts() == {"added": 1, "removed": 1, "moved": 0, "signature_changed": 0}
    renamed = diff_api(old, new, {"m:S.size_hint": "m:S.optimization_hint"})
    assert renamed.moved == (("m:S.size_hint", "m:S.optimization_hint"),)
    assert renamed.total == 1


def test_old_name_kept_beside_new_name_is_not_a_move() -> None:
    old = {"m:S.size_hint": "def(self)"}
    new = {"m:S.size_hint": "def(self)", "m:S.optimization_hint": "def(self)"}
    diff = diff_api(old, new, {"m:S.size_hint": "m:S.optimization_hint"})
    assert diff.moved == () and diff.added == ("m:S.optimization_hint",)


def _write(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def test_tree_diff_counts_lines_and_files(tmp_path: Path) -> None:
    old = _write(tmp_path / "old", {"a.py": "1\n2\n3\n", "gone.py": "x\ny\n", "notes.txt": "t\n", "pkg/same.py": "s\n"})
    new = _write(tmp_path / "new", {"a.py": "1\nTWO\n3\n4\n", "pkg/same.py": "s\n", "pkg/new.py": "n\n"})
    diff = tree_diff(old, new)
    assert (diff.added_lines, diff.removed_lines) == (2 + 1, 1 + 2)  # a.py: +TWO +4 -2; new.py +1; gone.py -2
    assert (diff.files_added, diff.files_removed, diff.files_changed) == (1, 1, 1)
    assert diff.per_file == {"a.py": (2, 1), "gone.py": (0, 2), "pkg/new.py": (1, 0)}
    assert "notes.txt" not in diff.per_file  # only .py files are Inductor source
    assert diff.diff_lines == 6


def test_tree_stats(tmp_path: Path) -> None:
    root = _write(tmp_path, {"a.py": "1\n2\n", "b/c.py": "1\n", "d.txt": "x\n"})
    stats = tree_stats(root)
    assert (stats.files, stats.lines) == (2, 3)


def test_tree_diff_of_identical_trees_is_empty(tmp_path: Path) -> None:
    old = _write(tmp_path / "old", {"a.py": "1\n"})
    new = _write(tmp_path / "new", {"a.py": "1\n"})
    diff = tree_diff(old, new)
    assert diff.diff_lines == 0 and diff.per_file == {}


@pytest.mark.parametrize("name", ["with space.py", "ünïcode.py"])
def test_tree_diff_handles_awkward_file_names(tmp_path: Path, name: str) -> None:
    old = _write(tmp_path / "old", {name: "1\n"})
    new = _write(tmp_path / "new", {name: "2\n"})
    assert tree_diff(old, new).per_file == {name: (1, 1)}
