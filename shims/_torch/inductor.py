"""Inductor internals, resolved once for the installed release.

Everything the shims need from ``torch._inductor`` / ``torch._dynamo`` goes
through this module: symbols that moved are looked up in each known location
(feature detection), and call signatures that changed are normalised here.
``spyre_surface`` (``surface/surface.toml``) lists the same symbols for the probe and the matrix report.
"""

from __future__ import annotations

import functools
import importlib
import inspect
from collections.abc import Sequence
from typing import Any

from .._lookup import lookup
from ..errors import UnsupportedTorchError
from .version import WINDOW_TEXT, installed, require_window


def resolve(feature: str, *locations: str) -> Any:
    """The first of ``"module:attr.path"`` locations that exists."""
    for loc in locations:
        try:
            return lookup(loc)
        except (ImportError, AttributeError):
            continue
    raise UnsupportedTorchError(feature, str(installed()), WINDOW_TEXT, f"none of {', '.join(locations)} exists")


def has_param(fn: Any, name: str) -> bool:
    """Feature detection on a signature."""
    try:
        return name in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


@functools.cache
def _ns() -> dict[str, Any]:
    require_window("Inductor backend registration")
    return {
        "V": resolve("kernel_ir.capture", "torch._inductor.virtualized:V"),
        "ir": importlib.import_module("torch._inductor.ir"),
        "BaseScheduling": resolve("backend.scheduling", "torch._inductor.scheduler:BaseScheduling"),
        "Kernel": resolve("backend.scheduling", "torch._inductor.codegen.common:Kernel"),
        "PythonWrapperCodegen": resolve(
            "backend.wrapper",
            "torch._inductor.codegen.wrapper:PythonWrapperCodegen",
            "torch._inductor.codegen.wrapper:WrapperCodeGen",
        ),
        "SubgraphPythonWrapperCodegen": resolve(
            "backend.wrapper", "torch._inductor.codegen.wrapper:SubgraphPythonWrapperCodegen"),
        "DeviceOpOverrides": resolve("backend.register", "torch._inductor.codegen.common:DeviceOpOverrides"),
        "register_backend_for_device": resolve(
            "backend.register", "torch._inductor.codegen.common:register_backend_for_device"),
        "register_device_op_overrides": resolve(
            "backend.register", "torch._inductor.codegen.common:register_device_op_overrides"),
        "DeviceInterface": resolve("backend.register", "torch._dynamo.device_interface:DeviceInterface"),
        "register_interface_for_device": resolve(
            "backend.register", "torch._dynamo.device_interface:register_interface_for_device"),
        "get_interface_for_device": resolve(
            "backend.register", "torch._dynamo.device_interface:get_interface_for_device"),
        "OrderedSet": resolve("backend.capabilities", "torch.utils._ordered_set:OrderedSet"),
        "config": importlib.import_module("torch._inductor.config"),
    }


def get(name: str) -> Any:
    """An Inductor symbol by its stable short name (see :func:`_ns`)."""
    return _ns()[name]


def register_backend(device: str, scheduling: Any, wrapper: Any, *, custom_pass: Any = None) -> None:
    """``register_backend_for_device`` with release-dependent arguments by keyword.

    2.9 inserted ``device_fx_wrapper_codegen`` before ``device_custom_pass``, so
    everything after the third argument is passed by keyword, and only if the
    installed release has that parameter.
    """
    fn = get("register_backend_for_device")
    kwargs: dict[str, Any] = {}
    if custom_pass is not None and has_param(fn, "device_custom_pass"):
        kwargs["device_custom_pass"] = custom_pass
    fn(device, scheduling, wrapper, **kwargs)


