"""Inductor-facing classes that carry a stable :class:`~spyre_shims.backend.Backend`.

``StableScheduling`` turns every node Inductor schedules for the device into a
:class:`~spyre_shims.kernel_ir.KernelGroup`; ``StableWrapper`` intercepts extern
matmuls as :class:`~spyre_shims.kernel_ir.ExternKernel`, announces host
fallbacks, and embeds each compiled kernel's payload in the generated program.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import pathlib
import secrets
import types
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import sympy

from .. import kernel_ir as kir
from .._registry import NAMESPACE, constant_arg_names, count, get_backend
from ..errors import PatchTargetError, UnsupportedKernelError
from ..index import as_expr
from ..kernel_ir import FusionCandidate
from . import capture
from . import inductor as ind
from .cachedir import ensure_private
from .complex_pass import realify_complex
from .patches import REGISTRY, Patch

if TYPE_CHECKING:  # annotations only: spyre_shims.backend installs this module, not the reverse
    from ..backend import Backend

_GRAPH_IDS = itertools.count()
#: Kernel names end up in Inductor's on-disk FX graph cache, so a cached graph
#: from another process brings the names it was compiled with: a per-process
#: token keeps them unique within this process (backends key executables and
#: reports by name).
_PROCESS_TOKEN = secrets.token_hex(3)


# ------------------------------------------------------------------ kernel emission

def _backend_for(device: str) -> Backend:
    backend = get_backend(device)
    if backend is None:
        raise RuntimeError(f"no stable-API backend registered for device {device!r}")
    return backend


def _kernel_ops(kernel: kir.Kernel) -> list[str]:
    if isinstance(kernel, kir.ExternKernel):
        return [kernel.op]
    return sorted({i.op for k in kernel.kernels for i in k.body})


def emit_kernel(wrapper: Any, device: str, kernel: kir.Kernel) -> None:
    """Compile ``kernel`` with the device's backend (or the host reference on
    decline) and write its definition and its call into ``wrapper``."""
    backend = _backend_for(device)
    state = _graph_state(wrapper, device)
    count("kernels_compiled")
    try:
        payload, kind = backend.compile(kernel), "device"
    except UnsupportedKernelError as exc:
        # Announced when the program loads (see runtime.graph_loaded), so a
        # program taken from Inductor's cache warns too.
        state["fallbacks"].append(f"{exc.what} in kernel {kernel.name} (ops: {', '.join(_kernel_ops(kernel))}): {exc}")
        payload, kind = kir.to_json(kernel), "reference"
    state["kernels"].append(kernel)
    envelope = json.dumps({
        "name": kernel.name, "kind": kind, "backend": backend.ref(), "args": list(kernel.args),
        "symbols": list(kernel.symbols), "payload": payload,
    })
    _root(wrapper).header.writeline(f"{kernel.name} = _shim_rt.load_kernel({device!r}, {envelope!r})")
    sym_args = "".join(f", {s}={s}" for s in kernel.symbols)
    wrapper.writeline(f"{kernel.name}({', '.join(kernel.args)}{sym_args})")


def _root(wrapper: Any) -> Any:
    while getattr(wrapper, "parent_wrapper", None) is not None:
        wrapper = wrapper.parent_wrapper
    return wrapper


def _graph_state(wrapper: Any, device: str) -> dict[str, Any]:
    # One state per graph: a subgraph (a nested compile region, a branch of cond)
    # is its own graph, called from its parent's code any number of times.
    state = getattr(wrapper, "_shim_state", None)
    if state is None:
        state = {"device": device, "kernels": [], "fallbacks": [], "ids": itertools.count(), "collective_buffers": set(),
                 "graph": f"graph{next(_GRAPH_IDS)}_{_PROCESS_TOKEN}", "calls_subgraphs": False}
        wrapper._shim_state = state
    return state


def _kernel_name(wrapper: Any, device: str) -> str:
    state = _graph_state(wrapper, device)
    return f"{device}_{state['graph']}_k{next(state['ids'])}"


def record_custom_kernel(wrapper: Any, device: str, node: Any, op: str) -> None:
    """Record a hand-written kernel call in the graph's Kernel IR."""
    inputs = []
    for inp in getattr(node, "inputs", ()):
        try:
            name, layout = ind.operand(inp)
        except TypeError:
            continue
        inputs.append(capture.buffer_spec(ind.real_name(name), layout, "input"))
    values = [v for v in getattr(node, "constant_args", ()) if isinstance(v, (bool, int, float))]
    names = constant_arg_names(op.split(".")[1])
    scalars = tuple((names[k] if k < len(names) else f"arg{k}", v) for k, v in enumerate(values))
    name = _kernel_name(wrapper, device)
    out = kir.BufferSpec(node.get_name(), inputs[0].dtype if inputs else "float32", (), ())
    _graph_state(wrapper, device)["kernels"].append(
        kir.ExternKernel(name, op.split(".")[1], tuple(inputs), out, tuple(b.name for b in inputs), scalars))


