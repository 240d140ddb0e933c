"""The patch registry: verified targets, scoped application, restore, firing."""

from __future__ import annotations

import sys
import types

import pytest
import torch

from spyre_shims._torch.patches import REGISTRY, Patch, PatchRegistry
from spyre_shims._torch.version import installed
from spyre_shims.errors import PatchTargetError


@pytest.fixture
def target_module():
    mod = types.ModuleType("patch_target_mod")

    def compute(x, y=1):
        return x + y

    mod.compute = compute
    mod.slot = None
    sys.modules[mod.__name__] = mod
    yield mod
    del sys.modules[mod.__name__]


def _doubling(original, fired):
    def replacement(x, y=1):
        fired()
        return 2 * original(x, y)

    return replacement


def test_missing_target_and_wrong_signature_are_refused(target_module) -> None:
    reg = PatchRegistry()
    with pytest.raises(PatchTargetError, match="patch_target_mod:nothing does not exist"):
        reg.register(Patch("p", "patch_target_mod:nothing", _doubling, "test"))
    with pytest.raises(PatchTargetError, match=r"has parameters \('x', 'y'\), expected \('a',\)"):
        reg.register(Patch("p", "patch_target_mod:compute", _doubling, "test", params=("a",)))
    with pytest.raises(PatchTargetError, match="is None"):
        reg.register(Patch("p", "patch_target_mod:slot", _doubling, "test"))


def test_scoped_application_restores_and_counts(target_module) -> None:
    reg = PatchRegistry()
    original = target_module.compute
    reg.register(Patch("double", "patch_target_mod:compute", _doubling, "test", params=("x", "y")))
    assert target_module.compute(1) == 2
    with reg.applied("double") as p:
        assert target_module.compute(1) == 4 and target_module.compute(2, 2) == 8
        assert p.active and p.fired == 2
    assert target_module.compute is original
    assert reg.report() == [{"name": "double", "target": "patch_target_mod:compute", "reason": "test",
                             "active": False, "fired": 2}]


def test_registry_state_on_this_torch() -> None:
    """The Spyre backend's decompositions and the hand-written-kernel rewrite are
    registered patches; before 2.8 one more keys the FX graph cache (no
    per-device pass exists there)."""
    from packaging.version import Version

    from spyre_adapter.backend.decompositions import CONV_OPS, LINALG_OPS, NORM_OPS, ROUTING_OPS

    torch.compile(lambda a: a + 1)(torch.ones(2).to("spyre"))  # the compiler's setup runs at the first compile
    active = {p["name"] for p in REGISTRY.report() if p["active"]}
    expected = {f"decomposition:spyre:{op}" for op in (*NORM_OPS, *ROUTING_OPS, *CONV_OPS, *LINALG_OPS)} | {
        "kernel-rewrites", "unsplit-scans:spyre", "numeric-identity"}
    if installed() < Version("2.8"):
        expected.add("cache-key:spyre")
    assert active == expected


def test_a_class_method_is_restored_as_a_class_method(target_module) -> None:
    """getattr unwraps a classmethod into a bound method: restoring that would
    bind every subclass's calls to the base class."""
    class Base:
        @classmethod
        def who(cls, x):
            return cls.__name__, x

    class Sub(Base):
        pass

    target_module.Base = Base
    reg = PatchRegistry()
    reg.register(Patch("cm", "patch_target_mod:Base.who",
                       lambda orig, fired: classmethod(lambda cls, x: ("patched", orig(x))), "cm", params=("x",)))
    with reg.applied("cm"):
        assert Sub.who(1) == ("patched", ("Base", 1))
    assert Sub.who(2) == ("Sub", 2) and isinstance(vars(Base)["who"], classmethod)


def test_a_method_a_class_inherits_is_inherited_again_after_restore(target_module) -> None:
    class Base:
        @classmethod
        def who(cls):
            return cls.__name__

    class Sub(Base):
        pass

    target_module.Sub = Sub
    reg = PatchRegistry()
    reg.register(Patch("inh", "patch_target_mod:Sub.who", lambda orig, fired: classmethod(lambda cls: "patched"), "i"))
    with reg.applied("inh"):
        assert Sub.who() == "patched" and Base.who() == "Base"
    assert "who" not in vars(Sub) and Sub.who() == "Sub"


def test_the_identity_of_a_number_is_the_number() -> None:
    """Held while the backend is registered: Inductor's cat lowering wraps
    shifted indices in Identity; substituting 0 left a non-comparable
    Identity(0) that Max refused (the family sweep's Inkling-2 crash)."""
    import sympy
    from torch.utils._sympy.functions import Identity

    torch.compile(lambda a: a + 1)(torch.ones(2).to("spyre"))
    i = sympy.Symbol("i", integer=True)
    assert Identity(sympy.Integer(0)) == 0 and sympy.Max(-Identity(sympy.Integer(0)), i) == sympy.Max(0, i)
    assert isinstance(Identity(i - 3), Identity)  # symbols keep their wrapper


def test_a_new_table_entry_is_added_and_removed_again(target_module) -> None:
    target_module.table = {"a": 1}
    reg = PatchRegistry()
    with pytest.raises(PatchTargetError, match=r"\[b\] does not exist"):
        reg.register(Patch("strict", "patch_target_mod:table", lambda orig, fired: 2, "entry", key="b"))
    seen = []
    reg.register(Patch("add", "patch_target_mod:table", lambda orig, fired: seen.append(orig) or 2, "entry",
                       key="b", new_key=True))
    with reg.applied("add"):
        assert target_module.table == {"a": 1, "b": 2} and seen == [None]
    assert target_module.table == {"a": 1}