def register_op_overrides(device: str, overrides: Any) -> None:
    """``register_device_op_overrides`` after Inductor's built-in entries exist.

    Before 2.13 Inductor filled its own (cpu, cuda...) entries only while the
    table was empty, so registering first left "cpu" missing (KeyError later).
    Asking for the cpu entry first fills the table on every release.
    """
    try:
        resolve("backend.register", "torch._inductor.codegen.common:get_device_op_overrides")("cpu")
    except (KeyError, UnsupportedTorchError):
        pass
    get("register_device_op_overrides")(device, overrides)


def supports_custom_pass() -> bool:
    """2.8+: a per-device post-grad pass (also part of the FX graph cache key)."""
    return has_param(get("register_backend_for_device"), "device_custom_pass")


def custom_pass_base() -> Any:
    """Base class of a cacheable custom graph pass (has ``uuid()``), or None."""
    for loc in ("torch._inductor.custom_graph_pass:CustomGraphModulePass",
                "torch._inductor.custom_graph_pass:CustomGraphPass"):
        try:
            return resolve("backend.cache_key", loc)
        except UnsupportedTorchError:
            continue
    return None


def backend_features(names: frozenset[str]) -> Any:
    """Inductor ``BackendFeature`` members for stable feature names (those the
    installed release knows)."""
    enum = resolve("backend.capabilities", "torch._inductor.codegen.common:BackendFeature")
    members = [getattr(enum, n.upper()) for n in sorted(names) if hasattr(enum, n.upper())]
    return get("OrderedSet")(members)


# ------------------------------------------------------------------ graph queries

def graph() -> Any:
    return get("V").graph


def precomputed_size(sym: Any) -> Any:
    """The expression a precomputed size symbol (``ps<n>``) stands for in the
    graph being lowered, or None for any other symbol."""
    if not sym.name.startswith("ps"):
        return None
    V = get("V")
    try:
        inv = V.graph.sizevars.inv_precomputed_replacements
    except AttributeError:
        return None
    return inv.get(sym)


def dtype_of(name: str) -> Any:
    return graph().get_dtype(name)


def real_name(name: str) -> str:
    """The wrapper-level name of a buffer (mutations write to their target)."""
    sched = getattr(graph(), "scheduler", None)
    renames = getattr(sched, "mutation_real_name", {}) if sched is not None else {}
    seen = set()
    while name in renames and name not in seen:
        seen.add(name)
        name = renames[name]
    return name


def layout_of(name: str) -> Any:
    """The layout of a buffer or graph input."""
    g = graph()
    if name in g.graph_inputs:
        return g.graph_inputs[name].get_layout()
    return g.get_buffer(name).get_layout()


def output_names() -> set[str]:
    return set(graph().get_output_names())


def view_buffers() -> set[str]:
    """Buffers written through a view of another buffer's storage (Inductor's
    NonOwningLayout: the inputs of a cat realised in place). Their readers may
    see them only under the other buffer's name."""
    out = set()
    for buf in getattr(graph(), "buffers", ()):
        layout = getattr(buf, "layout", None)
        if type(layout).__name__ == "NonOwningLayout":
            out.add(buf.get_name())
    return out


def removable(name: str, fused: set[str]) -> bool:
    """True when ``name`` is produced and consumed only inside ``fused``."""
    sched = graph().scheduler
    fn = getattr(sched, "can_buffer_be_removed_through_fusion", None)
    if fn is None:
        return False
    return bool(fn(name, get("OrderedSet")(fused))) and name not in output_names()


def mark_removed(name: str) -> None:
    graph().removed_buffers.add(name)


def is_removed(name: str) -> bool:
    return name in graph().removed_buffers


def replay_body(snode: Any, handler: Any, ivars: Sequence[Any], rvars: Sequence[Any]) -> None:
    """Run a SchedulerNode's LoopBody with ``handler`` as the ops handler."""
    V = get("V")
    with V.set_ops_handler(handler):
        snode._body(list(ivars), list(rvars))


def ops_handler(handler: Any) -> Any:
    """A context in which Inductor's ``ops`` calls go to ``handler``."""
    return get("V").set_ops_handler(handler)