#: The functional collectives' namespace in the dispatcher.
_COLLECTIVES = "_c10d_functional."


def _collective_name(op: str) -> str | None:
    """``all_reduce_`` for ``_c10d_functional.all_reduce_.default`` (None: not a functional collective)."""
    return op[len(_COLLECTIVES):].split(".")[0] if op.startswith(_COLLECTIVES) else None


def _waits_on(node: Any) -> set[str]:
    names = set()
    for inp in getattr(node, "inputs", ()):
        try:
            names.add(ind.real_name(ind.operand(inp)[0]))
        except TypeError:
            return {"?"}
    return names or {"?"}


def capture_collective(wrapper: Any, device: str, node: Any, op: str) -> kir.ExternKernel | None:
    """Kernel IR of a functional collective of one tensor: an in-place one
    (``all_reduce_``, name ending in ``_``) has its buffer as input and output;
    another (``all_gather_into_tensor``...) its input and its own output buffer.
    Scalar arguments by schema name (``reduce_op``, ``group_size``, ``group_name``).
    None for a form the Kernel IR does not carry (several tensors, several
    outputs, a view): it stays a host call."""
    tensors = list(getattr(node, "inputs", ()))
    in_place = op.endswith("_")
    if len(tensors) != 1 or (in_place and getattr(node, "outputs", None)):
        return None
    try:
        name, layout = ind.operand(tensors[0])
        spec = capture.buffer_spec(ind.real_name(name), layout, "input")
        out = None if in_place else capture.buffer_spec(ind.real_name(node.get_name()), node.get_layout(), "output")
    except (TypeError, AttributeError, NotImplementedError):
        return None
    schema = getattr(getattr(node, "op_overload", None), "_schema", None)
    names = [a.name for a in schema.arguments if "Tensor" not in str(a.type)] if schema is not None else []
    values = list(getattr(node, "constant_args", ()))
    if len(names) != len(values) or not all(isinstance(v, (str, int, float, bool)) for v in values):
        return None
    if out is None:
        out = kir.BufferSpec(spec.name, spec.dtype, spec.size, spec.stride, spec.offset, spec.storage_numel, "inout")
    symbols = capture.symbols_of([e for b in (spec, out) for e in (*b.size, *b.stride, b.offset)])
    return kir.ExternKernel(_kernel_name(wrapper, device), op, (spec,), out, tuple(dict.fromkeys((spec.name, out.name))),
                            tuple(zip(names, (str(v) if isinstance(v, str) else v for v in values))), symbols)


def record_fallback(wrapper: Any, device: str, op: str) -> None:
    """Record an aten op that runs on the host inside compiled code."""
    _graph_state(wrapper, device)["fallbacks"].append(f"aten op {op}: no device kernel; it runs eagerly on the host")


# ------------------------------------------------------------------ IR construction

def _buffer_specs(kernels: list[kir.LoopKernel], internal: set[str]) -> tuple[list[kir.BufferSpec], list[str]]:
    reads: dict[str, None] = {}
    writes: dict[str, None] = {}
    for k in kernels:
        reads.update(dict.fromkeys(k.reads()))
        writes.update(dict.fromkeys(k.writes()))
    specs, args = [], []
    for name in dict.fromkeys([*reads, *writes]):
        if name in internal:
            role = "internal"
        elif name in writes:
            role = "inout" if name in reads else "output"
        else:
            role = "input"
        specs.append(capture.buffer_spec(name, ind.layout_of(name), role))
        if role != "internal":
            args.append(name)
    return specs, args


