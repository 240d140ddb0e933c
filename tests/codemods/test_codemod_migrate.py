"""The migrate codemod (torch internals -> spyre_shims.compat), as libcst CodemodTests
with hand-written expectations."""

from __future__ import annotations

import libcst as cst
from libcst.codemod import CodemodContext

from spyre_codemods.migrate import MigrateCommand

from .joined_notes import JoinedNotesTest as CodemodTest

TAG = "# TODO(spyre-adapter migrate):"


def migrate(code: str, source: str | None = None) -> str:
    return MigrateCommand(CodemodContext(), source).transform_module(cst.parse_module(code)).code


class TestMigrate(CodemodTest):
    TRANSFORM = MigrateCommand

    def test_classes_and_functions_move_to_compat(self) -> None:
        self.assertCodemod(
            """
            from torch._inductor.codegen.wrapper import WrapperCodeGen
            from torch._inductor.scheduler import BaseScheduling as Base
            from torch._dynamo.device_interface import DeviceInterface, get_interface_for_device

            class AccelWrapper(WrapperCodeGen):
                pass

            class AccelScheduling(Base):
                pass

            IFACE = get_interface_for_device("accel") or DeviceInterface
            """,
            """
            from spyre_shims.compat import PythonWrapperCodegen
            from spyre_shims.compat import BaseScheduling as Base
            from spyre_shims.compat import DeviceInterface, get_interface_for_device

            class AccelWrapper(PythonWrapperCodegen):
                pass

            class AccelScheduling(Base):
                pass

            IFACE = get_interface_for_device("accel") or DeviceInterface
            """,
        )

    def test_module_attribute_access_moves_to_compat(self) -> None:
        self.assertCodemod(
            """
            import torch
            from torch._inductor import ir

            def body_of(node):
                assert isinstance(node._body, ir.LoopBody)
                return torch._inductor.utils.IndentedBuffer()
            """,
            """
            import torch
            from spyre_shims.compat import IndentedBuffer, LoopBody

            def body_of(node):
                assert isinstance(node._body, LoopBody)
                return IndentedBuffer()
            """,
        )

    def test_sizevars_calls(self) -> None:
        # V.graph.sizevars is the compat default; any other receiver is passed explicitly
        self.assertCodemod(
            """
            from torch._inductor.virtualized import V

            def tile(node, sizevars):
                n = V.graph.sizevars.size_hint(node.numel, fallback=64)
                m = sizevars.optimization_hint(node.numel, 8)
                V.graph.sizevars.guard_equals(n, m)
                k = self.sizevars.guarding_hint_or_throw(n)
                return V.graph.sizevars.evaluate_static_shape(n) + k
            """,
            """
            from spyre_shims.compat import check_equals, guard_int, size_hint, size_hint_or_throw

            def tile(node, sizevars):
                n = size_hint(node.numel, fallback=64)
                m = size_hint(node.numel, fallback=8, sizevars=sizevars)
                check_equals(n, m)
                k = size_hint_or_throw(n, sizevars=self.sizevars)
                return guard_int(n) + k
            """,
        )

    def test_guard_equals_whose_value_is_used_gets_a_todo(self) -> None:
        self.assertCodemod(
            """
            from torch._inductor.virtualized import V

            size = V.graph.sizevars.guard_equals(a, b)
            """,
            f"""
            from spyre_shims.compat.graph import V

            {TAG} .guard_equals() returned the left operand; check_equals() returns None: call check_equals(a, b) and use a
            size = V.graph.sizevars.guard_equals(a, b)
            """,
        )

    def test_unbacked_symbol_queries(self) -> None:
        self.assertCodemod(
            """
            a = node.get_unbacked_symbol_uses()
            b = buf.data.get_free_symbol_uses(unbacked_only=True)
            c = buf.get_free_symbol_uses()
            """,
            """
            from spyre_shims.compat import free_unbacked_symbols

            a = free_unbacked_symbols(node)
            b = free_unbacked_symbols(buf.data)
            c = buf.get_free_symbol_uses()
            """,
        )

    def test_config_patch(self) -> None:
        self.assertCodemod(
            """
            import torch
            from torch._inductor import config

            @config.patch(max_autotune=True)
            def compile_it():
                with config.patch({"triton.cudagraphs": False}):
                    with torch._inductor.config.patch("cpp_wrapper", True):
                        pass
            """,
            """
            import torch
            from spyre_shims.compat import inductor_config

            @inductor_config(max_autotune=True)
            def compile_it():
                with inductor_config(**{"triton.cudagraphs": False}):
                    with inductor_config(**{"cpp_wrapper": True}):
                        pass
            """,
        )

    def test_register_functions_map_arguments(self) -> None:
        self.assertCodemod(
            """
            from torch._inductor.codegen.common import register_backend_for_device, register_device_op_overrides

            register_backend_for_device("accel", Sched, Wrapper, CppWrapper, accel_pass)
            register_backend_for_device("accel", device_scheduling=Sched, device_wrapper_codegen=Wrapper)
            register_device_op_overrides("accel", device_op_overrides=Ops())
            """,
            """
            from spyre_shims.compat import register_backend_for_device, register_device_op_overrides

            register_backend_for_device("accel", Sched, Wrapper, cpp_wrapper=CppWrapper, custom_pass=accel_pass)
            register_backend_for_device("accel", scheduling=Sched, wrapper=Wrapper)
            register_device_op_overrides("accel", overrides=Ops())
            """,
            source="2.8",
        )

    def test_register_backend_5th_positional_follows_the_release(self) -> None:
        self.assertCodemod(
            """
            from torch._inductor.codegen.common import register_backend_for_device

            register_backend_for_device("accel", Sched, Wrapper, CppWrapper, FxWrapper)
            """,
            """
            from spyre_shims.compat import register_backend_for_device

            register_backend_for_device("accel", Sched, Wrapper, cpp_wrapper=CppWrapper, fx_wrapper=FxWrapper)
            """,
            source="2.9",
        )

    def test_register_backend_without_release_stays_internal(self) -> None:
        code = """
            from torch._inductor.codegen.common import register_backend_for_device

            register_backend_for_device("accel", Sched, Wrapper, CppWrapper, extra)
            """
        self.assertCodemod(
            code,
            f"""
            {TAG} register_backend_for_device kept internal: its positional arguments after the 4th changed meaning in 2.9; re-run with --from RELEASE to migrate it
            from torch._inductor.codegen.common import register_backend_for_device

            register_backend_for_device("accel", Sched, Wrapper, CppWrapper, extra)
            """,
        )

    def test_no_equivalent_leaves_a_todo(self) -> None:
        """Names with a stable home move (by import, by ``torch.`` chain); the rest keep
        their import with a TODO naming the category, the reason and what to use instead."""
        self.assertCodemod(
            """
            import torch
            from torch._inductor.ir import ComputedBuffer, LoopBody
            from torch._inductor.runtime.triton_heuristics import CachingAutotuner, grid

            torch._inductor.config.debug = True
            torch._inductor.codecache.PyCodeCache.cache_clear()
            torch._inductor.freezing.freeze(gm)
            KINDS = (ComputedBuffer, LoopBody, CachingAutotuner, grid)
            """,
            f"""
            import torch
            from spyre_shims.compat.ir import ComputedBuffer
            from spyre_shims.compat import LoopBody
            {TAG} torch._inductor.runtime.triton_heuristics.CachingAutotuner [runtime]: the Triton runtime (heuristics, autotuner, benchmarking) changes every release and is not part of the stable API: keep it vendor-owned
            {TAG} torch._inductor.runtime.triton_heuristics.grid [runtime]: removed in 2.7; instead: keep grid code vendor-owned
            from torch._inductor.runtime.triton_heuristics import CachingAutotuner, grid
            from spyre_shims.compat.caches import PyCodeCache
            from spyre_shims.compat.config import inductor

            inductor.debug = True
            PyCodeCache.cache_clear()
            {TAG} torch._inductor.freezing.freeze [inductor-other]: an Inductor internal outside the backend extension points: keep it vendor-owned or move the logic onto the Kernel IR (spyre_shims.backend)
            torch._inductor.freezing.freeze(gm)
            KINDS = (ComputedBuffer, LoopBody, CachingAutotuner, grid)
            """,
        )

    def test_compat_block_gets_a_todo_and_is_not_edited(self) -> None:
        self.assertCodemod(
            """
            try:
                from torch._inductor.codegen.wrapper import PythonWrapperCodegen
            except ImportError:
                from torch._inductor.codegen.wrapper import WrapperCodeGen as PythonWrapperCodegen
            """,
            f"""
            {TAG} this try/except compatibility block can become `from spyre_shims.compat import PythonWrapperCodegen`
            try:
                from torch._inductor.codegen.wrapper import PythonWrapperCodegen
            except ImportError:
                from torch._inductor.codegen.wrapper import WrapperCodeGen as PythonWrapperCodegen
            """,
        )

    def test_name_clash_uses_the_module_alias(self) -> None:
        self.assertCodemod(
            """
            from torch._inductor.virtualized import V

            def numel(node):
                size_hint = V.graph.sizevars.size_hint(node.numel)
                return size_hint
            """,
            """
            from spyre_shims import compat as spyre_compat

            def numel(node):
                size_hint = spyre_compat.size_hint(node.numel)
                return size_hint
            """,
        )

    def test_plain_internal_import_goes_when_its_uses_are_migrated(self) -> None:
        self.assertCodemod(
            """
            \"\"\"Vendor module.\"\"\"
            from __future__ import annotations

            import torch
            import torch._inductor.config
            import torch._inductor.ir as tir

            @torch._inductor.config.patch(debug=True)
            def f(node):
                return tir.LoopBody, tir.Pointwise, tir.NotInAnyRelease
            """,
            f"""
            \"\"\"Vendor module.\"\"\"
            from __future__ import annotations

            import torch
            {TAG} torch._inductor.ir stays imported for the uses marked below
            import torch._inductor.ir as tir
            from spyre_shims.compat import LoopBody, inductor_config
            from spyre_shims.compat.ir import Pointwise

            @inductor_config(debug=True)
            def f(node):
                {TAG} torch._inductor.ir.NotInAnyRelease [ir]: not in spyre_shims.compat.ir (Inductor-internal, no stable name): keep it vendor-owned behind one module of yours
                return LoopBody, Pointwise, tir.NotInAnyRelease
            """,
        )

    def test_dynamo_backend_moves_to_compat(self) -> None:
        """A Dynamo backend written the way out-of-tree ones are: AOTAutograd through a
        module alias, a name imported from where it is defined while the stable name is
        declared where Dynamo re-exports it (``decorators.disable`` is ``torch._dynamo.disable``),
        a config alias, a source."""
        self.assertCodemod(
            """
            import torch._functorch.aot_autograd as aot_autograd
            from torch._dynamo.backends.registry import register_backend
            from torch._dynamo.decorators import disable
            from torch._dynamo.source import LocalSource
            from torch._functorch import config as functorch_config

            @register_backend
            def accel(gm, example_inputs):
                functorch_config.debug_assert = True
                compiled = aot_autograd.aot_module_simplified(gm, example_inputs, aot_autograd.make_boxed_func)
                return disable(compiled), LocalSource("x")
            """,
            """
            from spyre_shims.compat.dynamo import register_backend
            from spyre_shims.compat.dynamo import disable
            from spyre_shims.compat.guards import LocalSource
            from spyre_shims.compat.config import functorch as functorch_config
            from spyre_shims.compat.aot import aot_module_simplified, make_boxed_func

            @register_backend
            def accel(gm, example_inputs):
                functorch_config.debug_assert = True
                compiled = aot_module_simplified(gm, example_inputs, make_boxed_func)
                return disable(compiled), LocalSource("x")
            """,
            source="2.10",
        )

    def test_code_without_internals_is_untouched(self) -> None:
        code = """
            import torch
            from spyre_shims.compat import size_hint

            def f(x):
                return torch.relu(x) + size_hint(x.numel())
            """
        self.assertCodemod(code, code)


def test_migrate_is_idempotent() -> None:
    code = (
        "import torch\n"
        "from torch._inductor.virtualized import V\n"
        "from torch._inductor.ir import ComputedBuffer\n"
        "from torch._inductor.codegen.wrapper import WrapperCodeGen\n"
        "try:\n    from torch._inductor.utils import IndentedBuffer\nexcept ImportError:\n    IndentedBuffer = None\n"
        "class W(WrapperCodeGen):\n    def f(self, n):\n"
        "        return V.graph.sizevars.size_hint(n), V.graph.sizevars.guard_equals(n, 1), V.graph.foo\n"
        "torch._inductor.config.debug = True\n"
    )
    once = migrate(code)
    assert once.count(TAG) == 2  # the compat block, guard_equals' value
    assert migrate(once) == once
    compile(once, "<migrated>", "exec")
