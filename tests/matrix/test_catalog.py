"""The release catalog drives nox, CI and the docs table: check it and that they agree."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.version import Version

from spyre_matrix.catalog import load_catalog, parse_catalog, render_compat_table

ROOT = Path(__file__).resolve().parents[2]


def _doc(*releases: dict, **top: object) -> dict:
    return {"defaults": {"python": "3.11", "requires": ["setuptools>=69"]}, "release": list(releases), **top}


def test_committed_catalog_covers_the_supported_window() -> None:
    catalog = load_catalog()
    minors = [(r.version.major, r.version.minor) for r in catalog.supported]
    assert minors == [(2, m) for m in range(6, 16)]  # every minor 2.6 … 2.15, one release each
    assert all(not r.supported for r in catalog if r.version < Version("2.6"))
    assert catalog.get(catalog.development).supported
    # Every session gets setuptools (uv venvs have none; Inductor's CPU path needs it).
    assert all(any(req.startswith("setuptools") for req in r.requires) for r in catalog)


def test_release_entries_extend_defaults() -> None:
    catalog = parse_catalog(_doc({"torch": "2.9.1", "requires": ["ninja"], "tags": ["quick"]}))
    release = catalog.get("2.9.1")
    assert release.requires == ("setuptools>=69", "ninja")
    assert release.pip_requirements() == ["torch==2.9.1", "setuptools>=69", "ninja"]
    assert release.nox_tags == ["full", "quick"]
    assert release.index_args() == []
    assert release.session_id == "compat(torch='2.9.1')"


def test_custom_index_is_an_extra_index() -> None:
    catalog = parse_catalog(_doc({"torch": "2.9.1", "index": "https://example.invalid/simple"}))
    assert catalog.get("2.9.1").index_args() == ["--extra-index-url", "https://example.invalid/simple"]


@pytest.mark.parametrize(
    ("releases", "message"),
    [
        (({"torch": "2.10.0"}, {"torch": "2.9.1"}), "oldest first"),  # string order would accept this
        (({"torch": "2.9.0"}, {"torch": "2.9.1"}), "per minor"),
        ((), "no \\[\\[release\\]\\]"),
    ],
)
def test_catalog_rejects_malformed_lists(releases: tuple[dict, ...], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_catalog(_doc(*releases))


def test_development_release_must_be_supported() -> None:
    with pytest.raises(ValueError, match="development"):
        parse_catalog(_doc({"torch": "2.5.1", "supported": False}, {"torch": "2.6.0"}, development="2.5.1"))


def test_previous_follows_version_order() -> None:
    catalog = load_catalog()
    pairs = [(p.torch if p else None, r.torch) for p, r in catalog.pairs()]
    assert pairs[0] == (None, "2.4.1")
    assert ("2.9.1", "2.10.0") in pairs


def _nox_sessions(*args: str) -> list[dict]:
    nox = shutil.which("nox") or pytest.skip("nox is not installed")
    out = subprocess.run([nox, "--list", "--json", *args], cwd=ROOT, capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


@pytest.mark.parametrize("tag", ["full", "quick"])
def test_nox_sessions_match_catalog(tag: str) -> None:
    catalog = load_catalog()
    listed = [s for s in _nox_sessions("-t", tag) if s["name"] == "compat"]
    assert [s["session"] for s in listed] == [r.session_id for r in catalog.tagged(tag)]
    assert all(s["call_spec"]["torch"] == catalog.get(s["call_spec"]["torch"]).torch for s in listed)
    if tag == "quick":  # oldest, a pre-2.10 (compiled device route) release, newest
        versions = [r.version for r in catalog.tagged("quick")]
        assert versions[0] == catalog.supported[0].version and versions[-1] == catalog.supported[-1].version
        assert any(v < Version("2.10") for v in versions[1:-1])


def test_sessions_install_the_hf_extra_where_transformers_supports_the_release() -> None:
    catalog = parse_catalog(_doc({"torch": "2.5.1", "supported": False}, {"torch": "2.6.0"}, {"torch": "2.9.1"},
                                 hf={"torch": ">=2.7"}))
    old, first, later = catalog.releases
    assert [catalog.installs_hf(r) for r in catalog] == [False, False, True]
    assert catalog.hf_cell(first, {"status": "pass"}) == "not installed: the hf extra needs torch >=2.7"
    assert catalog.hf_cell(later, None) == "not run" and catalog.hf_cell(later, {"status": "pass"}) == "not recorded"
    ran = {"hf": {"transformers": "5.25.0", "model_tests": {"passed": 30, "failed": 1, "skipped": 0}}}
    assert catalog.hf_cell(later, ran) == "30 passed, 1 failed, 0 skipped (transformers 5.25.0)"
    table = render_compat_table(catalog, {"2.9.1": "pass"}, results={"2.9.1": ran})
    assert "| 30 passed, 1 failed, 0 skipped (transformers 5.25.0) |" in table
    assert not parse_catalog(_doc({"torch": "2.9.1"})).installs_hf(later)  # no [hf]: never installed
    # transformers 5 (the hf extra) compiles from torch 2.7: every supported release but 2.6 runs the model tests
    committed = load_catalog()
    assert [r.torch for r in committed.supported if not committed.installs_hf(r)] == ["2.6.0"]
    noxfile = (Path(__file__).resolve().parents[2] / "noxfile.py").read_text()
    assert 'extras = "test,hf" if CATALOG.installs_hf(release) else "test"' in noxfile


def test_default_nox_session_is_the_offline_test_run() -> None:
    assert [s["session"] for s in _nox_sessions()] == ["tests"]


def test_compat_table_lists_supported_releases_with_status() -> None:
    catalog = parse_catalog(_doc(
        {"torch": "2.5.1", "supported": False},
        {"torch": "2.9.1", "notes": "a | b"},
        {"torch": "2.10.0"},
    ))
    table = render_compat_table(catalog, {"2.9.1": "fail"})
    rows = table.splitlines()[2:]
    assert [row.split("|")[1].strip() for row in rows] == ["2.9.1", "2.10.0"]
    assert "| fail |" in rows[0] and "| not run |" in rows[1]
    assert "a \\| b" in rows[0]  # a pipe in notes must not split the cell
    assert "2.5.1" in render_compat_table(catalog, only_supported=False)


_WITHOUT_PROJECT = """
import runpy, sys

class HideInstalledProject:  # as on a CI runner where only nox is installed
    @staticmethod
    def find_spec(name, path=None, target=None):
        if name == "spyre_matrix":
            raise ImportError(name)
        return None

sys.meta_path.insert(0, HideInstalledProject)
print(runpy.run_path(sys.argv[1])["CATALOG"].development)
"""


def test_noxfile_does_not_need_the_project_installed(tmp_path: Path) -> None:
    script = tmp_path / "load_noxfile.py"
    script.write_text(_WITHOUT_PROJECT)
    out = subprocess.run([sys.executable, str(script), str(ROOT / "noxfile.py")],
                         capture_output=True, text=True, check=True, cwd=tmp_path)
    assert out.stdout.strip() == load_catalog().development