def capture_group(wrapper: Any, device: str, snodes: list[Any]) -> kir.KernelGroup:
    """Kernel IR of a (possibly fused) scheduler node; allocates its outputs."""
    names = {n.get_name() for n in snodes}
    internal: set[str] = set()
    if len(snodes) > 1:
        for n in snodes:
            for buf in ind.node_outputs(n):
                if ind.removable(buf, names):
                    ind.mark_removed(buf)
                    internal.add(buf)
    for n in snodes:
        n.mark_run()
    kernels = [capture.capture_loop_kernel(n, ind.dtype_of, ind.real_name) for n in snodes]
    # Buffers Inductor dropped for lack of users still need scratch space.
    written = {b for k in kernels for b in k.writes()}
    internal |= {b for b in written if ind.is_removed(b)}
    specs, args = _buffer_specs(kernels, internal)
    symbols = capture.symbols_of(capture.kernel_exprs(kernels, specs))
    return kir.KernelGroup(_kernel_name(wrapper, device), tuple(kernels), tuple(specs), tuple(args), symbols)


def capture_extern(wrapper: Any, device: str, node: Any, op: str) -> kir.ExternKernel:
    inputs = []
    for inp in node.inputs:
        name, layout = ind.operand(inp)
        inputs.append(capture.buffer_spec(ind.real_name(name), layout, "input"))
    out = capture.buffer_spec(ind.real_name(node.get_name()), node.get_layout(), "output")
    attrs = tuple(sorted((k, v) for k, v in (node.kwargs or {}).items() if isinstance(v, (int, float, bool))))
    args = tuple(dict.fromkeys([b.name for b in inputs] + [out.name]))
    symbols = capture.symbols_of([e for b in (*inputs, out) for e in (*b.size, *b.stride, b.offset)])
    return kir.ExternKernel(_kernel_name(wrapper, device), op, tuple(inputs), out, args, attrs, symbols)


# ------------------------------------------------------------------ Inductor classes

def _candidate(node: Any) -> FusionCandidate:
    numel, rnumel = ind.node_group(node)
    reads, writes = ind.node_io(node)
    return FusionCandidate(tuple(n.get_name() for n in node.get_nodes()), as_expr(numel),
                           as_expr(rnumel), frozenset(reads), frozenset(writes))


def _make_scheduling(device: str) -> type:
    Base = ind.get("BaseScheduling")
    backend_device = device
    takes_scheduler = ind.has_param(Base.__init__, "scheduler")

    class StableScheduling(Base):  # type: ignore[misc,valid-type]
        def __init__(self, scheduler: Any) -> None:
            if takes_scheduler:
                super().__init__(scheduler)
            else:
                super().__init__()
                self.scheduler = scheduler

        def get_backend_features(self, device: Any = None) -> Any:
            return ind.backend_features(_backend_for(backend_device).features)

        def group_fn(self, sizes: Any) -> Any:
            sv = ind.graph().sizevars
            return tuple(sv.simplify(sympy.Mul(*s)) for s in sizes)

        # A scan is a kernel of its own: its reduction dimension is scanned and
        # every point stored, which no fused loop nest of the Kernel IR says.
        def can_fuse_vertical(self, node1: Any, node2: Any) -> bool:
            if ind.is_scan(node1) or ind.is_scan(node2):
                return False
            return _backend_for(device).can_fuse(_candidate(node1), _candidate(node2), True)

        def can_fuse_horizontal(self, node1: Any, node2: Any) -> bool:
            if ind.is_scan(node1) or ind.is_scan(node2):
                return False
            return _backend_for(device).can_fuse(_candidate(node1), _candidate(node2), False)

        def codegen_node(self, node: Any) -> None:
            wrapper = ind.graph().wrapper_code
            group = capture_group(wrapper, device, list(node.get_nodes()))
            emit_kernel(wrapper, device, group)
            if self.scheduler is not None:
                self.scheduler.free_buffers()

        def codegen_template(self, *args: Any, **kwargs: Any) -> Any:
            raise NotImplementedError(f"{device}: template kernels are not supported")

        def codegen_sync(self) -> None:
            pass

        def flush(self) -> None:
            pass

        def ready_to_flush(self) -> bool:
            return False

    StableScheduling.__name__ = StableScheduling.__qualname__ = f"{device.capitalize()}Scheduling"
    return StableScheduling


