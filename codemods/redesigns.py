"""Release redesigns: a registry or protocol whose meaning changed in a release, with
what changed and what a backend does about it.

Unlike a rename, a redesign cannot be applied mechanically; ``upgrade`` flags every
use of the registry or protocol (one note per function, class or module, like the
advisories, whose matching it shares) and lists the sites in its report. Each record
was read in the torch release sources named in ``confirmed`` (release, file:line,
symbol); it applies to an upgrade ``X -> Y`` when ``X < release <= Y``.
"""

from __future__ import annotations

from .advisories import ADVISORIES, Advisory
from .releases import Release
from .releases import parse_release as _r

__all__ = ["REDESIGNS", "select_changes"]

_I = "torch._inductor"
_D = "torch._dynamo"

_C = f"{_I}.config"

REDESIGNS: tuple[Advisory, ...] = (
    Advisory(
        id="ops-handler-default", release=_r("2.7"), kind="redesign",
        registry="the ops handler protocol (ops_handler.DefaultHandler, WrapperHandler, MockHandler, NoopHandler)",
        base=f"{_I}.ops_handler.DefaultHandler", base_methods=("__getattr__",),
        note="Inductor's handlers derive from DefaultHandler, which defines a method for every op that calls "
             "self._default(name, args, kwargs); an op is found on the class, so a subclass's __getattr__ is no "
             "longer consulted for it (DefaultHandler.__getattr__ is only reached by ops missing from the schema, "
             "with a warning)",
        action="move the interception from __getattr__ to _default(self, name, args, kwargs) and return "
               "super()._default(name, args, kwargs) for ops it does not handle",
        confirmed="2.6.0 torch/_inductor/ops_handler.py:936 class WrapperHandler(Generic[T]) forwarding in "
                  "__getattr__ (:940); 2.7.1 same file:753 class DefaultHandler(OpsHandler[Any]) with _default "
                  "(:754) and generated op methods (_init_cls), :770 __getattr__ warns 'undefined OpHandler', "
                  ":1036 class WrapperHandler(DefaultHandler) forwarding in _default (:1040)",
    ),
    Advisory(
        id="lowering-registration", release=_r("2.12"), kind="redesign",
        registry="the lowering table (lowering.lowerings, register_lowering, make_fallback)",
        qualnames=(f"{_I}.lowering.lowerings", f"{_I}.lowering.register_lowering", f"{_I}.lowering.make_fallback",
                   f"{_I}.lowering.fallback_handler"),
        note="GraphLowering.call_function first tries a new user_lowerings table (filled by "
             "register_custom_op_autotuning), and make_fallback takes get_decomp_fn: Inductor calls it as "
             "make_fallback(op, ..., get_decomp_fn=graph.get_decomp_fn) and checks the compile's decomposition "
             "table, not the global one",
        action="a replacement or copy of make_fallback must accept get_decomp_fn=None and check "
               "get_decomp_fn() when given; a lowering registered here is skipped for an op that has a user lowering",
        confirmed="2.11.0 torch/_inductor/lowering.py:2306 def make_fallback(op, layout_constraint=None, warn=True, "
                  "override_decomp=False); 2.12.0 same file:117 user_lowerings, :2506 make_fallback(..., "
                  "get_decomp_fn=None) with check_decomps = get_decomp_fn() (:2513); 2.12.0 torch/_inductor/graph.py:1336 "
                  "make_fallback(target, ..., get_decomp_fn=self.get_decomp_fn), :1437 user_lowerings tried first; "
                  "2.12.0 torch/_inductor/kernel/custom_op.py:1317 user_lowerings[op_overload] = lowering_fn",
    ),
    Advisory(
        id="fx-graph-cache-key", release=_r("2.12"), kind="redesign",
        registry="the FX graph cache key (codecache.FxGraphHashDetails, compiled_fx_graph_hash)",
        qualnames=(f"{_I}.codecache.FxGraphHashDetails", f"{_I}.codecache.compiled_fx_graph_hash",
                   f"{_I}.codecache.FxGraphCache"),
        note="the key's details changed: compile_region_name joins graph_id in EXCLUDED_KWARGS, example inputs of "
             "opaque reference types are hashed as placeholders by position, and a graph's cudagraph annotation "
             "joins the key",
        action="if the backend extends the key (a FxGraphHashDetails subclass, a patched compiled_fx_graph_hash) "
               "or reads its fields, re-check what it adds against the new fields; state that changes the "
               "generated code belongs in a config or a CustomGraphPass.uuid(), which stay in the key",
        confirmed="2.11.0 torch/_inductor/codecache.py:791 EXCLUDED_KWARGS = ['graph_id'], example_inputs kept as "
                  "given; 2.12.0 same file:877 EXCLUDED_KWARGS = ['graph_id', 'compile_region_name'], :893 "
                  "is_opaque_reference_type(type(inp)) -> HashableOpaqueValue, :1000 gm.meta cudagraph_annotation "
                  "(class FxGraphHashDetails :868, compiled_fx_graph_hash :1112)",
    ),
)


_B = f"{_I}.runtime.benchmarking"

