"""One libcst CodemodTest per upgrade rule: each runs the upgrade transform with only
that rule selected, on a hand-written before/after pair."""

from __future__ import annotations

from libcst.codemod import CodemodContext

from spyre_codemods.rule_table import RULES, rule_by_id
from spyre_codemods.upgrade import UpgradeCommand

from .joined_notes import JoinedNotesTest as CodemodTest

CREATE_TODO = (
    "# TODO(spyre-adapter upgrade): 2.6: a PythonWrapperCodegen subclass must override the static "
    "create(is_subgraph, subgraph_name, parent_wrapper, ...) factory, or Inductor instantiates the base class"
)


class RuleTest(CodemodTest):
    TRANSFORM = UpgradeCommand

    def check(self, rule_id: str, before: str, after: str, *, source: str = "2.4", target: str = "2.15",
              package: str | None = None) -> None:
        # modernize: optional rules (old spelling still working on the target) fire too
        context = CodemodContext(full_package_name=package,
                                 full_module_name=f"{package}.mod" if package else None)
        # the rule alone: no import/signature/advisory checks from the API index
        self.assertCodemod(before, after, source=source, target=target, rules=(rule_by_id(rule_id),),
                           modernize=True, index_checks=False, context_override=context)


class TestMoves(RuleTest):
    def test_loop_body_module(self) -> None:
        # imports move; `ir.LoopBody` keeps working (ir re-exports it) and is left alone
        self.check(
            "loop-body-module",
            """
            from torch._inductor.ir import LoopBody, Pointwise
            import torch._inductor.ir as ir

            def f(node):
                return isinstance(node._body, LoopBody) and ir.LoopBody is LoopBody
            """,
            """
            from torch._inductor.ir import Pointwise
            from torch._inductor.loop_body import LoopBody
            import torch._inductor.ir as ir

            def f(node):
                return isinstance(node._body, LoopBody) and ir.LoopBody is LoopBody
            """,
        )

    def test_loop_body_module_relative_import(self) -> None:
        self.check(
            "loop-body-module",
            """
            from ..ir import LoopBody as Body
            """,
            """
            from ..loop_body import LoopBody as Body
            """,
            package="torch._inductor.codegen",
        )

    def test_loop_body_helpers_module(self) -> None:
        self.check(
            "loop-body-helpers-module",
            """
            from torch._inductor import ir

            def blocks(body):
                return [b for b in body.subblocks.values() if isinstance(b, ir.LoopBodyBlock)]
            """,
            """
            from torch._inductor.loop_body import LoopBodyBlock

            def blocks(body):
                return [b for b in body.subblocks.values() if isinstance(b, LoopBodyBlock)]
            """,
        )

    def test_vec_isa_module(self) -> None:
        self.check(
            "vec-isa-module",
            """
            from torch._inductor.codecache import pick_vec_isa, VecISA, CacheBase
            """,
            """
            from torch._inductor.codecache import CacheBase
            from torch._inductor.cpu_vec_isa import pick_vec_isa, VecISA
            """,
        )

    def test_cpp_builder_module(self) -> None:
        self.check(
            "cpp-builder-module",
            """
            from torch._inductor import codecache

            def flags():
                return ["-fopenmp"] if codecache.is_gcc() else codecache.CacheBase.get_system()
            """,
            """
            from torch._inductor import codecache
            from torch._inductor.cpp_builder import is_gcc

            def flags():
                return ["-fopenmp"] if is_gcc() else codecache.CacheBase.get_system()
            """,
        )

    def test_cpp_opt_ctx_module(self) -> None:
        self.check(
            "cpp-opt-ctx-module",
            """
            from torch._inductor.codegen.cpp import CppKernel, get_opt_ctx  # noqa
            """,
            """
            from torch._inductor.codegen.cpp import CppKernel  # noqa
            from torch._inductor.codegen.cpp_utils import get_opt_ctx
            """,
        )

    def test_python_wrapper_codegen(self) -> None:
        self.check(
            "python-wrapper-codegen",
            """
            from torch._inductor.codegen.wrapper import WrapperCodeGen
            import torch._inductor.codegen.wrapper as wrapper_mod

            class AccelWrapper(WrapperCodeGen):
                pass

            BASES = (WrapperCodeGen, wrapper_mod.WrapperCodeGen)
            """,
            """
            from torch._inductor.codegen.wrapper import PythonWrapperCodegen
            import torch._inductor.codegen.wrapper as wrapper_mod

            class AccelWrapper(PythonWrapperCodegen):
                pass

            BASES = (PythonWrapperCodegen, wrapper_mod.PythonWrapperCodegen)
            """,
        )

    def test_python_wrapper_codegen_keeps_name_used_in_a_guard(self) -> None:
        # a use inside a version check must not change, so the import keeps the old local name
        self.check(
            "python-wrapper-codegen",
            """
            import torch
            from torch._inductor.codegen.wrapper import WrapperCodeGen

            class AccelWrapper(WrapperCodeGen):
                pass

            if torch.__version__ < "2.6":
                LEGACY = WrapperCodeGen
            """,
            """
            import torch
            from torch._inductor.codegen.wrapper import PythonWrapperCodegen as WrapperCodeGen

            class AccelWrapper(WrapperCodeGen):
                pass

            if torch.__version__ < "2.6":
                LEGACY = WrapperCodeGen
            """,
        )

    def test_cpp_wrapper_gpu(self) -> None:
        self.check(
            "cpp-wrapper-gpu",
            """
            from torch._inductor.codegen.cpp_wrapper_cuda import CppWrapperCuda

            CPP_WRAPPER = CppWrapperCuda
            """,
            """
            from torch._inductor.codegen.cpp_wrapper_gpu import CppWrapperGpu

            CPP_WRAPPER = CppWrapperGpu
            """,
        )

    def test_compiled_fx_graph_module(self) -> None:
        # codecache keeps importing it (so `codecache.CompiledFxGraph` still works): the
        # import moves to the home module, attribute access is left alone
        self.check(
            "compiled-fx-graph-module",
            """
            import torch
            from torch._inductor.codecache import CompiledFxGraph, FxGraphCache

            def is_compiled(x):
                return isinstance(x, (CompiledFxGraph, torch._inductor.codecache.CompiledFxGraph))
            """,
            """
            import torch
            from torch._inductor.codecache import FxGraphCache
            from torch._inductor.output_code import CompiledFxGraph

            def is_compiled(x):
                return isinstance(x, (CompiledFxGraph, torch._inductor.codecache.CompiledFxGraph))
            """,
        )

    def test_debug_triton_code_module(self) -> None:
        self.check(
            "debug-triton-code-module",
            """
            from torch._inductor.scheduler import Scheduler, debug_triton_code
            """,
            """
            from torch._inductor.scheduler import Scheduler
            from torch._inductor.codegen.triton import debug_triton_code
            """,
        )

    def test_template_heuristics_triton(self) -> None:
        self.check("template-heuristics-triton",
                   "from torch._inductor.template_heuristics import CUDAConfigHeuristic, GemmConfig\n",
                   "from torch._inductor.template_heuristics.triton import CUDAConfigHeuristic, GemmConfig\n", source="2.8")

    def test_static_triton_launcher(self) -> None:
        self.check("static-triton-launcher",
                   "from torch._inductor.runtime.static_cuda_launcher import StaticallyLaunchedCudaKernel\n",
                   "from torch._inductor.runtime.static_triton_launcher import StaticallyLaunchedCudaKernel\n", source="2.10")

    def test_stride_at_sizevars(self) -> None:
        self.check(
            "stride-at-sizevars",
            """
            from torch._inductor.codegen.cpp import (
                CppKernel,
                stride_at,
            )
            """,
            """
            from torch._inductor.codegen.cpp import (
                CppKernel,
            )
            from torch._inductor.sizevars import stride_at
            """,
            source="2.12",
        )

    def test_indented_buffer_utils(self) -> None:
        self.check(
            "indented-buffer-utils",
            """
            from torch._inductor.utils import IndentedBuffer, sympy_product
            """,
            """
            from torch._inductor.utils import sympy_product
            from torch.utils._indented_buffer import IndentedBuffer
            """,
            source="2.13",
        )

    def test_heuristics_template_package(self) -> None:
        self.check(
            "heuristics-template-package",
            """
            import torch._inductor.template_heuristics as th
            from torch._inductor import template_heuristics
            from torch._inductor.template_heuristics.triton import CUDAConfigHeuristic

            HEURISTICS = (th.registry, template_heuristics.triton, CUDAConfigHeuristic)
            """,
            """
            import torch._inductor.heuristics.template as th
            from torch._inductor.heuristics import template as template_heuristics
            from torch._inductor.heuristics.template.triton import CUDAConfigHeuristic

            HEURISTICS = (th.registry, template_heuristics.triton, CUDAConfigHeuristic)
            """,
            source="2.13",
        )