def _make_wrapper(device: str) -> type:
    Base = ind.get("PythonWrapperCodegen")
    SubgraphBase = ind.get("SubgraphPythonWrapperCodegen")

    class DeviceCalls:
        """What every wrapper of a ``device`` graph does, the top graph's and each
        subgraph's (``torch.compiler.nested_compile_region``, ``cond``,
        ``while_loop``): matmul-family extern kernels become device kernels, host
        calls are recorded, and the graph is announced with its own outputs."""

        def generate_extern_kernel_out(self, *args: Any, **kwargs: Any) -> Any:
            node = ind.extern_out_node(args, kwargs)
            if node is not None and ind.node_device_type(node) == device:
                op = ind.extern_op_name(node)
                if op in _backend_for(device).extern_ops and getattr(node, "output_view", None) is None:
                    emit_kernel(self, device, capture_extern(self, device, node, op))
                    return None
                record_fallback(self, device, ind.fallback_op_name(node))
            return super().generate_extern_kernel_out(*args, **kwargs)  # type: ignore[misc]

        def _record_host_call(self, node: Any) -> bool:
            """Record a host call of the graph; True when it became a device kernel
            instead (a functional collective the backend runs), whose call is written."""
            # Before 2.8 generate_fallback_kernel goes through generate_extern_kernel_alloc:
            # record each node once.
            if ind.node_device_type(node) != device:
                return False
            if getattr(node, "_shim_recorded", False):
                return bool(getattr(node, "_shim_on_device", False))
            node._shim_recorded = True
            op = ind.fallback_op_name(node)
            if op.startswith(f"{NAMESPACE}."):
                record_custom_kernel(self, device, node, op)  # a hand-written kernel: runs on the device
                return False
            collective = _collective_name(op)
            state = _graph_state(self, device)
            if collective in _backend_for(device).collective_ops:
                kernel = capture_collective(self, device, node, collective)
                if kernel is not None:
                    if kernel.output.role == "output":
                        # the host call allocated its output; the device kernel writes into one made here
                        self.writeline(self.make_buffer_allocation(node))  # type: ignore[attr-defined]
                    emit_kernel(self, device, kernel)
                    state["collective_buffers"].update(kernel.args)
                    node._shim_on_device = True
                    return True
            if collective == "wait_tensor" and _waits_on(node) <= state["collective_buffers"]:
                return False  # the device kernel completed the collective: waiting moves no data
            record_fallback(self, device, op)
            return False

        def generate_extern_kernel_alloc(self, node: Any, *args: Any, **kwargs: Any) -> Any:
            if self._record_host_call(node):
                return None
            return super().generate_extern_kernel_alloc(node, *args, **kwargs)  # type: ignore[misc]

        def generate_fallback_kernel(self, node: Any, *args: Any, **kwargs: Any) -> Any:
            if self._record_host_call(node):
                return None
            return super().generate_fallback_kernel(node, *args, **kwargs)  # type: ignore[misc]

        def generate(self, *args: Any, **kwargs: Any) -> Any:
            state = getattr(self, "_shim_state", None)
            if state is not None:
                # What must reach memory: what the graph returns, and what is
                # written through a view of another buffer (read under its name).
                outputs = tuple(sorted({ind.real_name(n) for n in ind.output_names()} | ind.view_buffers()))
                meta = (("calls_subgraphs", True),) if state["calls_subgraphs"] else ()
                graph = kir.GraphIR(state["graph"], device, tuple(state["kernels"]), tuple(state["fallbacks"]),
                                    outputs=outputs, meta=meta)
                ref = _backend_for(device).ref()
                # A subgraph has no header of its own: its graph loads with the module,
                # after its kernels.
                _root(self).header.writeline(
                    f"_shim_rt.graph_loaded({device!r}, {ref!r}, {kir.to_json(graph)!r})")
            return super().generate(*args, **kwargs)  # type: ignore[misc]

    class StableSubgraphWrapper(DeviceCalls, SubgraphBase):  # type: ignore[misc,valid-type]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            # The graph calling this one runs its kernels between its own: nothing it
            # leaves in LX may be counted on across the call.
            _graph_state(self.parent_wrapper, device)["calls_subgraphs"] = True

    class StableWrapper(DeviceCalls, Base):  # type: ignore[misc,valid-type]
        @staticmethod
        def create(is_subgraph: bool, *args: Any, **kwargs: Any) -> Any:
            if is_subgraph:
                return StableSubgraphWrapper(*args, **kwargs)
            return StableWrapper()

        def write_header(self) -> None:
            super().write_header()
            self.header.writeline("from spyre_shims import runtime as _shim_rt")

    for cls, kind in ((StableWrapper, "WrapperCodegen"), (StableSubgraphWrapper, "SubgraphWrapperCodegen")):
        cls.__name__ = cls.__qualname__ = f"{device.capitalize()}{kind}"
    return StableWrapper


