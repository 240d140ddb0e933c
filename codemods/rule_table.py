"""The upgrade rules, as data, keyed by the release that introduced the new spelling.

Every entry was confirmed against the wheels of the releases it names (latest patch
of each minor, extracted by ``nox -s surface`` under ``<torch-src>/<version>/``); ``confirmed`` says where.
Add a rule by appending an entry: the transform, the pre-filter, the docs table and
the test-coverage check all read this table.
"""

from __future__ import annotations

from .releases import parse_release as _r
from .rules import (Callee, DropClassKeyword, KeywordRename, MembersMove, MethodRename, MethodToCall, ModuleMove, Rule,
                    SignatureChange, SubclassCheck, SymbolMove)

__all__ = ["RULES", "rule_by_id"]

_I = "torch._inductor"

RULES: tuple[Rule, ...] = (
    # ---- 2.5 ------------------------------------------------------------------
    SymbolMove(
        id="loop-body-module", since=_r("2.5"),
        old=f"{_I}.ir.LoopBody", new=f"{_I}.loop_body.LoopBody", reexported=True,
        note="LoopBody moved out of ir.py (ir still re-exports it through 2.15; loop_body is canonical)",
        confirmed="2.4.1 torch/_inductor/ir.py:7944 class LoopBody; 2.5.1 torch/_inductor/loop_body.py:65; re-export in ir.py 2.5.1-2.15.0",
    ),
    MembersMove(
        id="loop-body-helpers-module", since=_r("2.5"),
        old_module=f"{_I}.ir", new_module=f"{_I}.loop_body",
        names=("LoopBodyBlock", "InterpreterShim"),
        note="LoopBody's helper classes moved with it and are no longer in ir",
        confirmed="2.4.1 torch/_inductor/ir.py:7918,8043; 2.5.1 torch/_inductor/loop_body.py:22,407",
    ),
    MembersMove(
        id="vec-isa-module", since=_r("2.5"),
        old_module=f"{_I}.codecache", new_module=f"{_I}.cpu_vec_isa",
        names=("VecISA", "VecNEON", "VecAVX512", "VecAVX2", "VecZVECTOR", "InvalidVecISA",
               "x86_isa_checker", "valid_vec_isa_list", "pick_vec_isa"),
        note="CPU vector-ISA detection moved from codecache to cpu_vec_isa",
        confirmed="2.4.1 torch/_inductor/codecache.py:1507 pick_vec_isa; 2.5.1 torch/_inductor/cpu_vec_isa.py:33-356",
    ),
    MembersMove(
        id="cpp-builder-module", since=_r("2.5"),
        old_module=f"{_I}.codecache", new_module=f"{_I}.cpp_builder",
        names=("cpp_compiler_search", "install_gcc_via_conda", "is_gcc", "is_clang",
               "is_apple_clang", "is_conda_llvm_openmp_installed", "homebrew_libomp"),
        note="C++ toolchain probing moved from codecache to cpp_builder",
        confirmed="2.5.1 torch/_inductor/cpp_builder.py:69-818 (absent from 2.5.1 codecache.py)",
    ),
    MembersMove(
        id="cpp-opt-ctx-module", since=_r("2.5"),
        old_module=f"{_I}.codegen.cpp", new_module=f"{_I}.codegen.cpp_utils",
        names=("get_opt_ctx", "get_current_node_opt_ctx"),
        note="OptimizationContext accessors moved to codegen.cpp_utils",
        confirmed="2.5.1 torch/_inductor/codegen/cpp_utils.py:134,138",
    ),
    # ---- 2.6 ------------------------------------------------------------------
    SymbolMove(
        id="python-wrapper-codegen", since=_r("2.6"),
        old=f"{_I}.codegen.wrapper.WrapperCodeGen", new=f"{_I}.codegen.wrapper.PythonWrapperCodegen",
        note="WrapperCodeGen renamed to PythonWrapperCodegen, no alias left behind",
        confirmed="2.5.1 torch/_inductor/codegen/wrapper.py:458 class WrapperCodeGen; 2.6.0 same file:619 class PythonWrapperCodegen",
    ),
    SymbolMove(
        id="cpp-wrapper-gpu", since=_r("2.6"),
        old=f"{_I}.codegen.cpp_wrapper_cuda.CppWrapperCuda", new=f"{_I}.codegen.cpp_wrapper_gpu.CppWrapperGpu",
        note="the C++ GPU wrapper became device-generic: module cpp_wrapper_cuda -> cpp_wrapper_gpu",
        confirmed="2.5.1 torch/_inductor/codegen/cpp_wrapper_cuda.py:162; 2.6.0 torch/_inductor/codegen/cpp_wrapper_gpu.py:181",
    ),
    SymbolMove(
        id="compiled-fx-graph-module", since=_r("2.6"),
        old=f"{_I}.codecache.CompiledFxGraph", new=f"{_I}.output_code.CompiledFxGraph", reexported=True,
        note="CompiledFxGraph moved to output_code (codecache still imports it through 2.15)",
        confirmed="2.6.0 torch/_inductor/output_code.py:304 (codecache.py only imports it); API index 2.6.0-2.15.0",
    ),
    SymbolMove(
        id="debug-triton-code-module", since=_r("2.6"),
        old=f"{_I}.scheduler.debug_triton_code", new=f"{_I}.codegen.triton.debug_triton_code",
        note="debug_triton_code moved from the scheduler to codegen.triton",
        confirmed="2.6.0 torch/_inductor/codegen/triton.py:3880 (absent from 2.6.0 scheduler.py)",
    ),
    DropClassKeyword(
        id="device-interface-metaclass", since=_r("2.6"),
        keyword="metaclass", value="torch._dynamo.device_interface.DeviceInterfaceMeta",
        note="DeviceInterfaceMeta was removed; DeviceInterface is a plain class",
        confirmed="2.5.1 torch/_dynamo/device_interface.py:22 class DeviceInterfaceMeta; 2.6.0 same file:22 class DeviceInterface: (no metaclass)",
    ),
    SubclassCheck(
        id="wrapper-create-factory", since=_r("2.6"),
        base=f"{_I}.codegen.wrapper.WrapperCodeGen", required_method="create",
        note="2.6: a PythonWrapperCodegen subclass must override the static create(is_subgraph, subgraph_name, parent_wrapper, ...) factory, or Inductor instantiates the base class",
        confirmed="2.6.0 torch/_inductor/codegen/wrapper.py:705 @staticmethod create",
    ),
    # ---- 2.7 ------------------------------------------------------------------
    SignatureChange(
        id="generate-kernel-call-keywords", since=_r("2.7"),
        callee=Callee(method="generate_kernel_call"),
        history=(
            (_r("2.4"), ("name", "call_args", "grid", "device_index", "cuda", "triton", "arg_types",
                         "grid_fn", "triton_meta")),
            (_r("2.5"), ("kernel_name", "call_args", "grid", "device_index", "cuda", "triton", "arg_types",
                         "raw_args", "grid_fn", "triton_meta", "autotune_configs", "grid_extra_kwargs")),
            (_r("2.6"), ("kernel_name", "call_args", "grid", "device_index", "gpu", "triton", "arg_types",
                         "raw_args", "grid_fn", "triton_meta", "autotune_configs", "grid_extra_kwargs")),
        ),
        keep_positional=2,
        removed=("grid", "device_index", "cuda", "gpu", "grid_fn", "autotune_configs", "grid_extra_kwargs"),
        note="generate_kernel_call is keyword-only after call_args; grid/device_index/gpu are gone (pass device=)",
        confirmed="2.4.1 torch/_inductor/codegen/wrapper.py:1366; 2.5.1 same file:1640; 2.6.0 same file:1925; "
                  "2.7.1 same file:2127 (kernel_name, call_args, *, device=None, ...)",
    ),
    # ---- 2.8 ------------------------------------------------------------------
    MethodToCall(
        id="free-symbol-uses", since=_r("2.8"),
        method="get_unbacked_symbol_uses", new="get_free_symbol_uses",
        add_keywords=(("unbacked_only", "True"),),
        note="get_unbacked_symbol_uses() became get_free_symbol_uses(unbacked_only=True); overrides must take unbacked_only",
        confirmed="2.7.1 torch/_inductor/ir.py:680; 2.8.0 same file:735 def get_free_symbol_uses(self, unbacked_only=False)",
    ),
    # ---- 2.9 ------------------------------------------------------------------
    SignatureChange(
        id="register-backend-keywords", since=_r("2.9"),
        callee=Callee(qualname=f"{_I}.codegen.common.register_backend_for_device"),
        history=(
            (_r("2.4"), ("device", "device_scheduling", "device_wrapper_codegen", "device_cpp_wrapper_codegen")),
            (_r("2.8"), ("device", "device_scheduling", "device_wrapper_codegen", "device_cpp_wrapper_codegen",
                         "device_custom_pass")),
        ),
        keep_positional=3,
        note="device_fx_wrapper_codegen was inserted before device_custom_pass: the optional arguments "
             "(4th onward) are passed by keyword, named after the release the code was written for",
        confirmed="2.4.1 torch/_inductor/codegen/common.py:130; 2.8.0 same file:393; 2.9.1 same file:401",
    ),
    MethodRename(
        id="sizevars-check-equals", since=_r("2.9"),
        method="guard_equals", new="check_equals", new_if_value_used="check_equals_and_simplify",
        receiver="sizevars",
        note="guard_equals returned left; check_equals returns None, check_equals_and_simplify returns left",
        confirmed="2.8.0 torch/_inductor/sizevars.py:387; 2.9.1 same file:428,436",
    ),
    MethodRename(
        id="sizevars-check-leq", since=_r("2.9"),
        method="guard_leq", new="check_leq", receiver="sizevars",
        note="sizevars guard_leq renamed check_leq",
        confirmed="2.8.0 torch/_inductor/sizevars.py:403; 2.9.1 same file:444",
    ),
    MethodRename(
        id="sizevars-check-lt", since=_r("2.9"),
        method="guard_lt", new="check_lt", receiver="sizevars",
        note="sizevars guard_lt renamed check_lt",
        confirmed="2.8.0 torch/_inductor/sizevars.py:406; 2.9.1 same file:447",
    ),
    MethodRename(
        id="sizevars-guard-int", since=_r("2.9"),
        method="evaluate_static_shape", new="guard_int", receiver="sizevars",
        note="sizevars evaluate_static_shape renamed guard_int",
        confirmed="2.8.0 torch/_inductor/sizevars.py:501; 2.9.1 same file:522",
    ),
    MethodRename(
        id="sizevars-guard-int-seq", since=_r("2.9"),
        method="evaluate_static_shapes", new="guard_int_seq", receiver="sizevars",
        note="sizevars evaluate_static_shapes renamed guard_int_seq",
        confirmed="2.8.0 torch/_inductor/sizevars.py:508; 2.9.1 same file:535",
    ),
    MembersMove(
        id="template-heuristics-triton", since=_r("2.9"),
        old_module=f"{_I}.template_heuristics", new_module=f"{_I}.template_heuristics.triton",
        names=("BaseConfig", "GemmConfig", "FlexConfig", "FlexDecodeConfig", "ROCmGemmConfig",
               "ROCmConvConfig", "ROCmFlexConfig", "ROCmFlexDecodeConfig", "BaseHeuristicSingleton",
               "BaseConfigHeuristic", "CPUConfigHeuristic", "CUDAConfigHeuristic",
               "ROCmConfigHeuristic", "XPUConfigHeuristic"),
        note="template_heuristics.py became a package; the Triton config heuristics live in template_heuristics.triton",
        confirmed="2.8.0 torch/_inductor/template_heuristics.py; 2.9.1 torch/_inductor/template_heuristics/triton.py (package __init__ does not re-export them)",
    ),
    # ---- 2.11 -----------------------------------------------------------------
    MethodRename(
        id="sizevars-backed-var-to-val", since=_r("2.11"),
        method="var_to_val", new="backed_var_to_val", receiver="sizevars",
        note="SizeVarAllocator.var_to_val (the shape env's hints) renamed backed_var_to_val",
        confirmed="2.10.0 torch/_inductor/sizevars.py:79 self.var_to_val = self.shape_env.var_to_val; "
                  "2.11.0 same file:83 self.backed_var_to_val = self.shape_env.backed_var_to_val (no var_to_val)",
    ),
    MethodRename(
        id="sizevars-optimization-hint", since=_r("2.11"), old_removed=_r("2.12"),
        method="size_hint", new="optimization_hint", receiver="sizevars",
        new_without_keyword=("fallback", "size_hint_or_throw"),
        note="size_hint split in two (old name removed in 2.12): with fallback= it is optimization_hint; "
             "without, it raised on unbacked symbols exactly as size_hint_or_throw (2.12: guarding_hint_or_throw)",
        confirmed="2.11.0 torch/_inductor/sizevars.py:694 optimization_hint; :622 size_hint(expr, *, fallback=None) "
                  "is int(symbolic_hint(expr)) without fallback, :656 size_hint_or_throw the same; "
                  "2.12.1 sizevars.py has no size_hint",
    ),
    MethodRename(
        id="sizevars-optimization-hints", since=_r("2.11"), old_removed=_r("2.12"),
        method="size_hints", new="optimization_hints", receiver="sizevars",
        new_without_keyword=("fallback", "size_hints_or_throw"),
        note="size_hints split in two (old name removed in 2.12): with fallback= it is optimization_hints; "
             "without, it is size_hints_or_throw (2.12: guarding_hints_or_throw)",
        confirmed="2.11.0 torch/_inductor/sizevars.py:771 optimization_hints; :831 size_hints maps size_hint, "
                  ":845 size_hints_or_throw maps size_hint_or_throw; 2.12.1 sizevars.py has no size_hints",
    ),
    SymbolMove(
        id="static-triton-launcher", since=_r("2.11"),
        old=f"{_I}.runtime.static_cuda_launcher.StaticallyLaunchedCudaKernel",
        new=f"{_I}.runtime.static_triton_launcher.StaticallyLaunchedCudaKernel",
        note="the static launcher became device-generic: module static_cuda_launcher -> static_triton_launcher",
        confirmed="2.10.0 torch/_inductor/runtime/static_cuda_launcher.py:10; 2.11.0 torch/_inductor/runtime/static_triton_launcher.py:304",
    ),
    # ---- 2.12 -----------------------------------------------------------------
    MethodRename(
        id="sizevars-guarding-hint", since=_r("2.12"),
        method="size_hint_or_throw", new="guarding_hint_or_throw", receiver="sizevars",
        note="size_hint_or_throw renamed guarding_hint_or_throw",
        confirmed="2.11.0 torch/_inductor/sizevars.py:656 size_hint_or_throw; 2.12.1 sizevars.py guarding_hint_or_throw only",
    ),
    MethodRename(
        id="sizevars-guarding-hints", since=_r("2.12"),
        method="size_hints_or_throw", new="guarding_hints_or_throw", receiver="sizevars",
        note="size_hints_or_throw renamed guarding_hints_or_throw",
        confirmed="2.11.0 torch/_inductor/sizevars.py size_hints_or_throw; 2.12.1 sizevars.py guarding_hints_or_throw only",
    ),
    # ---- 2.13 -----------------------------------------------------------------
    MembersMove(
        id="stride-at-sizevars", since=_r("2.13"),
        old_module=f"{_I}.codegen.cpp", new_module=f"{_I}.sizevars",
        names=("stride_at", "simplify_index_in_vec_range"),
        note="index-stride helpers moved from codegen.cpp to sizevars",
        confirmed="2.12.1 torch/_inductor/codegen/cpp.py; 2.13.0 torch/_inductor/sizevars.py:122,134",
    ),
    # ---- 2.14 -----------------------------------------------------------------
    MembersMove(
        id="indented-buffer-utils", since=_r("2.14"),
        old_module=f"{_I}.utils", new_module="torch.utils._indented_buffer",
        names=("IndentedBuffer", "DeferredLineBase", "LineContext", "ValueWithLineMap"), reexported=True,
        note="IndentedBuffer and its line-map helpers moved to torch.utils (inductor.utils re-exports them)",
        confirmed="2.14.1 torch/utils/_indented_buffer.py:29-205; 2.14.1 torch/_inductor/utils.py:62 re-export",
    ),
    ModuleMove(
        id="heuristics-template-package", since=_r("2.14"),
        old=f"{_I}.template_heuristics", new=f"{_I}.heuristics.template", reexported=True,
        note="template_heuristics moved to heuristics.template (the old package is a deprecated alias)",
        confirmed="2.14.1 torch/_inductor/template_heuristics/__init__.py (backward-compatibility shim); 2.14.1 torch/_inductor/heuristics/template/",
    ),
    # ---- 2.15 -----------------------------------------------------------------
    KeywordRename(
        id="reduction-strict-reduction", since=_r("2.15"),
        callee=Callee(qualname=f"{_I}.ir.Reduction.create"),
        old_keyword="strict_sum", new_keyword="strict_reduction",
        note="Reduction.create(strict_sum=) renamed strict_reduction=",
        confirmed="2.14.1 torch/_inductor/ir.py:1763; 2.15.0 same file:1794",
    ),
    KeywordRename(
        id="make-reduction-strict-reduction", since=_r("2.15"),
        callee=Callee(qualname=f"{_I}.lowering.make_reduction"),
        old_keyword="strict_sum", new_keyword="strict_reduction",
        note="lowering.make_reduction(strict_sum=) renamed strict_reduction=",
        confirmed="2.14.1 torch/_inductor/lowering.py:7346; 2.15.0 same file:7429",
    ),
    MethodRename(
        id="strict-reduction-rblock", since=_r("2.15"),
        method="strict_sum_rblock", new="strict_reduction_rblock",
        note="Reduction.strict_sum_rblock / SIMDKernelFeatures.strict_sum_rblock() renamed strict_reduction_rblock",
        confirmed="2.14.1 torch/_inductor/ir.py:1410, codegen/simd_kernel_features.py:162; 2.15.0 ir.py:1441, simd_kernel_features.py:173",
    ),
    MethodRename(
        id="strict-multirow-reduction", since=_r("2.15"),
        method="has_strict_sum_multirow_reduction", new="has_strict_multirow_reduction",
        note="SIMDKernelFeatures.has_strict_sum_multirow_reduction() renamed has_strict_multirow_reduction()",
        confirmed="2.14.1 torch/_inductor/codegen/simd_kernel_features.py:158; 2.15.0 same file",
    ),
)


def rule_by_id(rule_id: str) -> Rule:
    """Look a rule up by its id (tests and reports)."""
    for rule in RULES:
        if rule.id == rule_id:
            return rule
    raise KeyError(rule_id)
