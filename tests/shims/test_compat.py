"""spyre_shims.compat on the installed torch: real Inductor classes, sizevars helpers
inside a real CPU compile, config patching and device registration."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import textwrap
from typing import Any

import pytest
import sympy
import torch

from spyre_shims import compat
from spyre_shims.errors import UnsupportedTorchError

# Where each class may live across the supported window (DESIGN.md, "Known facts").
HOMES = {
    "PythonWrapperCodegen": {"torch._inductor.codegen.wrapper"},
    "IndentedBuffer": {"torch._inductor.utils", "torch.utils._indented_buffer"},
    "LoopBody": {"torch._inductor.loop_body"},
    "BaseScheduling": {"torch._inductor.scheduler"},
    "DeviceOpOverrides": {"torch._inductor.codegen.common"},
    "DeviceInterface": {"torch._dynamo.device_interface"},
}


def _run(code: str) -> subprocess.CompletedProcess[str]:
    """``code`` in a fresh interpreter without the spyre autoload (registries stay clean)."""
    env = {**os.environ, "TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          env=env, timeout=600)


@pytest.mark.parametrize("name", sorted(HOMES))
def test_classes_are_the_real_inductor_classes(name: str) -> None:
    cls = getattr(compat, name)
    assert isinstance(cls, type)
    assert cls.__module__ in HOMES[name]
    assert cls.__name__ == name
    assert getattr(importlib.import_module(cls.__module__), name) is cls
    assert name in compat.__all__ and name in dir(compat)


def test_indented_buffer_is_usable() -> None:
    buf = compat.IndentedBuffer()
    buf.writeline("def f():")
    with buf.indent():
        buf.writeline("return 1")
    assert buf.getvalue() == "def f():\n    return 1\n"


def test_registered_cpu_pieces_subclass_the_compat_classes() -> None:
    from torch._inductor.codegen import common
    from torch._inductor.codegen.cpp import CppScheduling

    common.init_backend_registration()
    assert issubclass(compat.get_interface_for_device("cpu"), compat.DeviceInterface)
    assert issubclass(CppScheduling, compat.BaseScheduling)
    assert isinstance(common.get_device_op_overrides("cpu"), compat.DeviceOpOverrides)
    assert issubclass(common.get_wrapper_codegen_for_device("cpu"), compat.PythonWrapperCodegen)


def test_unknown_attribute_raises_attribute_error() -> None:
    with pytest.raises(AttributeError, match="NoSuchThing"):
        compat.NoSuchThing  # noqa: B018


def test_import_is_cheap_and_classes_resolve_lazily() -> None:
    res = _run("""
        import sys
        import torch
        import spyre_shims.compat as compat
        loaded = sorted(m for m in sys.modules if m.startswith("torch._inductor"))
        assert not loaded, loaded
        compat.LoopBody
        assert "torch._inductor.loop_body" in sys.modules
        print("ok")
    """)
    assert res.returncode == 0 and res.stdout.strip() == "ok", res.stderr


def test_size_functions_take_concrete_integers_without_a_graph() -> None:
    assert compat.size_hint(3) == 3
    assert compat.size_hint(sympy.Integer(4)) == 4
    assert compat.size_hint_or_throw(sympy.Integer(5)) == 5
    assert compat.guard_int(sympy.Integer(6)) == 6
    compat.check_equals(sympy.Integer(7), 7)
    with pytest.raises(AssertionError, match="7 != 8"):
        compat.check_equals(7, sympy.Integer(8))
    with pytest.raises(RuntimeError, match="sizevars="):
        compat.size_hint(sympy.Symbol("s0"))


class _OldSizevars:
    """The method names of 2.6-2.8 only."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []

    def size_hint(self, expr: Any, *, fallback: int | None = None) -> int:
        self.calls.append(("size_hint", (expr,), {"fallback": fallback}))
        return 11

    def guard_equals(self, left: Any, right: Any) -> Any:
        self.calls.append(("guard_equals", (left, right), {}))
        return left

    def evaluate_static_shape(self, expr: Any) -> int:
        self.calls.append(("evaluate_static_shape", (expr,), {}))
        return 12


class _NewSizevars:
    """The method names of 2.12+ only."""

    def optimization_hint(self, expr: Any, fallback: int | None = None) -> int:
        return 21 if fallback is None else fallback

    def guarding_hint_or_throw(self, expr: Any) -> int:
        return 22


def test_sizevars_methods_are_found_by_their_release_names() -> None:
    s = sympy.Symbol("s0", integer=True, positive=True)
    old = _OldSizevars()
    assert compat.size_hint(s, fallback=3, sizevars=old) == 11
    assert compat.size_hint_or_throw(s, sizevars=old) == 11  # size_hint without a fallback throws there
    assert compat.check_equals(s, s, sizevars=old) is None  # guard_equals' return value is dropped
    assert compat.guard_int(s, sizevars=old) == 12
    assert [c[0] for c in old.calls] == ["size_hint", "size_hint", "guard_equals", "evaluate_static_shape"]
    assert old.calls[0][2] == {"fallback": 3} and old.calls[1][2] == {"fallback": None}
    new = _NewSizevars()
    assert compat.size_hint(s, sizevars=new) == 21
    assert compat.size_hint(s, fallback=5, sizevars=new) == 5
    assert compat.size_hint_or_throw(s, sizevars=new) == 22
    with pytest.raises(UnsupportedTorchError, match="guard_int"):
        compat.guard_int(s, sizevars=new)