def _make_op_overrides() -> Any:
    Base = ind.get("DeviceOpOverrides")

    class HostOpOverrides(Base):  # type: ignore[misc,valid-type]
        def import_get_raw_stream_as(self, name: str) -> str:
            return f"def {name}(device_index): return 0"

        def set_device(self, device_idx: int) -> str:
            return "pass"

        def synchronize(self) -> str:
            return "pass"

        def device_guard(self, device_idx: int) -> str:
            return "contextlib.nullcontext()"

    return HostOpOverrides()


def _make_interface(backend: Backend) -> type:
    Base = ind.get("DeviceInterface")
    p = backend.properties()
    props = types.SimpleNamespace(name=p.name, multi_processor_count=p.cores, total_memory=p.memory_bytes,
                                  major=0, minor=0, max_threads_per_block=1024, warp_size=1)

    @contextmanager
    def _device_ctx(device: Any = None) -> Any:
        yield

    class Worker:
        @staticmethod
        def set_device(device: int) -> None:
            pass

        @staticmethod
        def current_device() -> int:
            return 0

        @staticmethod
        def get_device_properties(device: Any = None) -> Any:
            return props

    class HostDeviceInterface(Base):  # type: ignore[misc,valid-type]
        device = staticmethod(_device_ctx)  # type: ignore[assignment]

    HostDeviceInterface.Worker = Worker  # type: ignore[misc]
    for name, fn in {
        "current_device": lambda: 0,
        "set_device": lambda device: None,
        "maybe_exchange_device": lambda device: 0,
        "exchange_device": lambda device: 0,
        "device_count": lambda: 1,
        "is_available": lambda: True,
        "synchronize": lambda device=None: None,
        "get_raw_stream": lambda device_idx: 0,
        "get_compute_capability": lambda device=None: 0,
        "is_bf16_supported": lambda including_emulation=False: p.bf16,
        "get_device_properties": lambda device=None: props,
        "memory_allocated": lambda device=None: 0,
    }.items():
        setattr(HostDeviceInterface, name, staticmethod(fn))
    return HostDeviceInterface


#: The stable API's own sources (this package's parent): part of every cache key.
_SHIMS_DIR = pathlib.Path(__file__).resolve().parents[1]


def _identity_key(backend: Backend) -> str:
    src = b"".join(p.read_bytes() for p in sorted(_SHIMS_DIR.rglob("*.py")))
    # Registered decompositions, fallbacks and kernels change what compiles.
    active = ",".join(sorted(p["name"] for p in REGISTRY.report() if p["active"]))
    return hashlib.sha256(src + backend.cache_key().encode() + active.encode()).hexdigest()


def _make_cache_pass(backend: Backend) -> Any:
    """A no-op per-device graph pass whose uuid puts the backend's identity in
    Inductor's FX graph cache key (so a changed backend never reuses stale code)."""
    Base = ind.custom_pass_base()
    if Base is None:
        return None

    class BackendIdentity(Base):  # type: ignore[misc,valid-type]
        def __reduce__(self) -> Any:
            # Older releases pickle config values into the FX-cache key: a pass
            # pickles as its identity.
            return (str, (repr(self.uuid()),))

        def __call__(self, gm: Any) -> None:
            if "complex_as_real" in backend.features and realify_complex(gm.graph):
                gm.recompile()

        def uuid(self) -> str:
            return _identity_key(backend)

    return BackendIdentity()