class TestClassRules(RuleTest):
    def test_device_interface_metaclass(self) -> None:
        self.check(
            "device-interface-metaclass",
            """
            from torch._dynamo.device_interface import DeviceInterface, DeviceInterfaceMeta

            class AccelInterface(DeviceInterface, metaclass=DeviceInterfaceMeta):
                pass
            """,
            """
            from torch._dynamo.device_interface import DeviceInterface

            class AccelInterface(DeviceInterface):
                pass
            """,
        )

    def test_wrapper_create_factory(self) -> None:
        self.check(
            "wrapper-create-factory",
            """
            from torch._inductor.codegen.wrapper import WrapperCodeGen

            class Missing(WrapperCodeGen):
                pass

            class Present(WrapperCodeGen):
                @staticmethod
                def create(is_subgraph, subgraph_name, parent_wrapper):
                    return Present()
            """,
            f"""
            from torch._inductor.codegen.wrapper import WrapperCodeGen

            {CREATE_TODO}
            class Missing(WrapperCodeGen):
                pass

            class Present(WrapperCodeGen):
                @staticmethod
                def create(is_subgraph, subgraph_name, parent_wrapper):
                    return Present()
            """,
        )


class TestCallRules(RuleTest):
    def test_generate_kernel_call_keywords(self) -> None:
        todo = ("# TODO(spyre-adapter upgrade): generate_kernel_call is keyword-only after call_args; "
                "grid/device_index/gpu are gone (pass device=) (2.7); drop or replace: device_index, gpu, grid")
        self.check(
            "generate-kernel-call-keywords",
            """
            def emit(wrapper, name, args, types):
                wrapper.generate_kernel_call(name, args, None, 0, True, True, types)
                wrapper.generate_kernel_call(name, args, triton=False)
            """,
            f"""
            def emit(wrapper, name, args, types):
                {todo}
                wrapper.generate_kernel_call(name, args,
                                             grid=None,
                                             device_index=0,
                                             gpu=True,
                                             triton=True,
                                             arg_types=types)
                wrapper.generate_kernel_call(name, args, triton=False)
            """,
            source="2.6",
        )

    def test_generate_kernel_call_keywords_uses_the_source_release_signature(self) -> None:
        # 2.4 called the fifth parameter `cuda`, and had no raw_args before grid_fn
        todo = ("# TODO(spyre-adapter upgrade): generate_kernel_call is keyword-only after call_args; "
                "grid/device_index/gpu are gone (pass device=) (2.7); drop or replace: cuda, device_index, grid, grid_fn")
        self.check(
            "generate-kernel-call-keywords",
            """
            wrapper.generate_kernel_call(name, args, grid, 0, False, False, types, "grid")
            """,
            f"""
            {todo}
            wrapper.generate_kernel_call(name, args,
                                         grid=grid,
                                         device_index=0,
                                         cuda=False,
                                         triton=False,
                                         arg_types=types,
                                         grid_fn="grid")
            """,
            source="2.4",
        )

    def test_generate_kernel_call_keywords_through_the_class(self) -> None:
        # Base.generate_kernel_call(self, ...) passes the instance first: torch 2.7's
        # own CppWrapperGpu does this and is already up to date
        self.check(
            "generate-kernel-call-keywords",
            """
            CppWrapperCpu.generate_kernel_call(self, kernel_name, call_args, device=device)
            """,
            """
            CppWrapperCpu.generate_kernel_call(self, kernel_name, call_args, device=device)
            """,
            source="2.6",
        )
        todo = ("# TODO(spyre-adapter upgrade): generate_kernel_call is keyword-only after call_args; "
                "grid/device_index/gpu are gone (pass device=) (2.7); drop or replace: device_index, grid")
        # the file's longest line (89, the call as written) is its limit: one break is enough
        self.check(
            "generate-kernel-call-keywords",
            """
            wrapper.PythonWrapperCodegen.generate_kernel_call(self, name, args, grid, 0, triton=True)
            """,
            f"""
            {todo}
            wrapper.PythonWrapperCodegen.generate_kernel_call(self, name, args,
                                                              grid=grid, device_index=0, triton=True)
            """,
            source="2.6",
        )

    def test_free_symbol_uses(self) -> None:
        todo = ("# TODO(spyre-adapter upgrade): override get_free_symbol_uses(self, unbacked_only=False) instead "
                "(2.8): get_unbacked_symbol_uses() became get_free_symbol_uses(unbacked_only=True); "
                "overrides must take unbacked_only")
        self.check(
            "free-symbol-uses",
            """
            class AccelBuffer(Buffer):
                def get_unbacked_symbol_uses(self):
                    return self.data.get_unbacked_symbol_uses()
            """,
            f"""
            class AccelBuffer(Buffer):
                {todo}
                def get_unbacked_symbol_uses(self):
                    return self.data.get_free_symbol_uses(unbacked_only=True)
            """,
        )

    def test_register_backend_keywords(self) -> None:
        self.check(
            "register-backend-keywords",
            """
            from torch._inductor.codegen.common import register_backend_for_device as reg

            reg("accel", Sched, Wrapper, CppWrapper, accel_pass)
            reg("accel", Sched, Wrapper)
            """,
            """
            from torch._inductor.codegen.common import register_backend_for_device as reg

            reg("accel", Sched, Wrapper,
                device_cpp_wrapper_codegen=CppWrapper, device_custom_pass=accel_pass)
            reg("accel", Sched, Wrapper)
            """,
            source="2.8",
        )

    def test_reduction_strict_reduction(self) -> None:
        self.check(
            "reduction-strict-reduction",
            """
            from torch._inductor import ir

            def lower(*args):
                return ir.Reduction.create(*args, strict_sum=True)
            """,
            """
            from torch._inductor import ir

            def lower(*args):
                return ir.Reduction.create(*args, strict_reduction=True)
            """,
            source="2.14",
        )

    def test_make_reduction_strict_reduction(self) -> None:
        self.check(
            "make-reduction-strict-reduction",
            """
            from torch._inductor.lowering import make_reduction

            strict_sum_lowering = make_reduction("sum", strict_sum=True)
            """,
            """
            from torch._inductor.lowering import make_reduction

            strict_sum_lowering = make_reduction("sum", strict_reduction=True)
            """,
            source="2.14",
        )

    def test_strict_reduction_rblock(self) -> None:
        self.check("strict-reduction-rblock",
                   "rblock = features.strict_sum_rblock() or node.data.strict_sum_rblock\n",
                   "rblock = features.strict_reduction_rblock() or node.data.strict_reduction_rblock\n", source="2.14")

    def test_strict_multirow_reduction(self) -> None:
        self.check("strict-multirow-reduction",
                   "multirow = features.has_strict_sum_multirow_reduction()\n",
                   "multirow = features.has_strict_multirow_reduction()\n", source="2.14")