def test_sizevars_helpers_inside_a_real_cpu_compile() -> None:
    """A pre-fusion pass sees each scheduler node while V.graph is live."""
    seen: dict[str, Any] = {}

    def probe(nodes: list[Any]) -> list[Any]:
        for node in nodes:
            size = list(node.node.get_size())
            seen["size"] = size
            seen["hint"] = compat.size_hint(sympy.Mul(*size))
            seen["or_throw"] = compat.size_hint_or_throw(size[0])
            compat.check_equals(size[0], size[0])
            seen["guard_int"] = compat.guard_int(size[1])
            seen["unbacked"] = compat.free_unbacked_symbols(node.node)
            seen["loop_body"] = isinstance(node._body, compat.LoopBody)
        return nodes

    fn = torch.compile(lambda x: x.sin() + 1, dynamic=True)
    x = torch.randn(5, 7)
    with compat.inductor_config(fx_graph_cache=False, _pre_fusion_custom_pass=probe):
        out = fn(x)
    torch.testing.assert_close(out, x.sin() + 1)
    assert any(isinstance(d, sympy.Symbol) for d in seen["size"]), seen  # really symbolic
    assert seen["hint"] == 35 and seen["or_throw"] == 5 and seen["guard_int"] == 7
    assert seen["unbacked"] == set() and seen["loop_body"] is True


def test_free_unbacked_symbols_of_a_data_dependent_shape() -> None:
    import torch._dynamo.config as dynamo_config

    found: list[set[Any]] = []
    raised: list[bool] = []

    def probe(nodes: list[Any]) -> list[Any]:
        for node in nodes:
            symbols = compat.free_unbacked_symbols(node.node)
            found.append(symbols)
            for s in symbols:
                assert isinstance(compat.size_hint(s, fallback=8), int)
                try:
                    compat.size_hint_or_throw(s)
                    raised.append(False)
                except Exception:  # noqa: BLE001 - the exception type is the release's own
                    raised.append(True)
        return nodes

    fn = torch.compile(lambda x: torch.nonzero(x).float().sin() * 2, fullgraph=True)
    x = torch.tensor([1.0, 0.0, 2.0])
    with dynamo_config.patch(capture_dynamic_output_shape_ops=True), \
            compat.inductor_config(fx_graph_cache=False, _pre_fusion_custom_pass=probe):
        out = fn(x)
    torch.testing.assert_close(out, torch.nonzero(x).float().sin() * 2)
    unbacked = set().union(*found)
    assert unbacked and all(str(s).startswith("u") for s in unbacked), found
    assert raised and all(raised)


def test_inductor_config_patches_and_restores() -> None:
    from torch._inductor import config

    before = config.max_autotune
    with compat.inductor_config(max_autotune=not before, **{"triton.cudagraphs": True}):
        assert config.max_autotune is (not before)
        assert config.triton.cudagraphs is True
    assert config.max_autotune is before

    @compat.inductor_config(max_autotune=not before)
    def inside() -> bool:
        return bool(config.max_autotune)

    assert inside() is (not before) and config.max_autotune is before


def test_inductor_config_names_every_unknown_option_and_patches_nothing() -> None:
    from torch._inductor import config

    before = config.max_autotune
    with pytest.raises(ValueError) as err:
        with compat.inductor_config(max_autotune=not before, max_autotun=True, **{"triton.cudagraph": True}):
            pass  # pragma: no cover
    msg = str(err.value)
    assert "'max_autotun' (did you mean 'max_autotune'?)" in msg
    assert "'triton.cudagraph' (did you mean 'triton.cudagraphs'?)" in msg
    assert config.max_autotune is before


def test_registration_reaches_inductor_and_dynamo() -> None:
    res = _run("""
        import torch
        from spyre_shims import compat
        from torch._inductor.codegen import common

        class Sched(compat.BaseScheduling):
            pass

        class Wrapper(compat.PythonWrapperCodegen):
            pass

        class Overrides(compat.DeviceOpOverrides):
            pass

        class Interface(compat.DeviceInterface):
            pass

        compat.register_backend_for_device("compatdev", Sched, Wrapper)
        assert common.get_scheduling_for_device("compatdev") is Sched
        assert common.get_wrapper_codegen_for_device("compatdev") is Wrapper
        overrides = Overrides()
        compat.register_device_op_overrides("compatdev", overrides)
        assert common.get_device_op_overrides("compatdev") is overrides
        compat.register_interface_for_device("compatdev", Interface)
        assert compat.get_interface_for_device("compatdev") is Interface
        print("ok")
    """)
    assert res.returncode == 0 and res.stdout.strip() == "ok", res.stderr


def test_register_backend_passes_options_by_keyword_and_names_missing_ones(monkeypatch: pytest.MonkeyPatch) -> None:
    from torch._inductor.codegen import common

    calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = []

    def release_2_7(device: str, device_scheduling: Any, device_wrapper_codegen: Any,
                    device_cpp_wrapper_codegen: Any = None) -> None:
        calls.append(((device, device_scheduling, device_wrapper_codegen),
                      {"device_cpp_wrapper_codegen": device_cpp_wrapper_codegen}))

    monkeypatch.setattr(common, "register_backend_for_device", release_2_7)
    compat.register_backend_for_device("dev", "S", "W", cpp_wrapper="C")
    assert calls == [(("dev", "S", "W"), {"device_cpp_wrapper_codegen": "C"})]
    for option in ("custom_pass", "fx_wrapper", "custom_config"):
        with pytest.raises(UnsupportedTorchError, match=f"register_backend_for_device\\({option}="):
            compat.register_backend_for_device("dev", "S", "W", **{option: object()})
    assert len(calls) == 1  # nothing registered when an option is refused
