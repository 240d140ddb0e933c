"""The stable API's public surface equals the committed snapshot (api/spyre_shims.json).

A failure here means a public name or signature of ``spyre_shims`` changed. If that
was intended, follow docs/api-policy.md and run ``python tools/api_snapshot.py --update``.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import pytest

import spyre_shims
from spyre_shims import backend, index, kernel_ir
from spyre_shims.backend import Backend

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("api_snapshot", ROOT / "tools" / "api_snapshot.py")
assert _spec is not None and _spec.loader is not None
api_snapshot = importlib.util.module_from_spec(_spec)
sys.modules["api_snapshot"] = api_snapshot
_spec.loader.exec_module(api_snapshot)


@pytest.fixture(scope="module")
def recorded() -> dict[str, Any]:
    data: dict[str, Any] = api_snapshot.load()
    return data


@pytest.fixture
def baseline() -> dict[str, Any]:
    """The surface as it is now, before a test changes it (independent of the committed file)."""
    data: dict[str, Any] = api_snapshot.snapshot()
    return data


def test_stable_api_matches_the_committed_snapshot(recorded: dict[str, Any]) -> None:
    diff = api_snapshot.compare(recorded, api_snapshot.snapshot())
    assert not diff, (
        "the stable API changed:\n" + diff.report()
        + "\nIf intended, follow docs/api-policy.md and run `python tools/api_snapshot.py --update`."
    )


def test_snapshot_records_the_api_level(recorded: dict[str, Any]) -> None:
    assert recorded["api_level"] == spyre_shims.API_LEVEL == backend.API_LEVEL


def test_a_changed_signature_is_a_breaking_difference(baseline: dict[str, Any],
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    def register_backend(backend: Any, *, replace: bool) -> None:  # a required keyword more
        """Stand-in."""

    monkeypatch.setattr(backend, "register_backend", register_backend)
    diff = api_snapshot.compare(baseline, api_snapshot.snapshot())
    assert [c[0] for c in diff.changed] == ["spyre_shims.backend.register_backend"]
    assert diff.breaking and not diff.added and not diff.removed
    assert "replace: bool" in diff.report()


def test_an_appended_parameter_with_a_default_is_additive(baseline: dict[str, Any],
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/api-policy.md: a new keyword parameter with a default, after the existing ones."""
    def register_backend(backend: Backend, *, replace: bool = False) -> None:
        """Stand-in."""

    monkeypatch.setattr(backend, "register_backend", register_backend)
    diff = api_snapshot.compare(baseline, api_snapshot.snapshot())
    assert diff.extended == (("spyre_shims.backend.register_backend", ("parameter replace",)),)
    assert not diff.changed and not diff.breaking


@pytest.mark.parametrize("signature", [
    "(replace: bool = False, backend: Any) -> None",   # inserted before an existing parameter
    "(backend: Any, replace: bool = False) -> int",    # the return type changed too
    "(backend: Any, *args: Any) -> None",              # a catch-all is not a parameter with a default
    "(backend: int, replace: bool = False) -> None",   # an existing annotation changed
])
def test_other_grown_signatures_stay_breaking(signature: str) -> None:
    old = {"kind": "function", "signature": "(backend: Any) -> None"}
    diff = api_snapshot.compare({"modules": {"m": {"f": old}}}, {"modules": {"m": {"f": {**old, "signature": signature}}}})
    assert [c[0] for c in diff.changed] == ["m.f"] and diff.breaking