class TestSizevarsRules(RuleTest):
    def test_sizevars_check_equals(self) -> None:
        # the old method returned `left`: where the value is used, the new spelling must too
        self.check(
            "sizevars-check-equals",
            """
            V.graph.sizevars.guard_equals(a, b)
            size = self.sizevars.guard_equals(a, b)
            """,
            """
            V.graph.sizevars.check_equals(a, b)
            size = self.sizevars.check_equals_and_simplify(a, b)
            """,
        )

    def test_sizevars_backed_var_to_val(self) -> None:
        # an attribute, not a method: read as a value and passed on
        self.check(
            "sizevars-backed-var-to-val",
            "index = raw_index.subs(V.graph.sizevars.var_to_val)\nhints = dict(self.sizevars.var_to_val)\n",
            "index = raw_index.subs(V.graph.sizevars.backed_var_to_val)\nhints = dict(self.sizevars.backed_var_to_val)\n",
        )

    def test_sizevars_check_leq(self) -> None:
        self.check("sizevars-check-leq", "sizevars.guard_leq(x, 8)\n", "sizevars.check_leq(x, 8)\n")

    def test_sizevars_check_lt(self) -> None:
        self.check("sizevars-check-lt", "V.graph.sizevars.guard_lt(x, 8)\n", "V.graph.sizevars.check_lt(x, 8)\n")

    def test_sizevars_guard_int(self) -> None:
        self.check(
            "sizevars-guard-int",
            """
            n = V.graph.sizevars.evaluate_static_shape(numel)
            other.evaluate_static_shape(numel)  # not a sizevars receiver: untouched
            """,
            """
            n = V.graph.sizevars.guard_int(numel)
            other.evaluate_static_shape(numel)  # not a sizevars receiver: untouched
            """,
        )

    def test_sizevars_guard_int_seq(self) -> None:
        self.check(
            "sizevars-guard-int-seq",
            "sizes = graph.sizevars.evaluate_static_shapes(ranges)\n",
            "sizes = graph.sizevars.guard_int_seq(ranges)\n",
        )

    def test_sizevars_optimization_hint(self) -> None:
        self.check(
            "sizevars-optimization-hint",
            """
            hint = V.graph.sizevars.size_hint(numel, fallback=8192)
            hints = map(V.graph.sizevars.size_hint, exprs)
            exact = V.graph.sizevars.size_hint(numel)
            either = V.graph.sizevars.size_hint(numel, **options)
            """,
            """
            hint = V.graph.sizevars.optimization_hint(numel, fallback=8192)
            hints = map(V.graph.sizevars.optimization_hint, exprs)
            exact = V.graph.sizevars.size_hint_or_throw(numel)
            either = V.graph.sizevars.optimization_hint(numel, **options)
            """,
        )

    def test_sizevars_optimization_hints(self) -> None:
        self.check(
            "sizevars-optimization-hints",
            "hints = V.graph.sizevars.size_hints(sizes, fallback=1)\nexact = V.graph.sizevars.size_hints(sizes)\n",
            "hints = V.graph.sizevars.optimization_hints(sizes, fallback=1)\n"
            "exact = V.graph.sizevars.size_hints_or_throw(sizes)\n",
        )

    def test_sizevars_guarding_hint(self) -> None:
        self.check(
            "sizevars-guarding-hint",
            "n = self.sizevars.size_hint_or_throw(numel)\n",
            "n = self.sizevars.guarding_hint_or_throw(numel)\n",
            source="2.11",
        )

    def test_sizevars_guarding_hints(self) -> None:
        self.check(
            "sizevars-guarding-hints",
            "ns = self.sizevars.size_hints_or_throw(sizes)\n",
            "ns = self.sizevars.guarding_hints_or_throw(sizes)\n",
            source="2.11",
        )


def test_every_rule_has_a_codemod_test() -> None:
    tested = {
        name[len("test_"):]
        for cls in (TestMoves, TestClassRules, TestCallRules, TestSizevarsRules)
        for name in dir(cls) if name.startswith("test_")
    }
    missing = [r.id for r in RULES if r.id.replace("-", "_") not in tested]
    assert not missing, f"rules without a CodemodTest: {missing}"
