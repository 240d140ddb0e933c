"""What the migrate codemod maps onto the stable API (``spyre_shims.compat``), as data.

Each internal spelling on the left is replaced by the compat name on the right;
anything under ``torch._inductor``/``torch._dynamo``/``torch._functorch`` not listed
here gets a TODO instead.
"""

from __future__ import annotations

from dataclasses import dataclass

from .releases import Release, parse_release

__all__ = [
    "COMPAT_MODULE",
    "COMPAT_ALIAS",
    "SYMBOLS",
    "KEYWORD_RENAMES",
    "SizevarsMethod",
    "SIZEVARS_METHODS",
    "FREE_SYMBOLS",
    "CONFIG_PATCH",
    "VIRTUALIZED_V",
    "register_backend_positional",
]

COMPAT_MODULE = "spyre_shims.compat"
#: Used as ``from spyre_shims import compat as spyre_compat`` when a compat name
#: would collide with a name the file already binds.
COMPAT_ALIAS = "spyre_compat"

_I = "torch._inductor"
_D = "torch._dynamo"

#: Classes and functions with a drop-in stable equivalent.
SYMBOLS: dict[str, str] = {
    f"{_I}.codegen.wrapper.PythonWrapperCodegen": "PythonWrapperCodegen",
    f"{_I}.codegen.wrapper.WrapperCodeGen": "PythonWrapperCodegen",
    f"{_I}.utils.IndentedBuffer": "IndentedBuffer",
    "torch.utils._indented_buffer.IndentedBuffer": "IndentedBuffer",
    f"{_I}.loop_body.LoopBody": "LoopBody",
    f"{_I}.ir.LoopBody": "LoopBody",
    f"{_I}.scheduler.BaseScheduling": "BaseScheduling",
    f"{_I}.codegen.common.DeviceOpOverrides": "DeviceOpOverrides",
    f"{_D}.device_interface.DeviceInterface": "DeviceInterface",
    f"{_I}.codegen.common.register_backend_for_device": "register_backend_for_device",
    f"{_I}.codegen.common.register_device_op_overrides": "register_device_op_overrides",
    f"{_D}.device_interface.register_interface_for_device": "register_interface_for_device",
    f"{_D}.device_interface.get_interface_for_device": "get_interface_for_device",
}

#: Keyword arguments whose names differ between the internal and the compat function.
KEYWORD_RENAMES: dict[str, dict[str, str]] = {
    "register_backend_for_device": {
        "device_scheduling": "scheduling",
        "device_wrapper_codegen": "wrapper",
        "device_cpp_wrapper_codegen": "cpp_wrapper",
        "device_fx_wrapper_codegen": "fx_wrapper",
        "device_custom_pass": "custom_pass",
        "device_custom_config": "custom_config",
    },
    "register_device_op_overrides": {"device_op_overrides": "overrides"},
    "register_interface_for_device": {"device_interface": "interface"},
}


def register_backend_positional(source: Release | str | None, count: int) -> tuple[str, ...] | None:
    """Compat keyword names for ``register_backend_for_device``'s 4th.. positional
    arguments, given the release the code was written for.

    The 4th positional was the C++ wrapper in every release; the 5th was
    ``device_custom_pass`` in 2.8 and ``device_fx_wrapper_codegen`` from 2.9
    (``torch/_inductor/codegen/common.py`` in 2.8.0 and 2.9.1). Returns ``None``
    when ``count`` extra arguments cannot be mapped (unknown release, or more
    arguments than that release accepted).
    """
    if count <= 1:
        return ("cpp_wrapper",)[:count]
    if source is None:
        return None
    release = parse_release(source)
    if release < parse_release("2.8"):
        names: tuple[str, ...] = ("cpp_wrapper",)
    elif release < parse_release("2.9"):
        names = ("cpp_wrapper", "custom_pass")
    else:
        names = ("cpp_wrapper", "fx_wrapper", "custom_pass", "custom_config")
    return names[:count] if count <= len(names) else None


@dataclass(frozen=True)
class SizevarsMethod:
    """A ``<sizevars>.method(...)`` call with a compat function equivalent."""

    compat: str
    #: keyword names for positional arguments after the ones the compat function
    #: also takes positionally (``optimization_hint(expr, fallback)``)
    positional: int
    extra_positional: tuple[str, ...] = ()
    #: the old method returned a value the compat function does not
    returns_value_compat_lacks: bool = False


SIZEVARS_METHODS: dict[str, SizevarsMethod] = {
    "size_hint": SizevarsMethod("size_hint", 1, ("fallback",)),
    "optimization_hint": SizevarsMethod("size_hint", 1, ("fallback",)),
    "size_hint_or_throw": SizevarsMethod("size_hint_or_throw", 1),
    "guarding_hint_or_throw": SizevarsMethod("size_hint_or_throw", 1),
    "guard_equals": SizevarsMethod("check_equals", 2, returns_value_compat_lacks=True),
    "check_equals": SizevarsMethod("check_equals", 2),
    "evaluate_static_shape": SizevarsMethod("guard_int", 1),
    "guard_int": SizevarsMethod("guard_int", 1),
}

#: ``node.get_unbacked_symbol_uses()`` / ``node.get_free_symbol_uses(unbacked_only=True)``
FREE_SYMBOLS = "free_unbacked_symbols"

#: ``torch._inductor.config.patch(...)`` -> ``inductor_config(...)``
CONFIG_PATCH = (f"{_I}.config.patch", "inductor_config")

#: ``V.graph.sizevars`` is the compat functions' default, so it is not passed.
VIRTUALIZED_V = f"{_I}.virtualized.V"
