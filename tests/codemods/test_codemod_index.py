"""The per-release API index: how it is built (on small synthetic release trees), what the
committed one covers, and that the rule table's deprecation windows agree with it."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from spyre_codemods.api_index import INDEX_PATH, ApiIndex, Signature, load_index
from spyre_codemods.index_build import index_release, main, merge_releases, write_index
from spyre_codemods.releases import parse_release
from spyre_codemods.rule_table import RULES
from spyre_codemods.rules import MembersMove, MethodRename, ModuleMove, SymbolMove
from spyre_matrix.catalog import load_catalog

OLD = {
    "torch/_inductor/__init__.py": "",
    "torch/_inductor/sizevars.py": (
        "from typing import Union\n"
        "class SizeVarAllocator:\n"
        "    def size_hint(self, expr, *, fallback=None): ...\n"
        "    def guard_int(self, expr): ...\n"
    ),
    "torch/_inductor/codecache.py": "from .sizevars import SizeVarAllocator as SVA\nfrom typing import Union\n",
    "torch/_inductor/ops.py": "from .handler import *\n",
    "torch/_inductor/handler.py": (
        "class Handler:\n"
        "    def to_dtype(self, x, dtype, src_dtype=None): ...\n"
        "class Sub(Handler):\n"
        "    @staticmethod\n"
        "    def exp(x): ...\n"
        "def lower(x, dtype, copy=False): ...\n"
    ),
}
NEW = {
    "torch/_inductor/__init__.py": "",
    "torch/_inductor/sizevars.py": (
        "class SizeVarAllocator:\n"
        "    def optimization_hint(self, expr, fallback=None): ...\n"
        "    def guard_int(self, expr): ...\n"
    ),
    "torch/_inductor/codecache.py": "",
    "torch/_inductor/handler.py": (
        "class Handler:\n"
        "    def to_dtype(self, x, dtype, src_dtype=None, use_compute_types=True): ...\n"
        "class Sub(Handler):\n"
        "    pass\n"
        "def lower(x, dtype, copy=False, use_compute_types=True): ...\n"
    ),
    "torch/_dynamo/__init__.py": "def __getattr__(name): ...\n",
}


@pytest.fixture(scope="module")
def small() -> ApiIndex:
    return ApiIndex(merge_releases({"2.11.0": index_release(OLD.items()), "2.12.1": index_release(NEW.items())}))


def test_each_fact_carries_the_releases_it_holds_in(small: ApiIndex) -> None:
    old, new = small.view("2.11"), small.view("2.12.1")
    assert old is not None and new is not None and small.view("2.13") is None
    assert old.has_module("torch._inductor.ops") and not new.has_module("torch._inductor.ops")
    assert old.method("torch._inductor.sizevars.SizeVarAllocator", "size_hint") is not None
    assert new.method("torch._inductor.sizevars.SizeVarAllocator", "size_hint") is None
    # an unchanged fact is stored once, for both releases
    guard_int = small.modules["torch._inductor.sizevars"]["classes"]["SizeVarAllocator"]["methods"]["guard_int"]
    assert guard_int == [["f:self, expr", 0b11]]


def test_resolution_follows_imports_star_imports_and_lazy_modules(small: ApiIndex) -> None:
    old, new = small.view("2.11"), small.view("2.12")
    assert old is not None and new is not None
    assert old.resolves("torch._inductor.codecache", "SVA") and not new.resolves("torch._inductor.codecache", "SVA")
    assert old.origin("torch._inductor.codecache", "Union") == ("typing", "Union")
    assert old.origin("torch._inductor.codecache", "SVA") == ("torch._inductor.sizevars", "SizeVarAllocator")
    assert old.resolves("torch._inductor.ops", "Handler")  # through `from .handler import *`
    assert new.resolves("torch._dynamo", "anything")  # module __getattr__: cannot tell, so yes
    assert new.homes("SizeVarAllocator") == ["torch._inductor.sizevars"]


def test_signatures_through_bases_and_what_changed(small: ApiIndex) -> None:
    old, new = small.view("2.11"), small.view("2.12")
    assert old is not None and new is not None
    owner, sig = new.method("torch._inductor.handler.Sub", "to_dtype") or ("", Signature("", "f"))
    assert owner == "torch._inductor.handler.Handler"
    assert [str(p) for p in sig.bound_params] == ["x", "dtype", "src_dtype=None", "use_compute_types=True"]
    exp = old.method("torch._inductor.handler.Sub", "exp")
    assert exp is not None and exp[1].kind == "s" and [p.name for p in exp[1].bound_params] == ["x"]
    assert small.changed_methods(old, new, "torch._inductor.handler.Sub") == {"to_dtype", "exp"}
    assert small.changed_functions(old, new) == {"lower": {"torch._inductor.handler"}}


def _build(tmp_path: Path, trees: tuple[tuple[str, dict[str, str]], ...], out: Path) -> None:
    """Write the release trees under ``tmp_path/src`` and index them into ``out``."""
    for release, files in trees:
        for name, text in files.items():
            path = tmp_path / "src" / release / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
    assert main(["--src", str(tmp_path / "src"), "--out", str(out), *(release for release, _ in trees)]) == 0


def test_built_from_trees_on_disk_and_written_deterministically(tmp_path: Path) -> None:
    out = tmp_path / "index.json.gz"
    _build(tmp_path, (("2.11.0", OLD), ("2.12.1", NEW)), out)
    first = out.read_bytes()
    write_index(json.loads(gzip.decompress(first)), out)
    assert out.read_bytes() == first  # no timestamp: re-generating changes nothing
    assert load_index(out).release_names == ("2.11.0", "2.12.1")


def test_body_fingerprints_see_what_code_does_not_how_it_is_written(tmp_path: Path) -> None:
    old = {"torch/_inductor/__init__.py": "", "torch/_inductor/m.py": (
        "def resync(x, y):\n    return x + y\n"
        "def reformat(x: int, y: int) -> int:\n    \"Add.\"\n    z: int = x + y\n    return z\n"
        "class C:\n    def m(self, a):\n        return a * 2\n")}
    new = {"torch/_inductor/__init__.py": "", "torch/_inductor/m.py": (
        "def resync(x, y):\n    return x - y\n"
        "def reformat(x: 'int | None', y) -> 'int':\n    # a comment\n    z = (\n        x + y\n    )\n"
        "    return z\n"
        "class C:\n    def m(self, a):\n        return a * 3\n")}
    out = tmp_path / "api_index.json.gz"
    _build(tmp_path, (("2.11.0", old), ("2.12.1", new)), out)
    index = load_index(out)
    v1, v2 = index.view("2.11"), index.view("2.12")
    assert v1 is not None and v2 is not None
    assert v1.body("torch._inductor.m", "resync") != v2.body("torch._inductor.m", "resync")
    assert v1.body("torch._inductor.m", "reformat") == v2.body("torch._inductor.m", "reformat")
    assert v1.body("torch._inductor.m", "C.m") != v2.body("torch._inductor.m", "C.m")
    assert index.changed_bodies(v1, v2) == {"resync": frozenset({"torch._inductor.m"})}
    assert "bodies" not in json.loads(gzip.decompress(out.read_bytes()))  # they live beside the index


def test_a_missing_release_without_fetch_is_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="pass --fetch"):
        main(["--src", str(tmp_path), "--out", str(tmp_path / "x.json.gz"), "2.9.1"])


def test_committed_index_covers_the_supported_releases() -> None:
    index = load_index()
    assert INDEX_PATH.is_file() and INDEX_PATH.stat().st_size < 2_000_000
    assert list(index.release_names) == [r.torch for r in load_catalog().supported]
    assert len(index.view("2.6").modules) > 250 and len(index.view("2.15").modules) > 500  # type: ignore[union-attr]


def test_committed_index_knows_the_facts_the_issue_names() -> None:
    index = load_index()
    v211, v212 = index.view("2.11"), index.view("2.12")
    assert v211 is not None and v212 is not None
    sizevars = "torch._inductor.sizevars.SizeVarAllocator"
    assert v211.method(sizevars, "size_hint") and v211.method(sizevars, "optimization_hint")
    assert not v212.method(sizevars, "size_hint") and v212.method(sizevars, "optimization_hint")
    lowering_to_dtype = [p.name for p in v212.function("torch._inductor.lowering.to_dtype").bound_params]  # type: ignore[union-attr]
    assert "use_compute_types" in lowering_to_dtype
    assert "use_compute_types" not in [p.name for p in v211.function("torch._inductor.lowering.to_dtype").bound_params]  # type: ignore[union-attr]
    v26, v215 = index.view("2.6"), index.view("2.15")
    assert v26 is not None and v215 is not None
    for module, name in (("torch._inductor.codecache", "TritonFuture"), ("torch._inductor.runtime.triton_heuristics", "grid"),
                         ("torch._inductor.codegen.triton", "OpsHandler"), ("torch._inductor.codecache", "Union")):
        assert v26.resolves(module, name) and not v215.resolves(module, name), (module, name)


# Rules whose old module keeps importing *some* of the moved names (not all): the rule
# covers the group, the index sees each name.
_PARTLY_REEXPORTED = {("vec-isa-module", "torch._inductor.codecache.pick_vec_isa")}


def test_rule_windows_agree_with_the_index() -> None:
    """``old_works_in`` of every rename rule matches the index in each release from the
    first one where the old spelling existed."""
    index = load_index()
    sizevars = "torch._inductor.sizevars.SizeVarAllocator"
    disagreements = []
    for rule in RULES:
        if isinstance(rule, SymbolMove):
            olds = [rule.old]
        elif isinstance(rule, MembersMove):
            olds = [f"{rule.old_module}.{n}" for n in rule.names]
        elif isinstance(rule, ModuleMove):
            olds = [rule.old]
        elif isinstance(rule, MethodRename) and rule.receiver == "sizevars":
            olds = [f"{sizevars}.{rule.method}"]
        else:
            continue
        for old in olds:
            seen = False
            for release in index.releases:
                view = index.view(release)
                assert view is not None
                if old.startswith(sizevars + "."):
                    works = view.method(sizevars, old.rpartition(".")[2]) is not None
                else:
                    works = view.resolves_qualname(old)
                seen = seen or works
                if seen and works != rule.old_works_in(release) and (rule.id, old) not in _PARTLY_REEXPORTED:
                    disagreements.append((rule.id, str(release), old, works))
    assert not disagreements


def test_windows_and_releases_use_the_one_catalog() -> None:
    from spyre_codemods.releases import KNOWN_RELEASES

    assert KNOWN_RELEASES == tuple(parse_release(r.torch) for r in load_catalog())