def test_a_changed_dataclass_field_default_is_detected(baseline: dict[str, Any],
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    import dataclasses

    @dataclasses.dataclass(frozen=True)
    class Ref:
        id: int = 0

    Ref.__module__ = kernel_ir.__name__
    monkeypatch.setattr(kernel_ir, "Ref", Ref)
    diff = api_snapshot.compare(baseline, api_snapshot.snapshot())
    assert [c[0] for c in diff.changed] == ["spyre_shims.kernel_ir.Ref"] and diff.breaking


def test_reordered_dataclass_fields_are_detected(baseline: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    """Frozen IR dataclasses are built positionally too: field order is part of the API."""
    import dataclasses

    swapped = dataclasses.make_dataclass(
        "DeviceProperties", [("cores", "int"), ("name", "str"), ("memory_bytes", "int", 0), ("bf16", "bool", True)],
        frozen=True,
    )
    swapped.__module__ = backend.__name__
    swapped.__doc__ = backend.DeviceProperties.__doc__
    monkeypatch.setattr(backend, "DeviceProperties", swapped)
    diff = api_snapshot.compare(baseline, api_snapshot.snapshot())
    assert [c[0] for c in diff.changed] == ["spyre_shims.backend.DeviceProperties"] and diff.breaking


def test_removed_and_added_names_are_told_apart(baseline: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(index, "__all__", [n for n in index.__all__ if n != "affine"] + ["brand_new"])
    monkeypatch.setattr(index, "brand_new", lambda x: x, raising=False)
    diff = api_snapshot.compare(baseline, api_snapshot.snapshot())
    assert diff.removed == ("spyre_shims.index.affine",)
    assert diff.added == ("spyre_shims.index.brand_new",)
    assert diff.breaking
    only_added = api_snapshot.compare(baseline, baseline | {"modules": {**baseline["modules"], "spyre_shims.x": {}}})
    assert only_added.added == ("spyre_shims.x",) and not only_added.breaking


def test_a_grown_op_set_is_additive_and_a_shrunk_one_breaking(baseline: dict[str, Any],
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    from spyre_shims import ops

    monkeypatch.setattr(ops, "STRUCTURAL", ops.STRUCTURAL | {"brand_new_op"})
    grown = api_snapshot.compare(baseline, api_snapshot.snapshot())
    assert grown.extended == (("spyre_shims.ops.STRUCTURAL", ("'brand_new_op'",)),)
    assert not grown.changed and not grown.breaking and grown
    monkeypatch.setattr(ops, "STRUCTURAL", ops.STRUCTURAL - {"brand_new_op", "where"})
    shrunk = api_snapshot.compare(baseline, api_snapshot.snapshot())
    assert [c[0] for c in shrunk.changed] == ["spyre_shims.ops.STRUCTURAL"] and shrunk.breaking


def test_update_refuses_a_breaking_change_without_consent(tmp_path: Path, baseline: dict[str, Any]) -> None:
    snap = tmp_path / "snap.json"
    edited = json.loads(json.dumps(baseline))
    edited["modules"]["spyre_shims.index"]["gone_since"] = {"kind": "function", "signature": "()"}
    snap.write_text(api_snapshot.dumps(edited))
    assert api_snapshot.main(["--snapshot", str(snap)]) == 1
    assert api_snapshot.main(["--snapshot", str(snap), "--update"]) == 1
    assert "gone_since" in snap.read_text()
    assert api_snapshot.main(["--snapshot", str(snap), "--update", "--allow-breaking"]) == 0
    assert api_snapshot.main(["--snapshot", str(snap)]) == 0
    assert json.loads(snap.read_text()) == api_snapshot.snapshot()


def test_snapshot_does_not_depend_on_the_hash_seed() -> None:
    outputs = []
    for seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed, "TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}
        res = subprocess.run([sys.executable, str(ROOT / "tools" / "api_snapshot.py"), "--print"],
                             env=env, capture_output=True, text=True, timeout=300)
        assert res.returncode == 0, res.stderr
        outputs.append(res.stdout)
    assert outputs[0] == outputs[1]
    assert "'load'" in json.loads(outputs[0])["modules"]["spyre_shims.ops"]["STRUCTURAL"]["items"]


def test_lazy_compat_classes_are_recorded_by_name_only(recorded: dict[str, Any]) -> None:
    compat = recorded["modules"]["spyre_shims.compat"]
    assert compat["LoopBody"] == {"kind": "lazy"}  # Inductor's class: its members are not ours to freeze
    assert compat["size_hint"]["signature"] == "(expr: Any, *, fallback: int | None = None, sizevars: Any = None) -> int"


def _stable_names_used_by(folder: Path) -> set[str]:
    """``module.name`` for every ``from spyre_shims.<module> import name`` under ``folder``."""
    used: set[str] = set()
    for path in folder.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("spyre_shims."):
                used.update(f"{node.module}.{a.name}" for a in node.names)
    return used


def test_backends_in_this_repo_use_only_public_names(recorded: dict[str, Any]) -> None:
    public = {f"{m}.{n}" for m, names in recorded["modules"].items() for n in names}
    public |= {m for m in recorded["modules"]}
    used = _stable_names_used_by(ROOT / "spyre_adapter") | _stable_names_used_by(ROOT / "examples")
    used |= {"spyre_shims.reference.run_kernel"}  # examples and README call it as reference.run_kernel
    assert sorted(used - public) == []


def test_every_public_name_has_a_docstring() -> None:
    missing = []
    for name in api_snapshot.stable_modules():
        module = importlib.import_module(name)
        if not (module.__doc__ or "").strip():
            missing.append(name)
        for attr in api_snapshot.public_names(module):
            obj = vars(module).get(attr)
            documentable = isinstance(obj, (type, types.FunctionType))
            if documentable and not (obj.__doc__ or "").strip():
                missing.append(f"{name}.{attr}")
    assert missing == []


def test_the_package_docstring_states_the_policy() -> None:
    """Where a vendor imports the API, its docstring says the level, the promise
    and how deprecations are announced (kept in step with the level)."""
    import spyre_shims

    doc = spyre_shims.__doc__ or ""
    assert f"now {spyre_shims.API_LEVEL})" in doc and f"(API level {spyre_shims.API_LEVEL})" in doc
    for part in ("*API level.*", "*What is promised.*", "*How deprecations are announced.*", "DeprecationWarning",
                 "CHANGELOG.md", "api/spyre_shims.json"):
        assert part in doc, part