def is_scan(snode: Any) -> bool:
    """Whether a scheduler node (or any node of a fused one) computes a scan."""
    scan = getattr(get("ir"), "Scan", None)
    nodes = snode.get_nodes() if hasattr(snode, "get_nodes") else [snode]
    return scan is not None and any(isinstance(getattr(getattr(n, "node", None), "data", None), scan) for n in nodes)


def node_outputs(snode: Any) -> list[str]:
    """Buffer names a scheduler node writes."""
    if hasattr(snode, "get_outputs"):
        return [b.get_name() for b in snode.get_outputs()]
    return [snode.get_name()]


def node_group(snode: Any) -> tuple[Any, Any]:
    """``(numel, reduction numel)`` of a scheduler node as Inductor groups it."""
    return tuple(snode.group[1])  # type: ignore[return-value]


def node_io(snode: Any) -> tuple[set[str], set[str]]:
    rw = snode.read_writes
    return {d.name for d in rw.reads}, {d.name for d in rw.writes}


def operand(node: Any) -> tuple[str, Any]:
    """``(buffer name, layout)`` of an extern-kernel input, unwrapping views."""
    ir = get("ir")
    if isinstance(node, ir.ReinterpretView):
        return node.data.get_name(), node.layout
    if hasattr(node, "get_name") and hasattr(node, "get_layout"):
        return node.get_name(), node.get_layout()
    raise TypeError(f"unsupported extern operand {type(node).__name__}")