_REDESIGNS_2_13 = (
    Advisory(
        id="gpu-benchmark-device-types", release=_r("2.13"), kind="redesign",
        registry="Inductor's GPU benchmarker (runtime.benchmarking: benchmarker, InductorBenchmarker, "
                 "GPU_BENCHMARK_DEVICE_TYPES)",
        qualnames=(f"{_D}.device_interface.register_interface_for_device",
                   f"{_I}.codegen.common.register_backend_for_device", f"{_B}.benchmarker",
                   f"{_B}.Benchmarker", f"{_B}.TritonBenchmarker", f"{_B}.InductorBenchmarker",
                   f"{_B}.register_benchmarker"),
        note="benchmark_gpu, its timing events and the L2 cache size go through the DeviceInterface of the "
             "benchmarked device type, by default the one available among runtime.benchmarking."
             "GPU_BENCHMARK_DEVICE_TYPES ('cuda', 'xpu', 'mtia'); 2.12 timed with torch.cuda only",
        action="add the device type to GPU_BENCHMARK_DEVICE_TYPES where the device and its interface are "
               "registered, "
               "so autotuning times this device and not CUDA; patches that made the CUDA-only benchmarker time "
               "the device are no longer needed",
        confirmed="2.12.1 torch/_inductor/runtime/benchmarking.py:398 class InductorBenchmarker, :402 "
                  "torch.cuda.current_device(), :412 torch.cuda.Event; 2.13.0 same file:22 "
                  "GPU_BENCHMARK_DEVICE_TYPES = ('cuda', 'xpu', 'mtia'), :32 _get_default_gpu_device_type, :553 "
                  "get_interface_for_device(device_type) in InductorBenchmarker.get_device_cache_size",
    ),
    Advisory(
        id="custom-graph-pass-lists", release=_r("2.13"), kind="redesign",
        registry="the custom FX pass hooks (config.pre_grad_custom_pass, post_grad_custom_pre_pass, "
                 "post_grad_custom_post_pass, joint_custom_pre_pass, joint_custom_post_pass)",
        qualnames=tuple(f"{_C}.{name}" for name in (
            "pre_grad_custom_pass", "post_grad_custom_pre_pass", "post_grad_custom_post_pass",
            "joint_custom_pre_pass", "joint_custom_post_pass")),
        note="each hook takes a list or tuple of passes as well as one (get_custom_graph_passes runs them in "
             "order, and the FX graph cache checks each is a CustomGraphPass with a uuid): a value read back may "
             "be a list, so code that chains the previous value by calling it breaks",
        action="append your pass to the hook's list (wrap an existing single pass into one) instead of "
               "replacing or calling the previous value; give each a uuid() so cached graphs stay correct",
        confirmed="2.12.1 torch/_inductor/custom_graph_pass.py:105 CustomGraphPassType = CustomGraphPass | "
                  "Callable | None, torch/_inductor/fx_passes/post_grad.py:140 calls config.post_grad_custom_pre_pass "
                  "directly; 2.13.0 torch/_inductor/custom_graph_pass.py:127 CustomGraphPassType adds list and "
                  "tuple, :140 get_custom_graph_passes, torch/_inductor/fx_passes/post_grad.py:167 and "
                  "torch/_inductor/codecache.py:1074 iterate over it",
    ),
)

REDESIGNS = REDESIGNS + _REDESIGNS_2_13


_DEPS = (
    Advisory(
        id="dep-free-symbol-uses", release=_r("2.9"), kind="redesign",
        registry="the dependency classes (dependencies.Dep, MemoryDep, StarDep, WeakDep)",
        base=f"{_I}.dependencies.Dep", requires=("get_free_symbol_uses",),
        note="Dep gained the abstract method get_free_symbol_uses(unbacked_only=False) (the scheduler collects "
             "a node's size symbols through it): a subclass without it can no longer be instantiated",
        action="implement get_free_symbol_uses(self, unbacked_only=False) returning the OrderedSet of sympy "
               "symbols the dependency's index and size use (free_unbacked_symbols when unbacked_only)",
        confirmed="2.8.0 torch/_inductor/dependencies.py:37 class Dep(abc.ABC) abstract: rename, get_numel, "
                  "numbytes_hint, has_unbacked_symbols, is_contiguous; 2.9.1 same file:42 abstract "
                  "get_free_symbol_uses(self, unbacked_only=False)",
    ),
    Advisory(
        id="dep-numel-hint", release=_r("2.10"), kind="redesign",
        registry="the dependency classes (dependencies.Dep, MemoryDep, StarDep, WeakDep)",
        base=f"{_I}.dependencies.Dep", requires=("numel_hint",),
        note="Dep gained the abstract method numel_hint() (Scheduler.dep_size_hint(dep, count_bytes) sizes "
             "fusion scores in elements through it): a subclass without it can no longer be instantiated",
        action="implement numel_hint(self) -> int: the element count as a size hint, 0 when unknown "
               "(MemoryDep uses sizevars.size_hint(self.get_numel(), fallback=0))",
        confirmed="2.9.1 torch/_inductor/dependencies.py:37 class Dep(abc.ABC) without numel_hint, "
                  "scheduler.py:4443 dep_size_hint(self, dep); 2.10.0 dependencies.py:60 abstract numel_hint, "
                  ":267 MemoryDep.numel_hint, scheduler.py:5263 dep_size_hint(self, dep, count_bytes=True)",
    ),
)

REDESIGNS = REDESIGNS + _DEPS


def select_changes(source: str | Release, target: str | Release) -> tuple[Advisory, ...]:
    """Advisories and redesigns for an upgrade from ``source`` to ``target``, oldest first."""
    src, dst = _r(source), _r(target)
    return tuple(sorted((a for a in (*ADVISORIES, *REDESIGNS) if a.applies(src, dst)), key=lambda a: a.release))
