"""Version-normalised access to the Inductor internals vendor backends commonly touch.

A backend that still drives Inductor directly (its own scheduling or wrapper
codegen) imports these names from here instead of ``torch._inductor`` /
``torch._dynamo``: each resolves to whatever the installed release calls it, so
one source tree runs on every release in the window. ``spyre-adapter migrate``
rewrites direct imports onto this module.

Classes (resolved on first access, so ``import spyre_shims.compat`` stays cheap;
each is the real Inductor class, not a wrapper):

| name | where Inductor keeps it |
|---|---|
| ``PythonWrapperCodegen`` | ``torch._inductor.codegen.wrapper`` (``WrapperCodeGen`` before 2.6) |
| ``IndentedBuffer`` | ``torch.utils._indented_buffer`` from 2.14, ``torch._inductor.utils`` before |
| ``LoopBody`` | ``torch._inductor.loop_body`` (``torch._inductor.ir`` before 2.5) |
| ``BaseScheduling`` | ``torch._inductor.scheduler`` |
| ``DeviceOpOverrides`` | ``torch._inductor.codegen.common`` |
| ``DeviceInterface`` | ``torch._dynamo.device_interface`` |

A class missing from the installed release raises
:class:`~spyre_shims.errors.UnsupportedTorchError` naming it. Functions taking
``sizevars=None`` use the sizes of the graph being lowered (``V.graph.sizevars``);
pass a ``SizeVarAllocator`` to use another. Concrete integers (``int`` or a sympy
integer) need no graph.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any

import sympy

from ._torch import inductor as _inductor

__all__ = [
    "PythonWrapperCodegen",
    "IndentedBuffer",
    "LoopBody",
    "BaseScheduling",
    "DeviceOpOverrides",
    "DeviceInterface",
    "register_backend_for_device",
    "register_device_op_overrides",
    "register_interface_for_device",
    "get_interface_for_device",
    "size_hint",
    "size_hint_or_throw",
    "check_equals",
    "guard_int",
    "free_unbacked_symbols",
    "inductor_config",
]

_LAZY_CLASSES = frozenset(_inductor.COMPAT_CLASSES)


def __getattr__(name: str) -> Any:
    if name in _LAZY_CLASSES:
        return _inductor.compat_class(name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | _LAZY_CLASSES)


def register_backend_for_device(
    device: str,
    scheduling: Any,
    wrapper: Any,
    *,
    cpp_wrapper: Any = None,
    fx_wrapper: Any = None,
    custom_pass: Any = None,
    custom_config: Any = None,
) -> None:
    """Register Inductor's scheduling and wrapper codegen for ``device``.

    The optional arguments go to Inductor by keyword (2.9 inserted
    ``device_fx_wrapper_codegen`` before ``device_custom_pass``), and only those
    that are not ``None``. Raises
    :class:`~spyre_shims.errors.UnsupportedTorchError` naming the argument when
    the installed release has no such parameter (``custom_pass`` before 2.8,
    ``fx_wrapper`` and ``custom_config`` before 2.9).
    """
    options = {"cpp_wrapper": cpp_wrapper, "fx_wrapper": fx_wrapper,
               "custom_pass": custom_pass, "custom_config": custom_config}
    _inductor.compat_register_backend(device, scheduling, wrapper, options)


def register_device_op_overrides(device: str, overrides: Any) -> None:
    """Register a ``DeviceOpOverrides`` instance for ``device``."""
    _inductor.compat_register_op_overrides(device, overrides)


def register_interface_for_device(device: str, interface: Any) -> None:
    """Register a ``DeviceInterface`` subclass for ``device`` with Dynamo."""
    _inductor.compat_register_interface(device, interface)


def get_interface_for_device(device: str) -> type:
    """The ``DeviceInterface`` subclass registered for ``device``."""
    interface: type = _inductor.compat_get_interface(device)
    return interface


def _concrete(expr: Any) -> int | None:
    if isinstance(expr, bool):
        return None
    if isinstance(expr, int):
        return expr
    if isinstance(expr, sympy.Basic) and expr.is_Integer:
        return int(expr)
    return None


def size_hint(expr: Any, *, fallback: int | None = None, sizevars: Any = None) -> int:
    """A concrete value of ``expr`` for heuristics (``optimization_hint`` from 2.11,
    ``size_hint`` before). ``fallback`` is used for unbacked symbols."""
    value = _concrete(expr)
    if value is not None:
        return value
    return int(_inductor.sizevars_call("size_hint", sizevars, expr, fallback=fallback))


def size_hint_or_throw(expr: Any, *, sizevars: Any = None) -> int:
    """Like :func:`size_hint` but raises for unbacked symbols
    (``guarding_hint_or_throw`` from 2.12, ``size_hint_or_throw`` before)."""
    value = _concrete(expr)
    if value is not None:
        return value
    return int(_inductor.sizevars_call("size_hint_or_throw", sizevars, expr))


def check_equals(a: Any, b: Any, *, sizevars: Any = None) -> None:
    """Assert ``a == b``, adding a guard when that needs one (``check_equals`` from
    2.9, ``guard_equals`` before). Raises ``AssertionError`` when they differ."""
    va, vb = _concrete(a), _concrete(b)
    if va is not None and vb is not None:
        if va != vb:
            raise AssertionError(f"check_equals: {va} != {vb}")
        return
    _inductor.sizevars_call("check_equals", sizevars, a, b)


def guard_int(expr: Any, *, sizevars: Any = None) -> int:
    """Specialise ``expr`` to its current integer value, adding a guard
    (``guard_int`` from 2.9, ``evaluate_static_shape`` before)."""
    value = _concrete(expr)
    if value is not None:
        return value
    return int(_inductor.sizevars_call("guard_int", sizevars, expr))


def free_unbacked_symbols(node: Any) -> set[Any]:
    """The unbacked (data-dependent) symbols an IR or scheduler node uses
    (``get_free_symbol_uses(unbacked_only=True)`` from 2.8,
    ``get_unbacked_symbol_uses()`` before)."""
    return _inductor.free_unbacked_symbols(node)


def inductor_config(**overrides: Any) -> AbstractContextManager[Any]:
    """Patch ``torch._inductor.config`` inside a ``with`` block (also a decorator).

    Nested options use their dotted name: ``inductor_config(**{"triton.cudagraphs":
    False})``. Raises ``ValueError`` naming every option the installed release
    does not have (with the closest known name) before patching anything.
    """
    patch: AbstractContextManager[Any] = _inductor.config_patch(overrides)
    return patch