def extern_out_node(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """The ExternKernelOut node behind a ``generate_extern_kernel_out`` call.

    2.8+ pass the node; 2.6/2.7 pass strings ``(kernel, out, out_view, args)``,
    where ``out`` names the node's buffer.
    """
    first = args[0] if args else kwargs.get("node", kwargs.get("kernel"))
    if first is not None and not isinstance(first, str):
        return first
    out = args[1] if len(args) > 1 else kwargs.get("out")
    if isinstance(out, str):
        try:
            return graph().get_buffer(out)
        except (KeyError, AttributeError):
            return None
    return None


def extern_op_name(node: Any) -> str:
    """``mm`` for ``aten.mm.default`` / ``extern_kernels.mm``."""
    op = getattr(node, "op_overload", None)
    if op is not None:
        return str(op).split(".")[1] if str(op).startswith("aten.") else str(op)
    return str(getattr(node, "python_kernel_name", "") or "").rsplit(".", 1)[-1]


def fallback_op_name(node: Any) -> str:
    op = getattr(node, "op_overload", None) or getattr(node, "python_kernel_name", None)
    return str(op) if op is not None else type(node).__name__


def node_device_type(node: Any) -> str | None:
    dev = node.get_device() if hasattr(node, "get_device") else None
    return dev.type if dev is not None else None


def reset_dynamo() -> None:
    """Drop Dynamo's compiled code caches."""
    importlib.import_module("torch._dynamo").reset()


# ------------------------------------------------------------------ spyre_shims.compat
# Version-normalised access to the Inductor internals vendors commonly touch, for the
# public ``spyre_shims.compat`` module. Renames are found by feature detection.

#: ``register_backend_for_device``'s optional arguments: stable keyword -> Inductor's.
BACKEND_OPTIONS: dict[str, str] = {
    "cpp_wrapper": "device_cpp_wrapper_codegen",
    "fx_wrapper": "device_fx_wrapper_codegen",
    "custom_pass": "device_custom_pass",
    "custom_config": "device_custom_config",
}

#: Stable sizevars operation -> its method names, newest first.
SIZEVARS_METHODS: dict[str, tuple[str, ...]] = {
    "size_hint": ("optimization_hint", "size_hint"),
    # 2.6/2.7 have neither or_throw name; size_hint without a fallback throws there.
    "size_hint_or_throw": ("guarding_hint_or_throw", "size_hint_or_throw", "size_hint"),
    "check_equals": ("check_equals", "guard_equals"),
    "guard_int": ("guard_int", "evaluate_static_shape"),
}


def _common(attr: str) -> Any:
    return resolve(f"compat.{attr}", f"torch._inductor.codegen.common:{attr}")


def _device_interface(attr: str) -> Any:
    return resolve(f"compat.{attr}", f"torch._dynamo.device_interface:{attr}")


def compat_register_backend(device: str, scheduling: Any, wrapper: Any, options: dict[str, Any]) -> None:
    """``register_backend_for_device`` with the non-None ``options`` (stable keywords)
    passed by Inductor's keyword; an option this release lacks raises."""
    fn = _common("register_backend_for_device")
    kwargs: dict[str, Any] = {}
    for stable, value in options.items():
        if value is None:
            continue
        internal = BACKEND_OPTIONS[stable]
        if not has_param(fn, internal):
            raise UnsupportedTorchError(
                f"register_backend_for_device({stable}=...)", str(installed()), WINDOW_TEXT,
                f"register_backend_for_device has no {internal} parameter in this release")
        kwargs[internal] = value
    fn(device, scheduling, wrapper, **kwargs)


def compat_register_op_overrides(device: str, overrides: Any) -> None:
    """``register_device_op_overrides``."""
    _common("register_device_op_overrides")(device, overrides)


def compat_register_interface(device: str, interface: Any) -> None:
    """``register_interface_for_device``."""
    _device_interface("register_interface_for_device")(device, interface)


def compat_get_interface(device: str) -> Any:
    """``get_interface_for_device``."""
    return _device_interface("get_interface_for_device")(device)


def current_sizevars() -> Any:
    """``V.graph.sizevars`` of the graph being lowered."""
    V = resolve("compat.sizevars", "torch._inductor.virtualized:V")
    try:
        return V.graph.sizevars
    except AttributeError:
        raise RuntimeError("no Inductor graph is being lowered here: pass sizevars= explicitly") from None


def sizevars_call(operation: str, sizevars: Any, *args: Any, **kwargs: Any) -> Any:
    """Call the stable sizevars ``operation`` by whichever name this release has."""
    sv = current_sizevars() if sizevars is None else sizevars
    for name in SIZEVARS_METHODS[operation]:
        method = getattr(sv, name, None)
        if method is not None:
            return method(*args, **kwargs)
    raise UnsupportedTorchError(f"compat.{operation}", str(installed()), WINDOW_TEXT,
                                f"{type(sv).__name__} has none of {', '.join(SIZEVARS_METHODS[operation])}")


def free_unbacked_symbols(node: Any) -> set[Any]:
    """Unbacked symbols ``node`` uses (2.8 renamed the method and added a flag)."""
    fn = getattr(node, "get_free_symbol_uses", None)
    if fn is not None:
        return set(fn(unbacked_only=True))
    fn = getattr(node, "get_unbacked_symbol_uses", None)
    if fn is not None:
        return set(fn())
    raise TypeError(f"{type(node).__name__} has neither get_free_symbol_uses nor get_unbacked_symbol_uses")


def config_patch(overrides: dict[str, Any], module: str = "torch._inductor.config", what: str = "Inductor") -> Any:
    """``torch._inductor.config.patch(overrides)`` (or another config ``module``'s, named
    ``what`` in errors), naming every unknown option first."""
    import difflib

    config = importlib.import_module(module)

    def known(key: str) -> bool:
        obj: Any = config
        try:
            for part in key.split("."):
                obj = getattr(obj, part)
        except AttributeError:
            return False
        return True

    unknown = [key for key in overrides if not known(key)]
    if unknown:
        names = list(config.get_config_copy())
        hints = [f"{key!r}" + (f" (did you mean {m[0]!r}?)" if (m := difflib.get_close_matches(key, names, 1)) else "")
                 for key in unknown]
        raise ValueError(f"unknown {what} config option(s) on torch {installed()}: {', '.join(hints)}")
    return config.patch(dict(overrides))


def load_lowerings() -> None:
    """Import Inductor's lowering table. Up to 2.11 its import makes fallbacks of
    ``sort``, ``sort.stable`` and ``topk`` and asserts that none of them has a
    decomposition, so a decomposition of those must be added after it."""
    importlib.import_module("torch._inductor.lowering")


def refresh_decompositions() -> None:
    """Drop cached copies of Inductor's decomposition table (some releases
    memoise the table with the random-op extras)."""
    mod = importlib.import_module("torch._inductor.decomposition")
    cached = getattr(mod, "fast_random_decomps", None)
    if hasattr(cached, "cache_clear"):
        cached.cache_clear()


def has_lowering(op: Any) -> bool:
    return op in importlib.import_module("torch._inductor.lowering").lowerings


def has_decomposition(op: Any) -> bool:
    return op in importlib.import_module("torch._inductor.decomposition").decompositions


def fallback_lowering(op: Any) -> Any:
    """Inductor's lowering that keeps ``op`` as an aten call."""
    return resolve("lowering.fallback", "torch._inductor.lowering:fallback_handler")(op, add_to_fallback_set=False)


def lowering_device_type(args: Any, kwargs: Any) -> str | None:
    """The device of the first IR tensor among lowering arguments."""
    from torch.utils._pytree import tree_flatten

    for x in tree_flatten((args, kwargs))[0]:
        dev = getattr(x, "get_device", None)
        if callable(dev):
            d = dev()
            if d is not None:
                return d.type
    return None


def compat_ceildiv(numer: Any, denom: Any) -> Any:
    """Inductor's ``ceildiv`` (positional: 2.8 renamed its first parameter)."""
    return resolve("compat.sizevars.ceildiv", "torch._inductor.utils:ceildiv")(numer, denom)


def compat_make_pointwise(fn: Any, **options: Any) -> Any:
    """``make_pointwise`` with its options by keyword (2.8 dropped one in the middle)."""
    return resolve("compat.lowering.make_pointwise", "torch._inductor.lowering:make_pointwise")(fn, **options)


def compat_fresh_cache(**kwargs: Any) -> Any:
    """``fresh_cache`` (2.8+) or ``fresh_inductor_cache`` (before)."""
    return resolve("compat.caches.fresh_cache", "torch._inductor.utils:fresh_cache",
                   "torch._inductor.utils:fresh_inductor_cache")(**kwargs)


#: Dynamo options renamed inside the window: stable spelling -> every spelling, newest first.
DYNAMO_RENAMES: dict[str, tuple[str, ...]] = {
    "recompile_limit": ("recompile_limit", "cache_size_limit"),
    "cache_size_limit": ("recompile_limit", "cache_size_limit"),
    "accumulated_recompile_limit": ("accumulated_recompile_limit", "accumulated_cache_size_limit"),
    "accumulated_cache_size_limit": ("accumulated_recompile_limit", "accumulated_cache_size_limit"),
}


def dynamo_config_patch(overrides: dict[str, Any]) -> Any:
    """``torch._dynamo.config.patch(overrides)``, renamed options mapped, unknown ones named first."""
    import difflib

    config = importlib.import_module("torch._dynamo.config")
    names = set(config.get_config_copy())
    patch: dict[str, Any] = {}
    unknown = []
    for key, value in overrides.items():
        spelling = next((n for n in DYNAMO_RENAMES.get(key, (key,)) if n in names), None)
        if spelling is None:
            unknown.append(key)
        else:
            patch[spelling] = value
    if unknown:
        hints = [f"{key!r}" + (f" (did you mean {m[0]!r}?)" if (m := difflib.get_close_matches(key, sorted(names), 1))
                               else "") for key in unknown]
        raise ValueError(f"unknown Dynamo config option(s) on torch {installed()}: {', '.join(hints)}")
    return config.patch(patch)