def install(backend: Backend) -> None:
    """Register Inductor scheduling, wrapper, op overrides and device interface
    (after making Inductor's cache folder, where the generated code lands, private)."""
    ensure_private()
    device = backend.device
    scheduling = _make_scheduling(device)
    wrapper = _make_wrapper(device)
    cache_pass = _make_cache_pass(backend)
    ind.register_backend(device, scheduling, wrapper, custom_pass=cache_pass)
    if cache_pass is None or not ind.supports_custom_pass():
        _key_cache_by_post_grad_pass(backend)
    if "scan" in backend.features:
        _unsplit_scans(device)
    _numeric_identity()
    ind.register_op_overrides(device, _make_op_overrides())
    ind.get("register_interface_for_device")(device, _make_interface(backend))


def _key_cache_by_post_grad_pass(backend: Backend) -> None:
    """Before 2.8 there is no per-device pass: chain a no-op post-grad pass into
    Inductor's config (keeping any user pass) so the backend's identity still
    reaches the FX graph cache key. Held while the backend is registered."""
    Base = ind.resolve("backend.cache_key", "torch._inductor.custom_graph_pass:CustomGraphPass")

    def make(original: Any, fired: Any) -> Any:
        class KeyedPass(Base):  # type: ignore[misc,valid-type]
            def __reduce__(self) -> Any:
                # Older releases pickle config values into the FX-cache key: a pass
                # pickles as its identity.
                return (str, (repr(self.uuid()),))

            def __call__(self, graph: Any) -> None:
                fired()
                if original is not None:
                    original(graph)
                if "complex_as_real" in backend.features:
                    realify_complex(graph)

            def uuid(self) -> Any:
                inner = original.uuid() if original is not None and hasattr(original, "uuid") else None
                return (_identity_key(backend), inner)

        return KeyedPass()

    name = f"cache-key:{backend.device}"
    REGISTRY.register(Patch(name, "torch._inductor.config:post_grad_custom_post_pass", make,
                            "no per-device custom pass on this release: key Inductor's FX graph cache by the backend",
                            allow_none=True))
    REGISTRY.apply(name)


def _unsplit_scans(device: str) -> None:
    """Inductor cuts a long scan with few rows into a split scan, a Triton
    kernel form; a two-component scan (cummax) it cannot split falls back to
    aten. A stable backend receives every scan whole and divides it itself:
    for its device the split count is 1. Held while the backend is registered;
    a release without the hook keeps Inductor's choice."""
    def make(original: Any, fired: Any) -> Any:
        def num_splits(cls: Any, *args: Any, **kwargs: Any) -> Any:
            hint, splits = original(*args, **kwargs)
            where = kwargs["device"] if "device" in kwargs else args[0] if args else None
            if getattr(where, "type", None) == device and splits != 1:
                fired()
                return hint, 1
            return hint, splits
        return classmethod(num_splits)

    name = f"unsplit-scans:{device}"
    try:
        REGISTRY.register(Patch(name, "torch._inductor.ir:Scan.num_splits", make,
                                f"{device} divides scans itself: Inductor must not split them", params=("device",)))
    except PatchTargetError:
        return
    REGISTRY.apply(name)


def _numeric_identity() -> None:
    """Inductor's cat lowering wraps each input's shifted index in
    ``Identity`` (no expansion); when loop simplification substitutes 0 for the
    index, ``Identity(0)`` stays a non-comparable function and a ``Max`` or
    ``Min`` around it raises "The argument '-((0))' is not comparable" (a cat
    feeding a clamped gather: Inkling-2's relative positions). The identity of
    a number is the number. Held while a backend is registered; a release
    without ``Identity`` needs nothing."""
    def make(original: Any, fired: Any) -> Any:
        def eval(cls: Any, arg: Any) -> Any:
            if getattr(arg, "is_Number", False):
                fired()
                return arg
            return None
        return classmethod(eval)

    name = "numeric-identity"
    try:
        REGISTRY.register(Patch(name, "torch.utils._sympy.functions:Identity.eval", make,
                                "Identity of a number folds to the number (a non-comparable Identity(0) breaks Max)"))
    except PatchTargetError:
        return
    REGISTRY.apply(name)
