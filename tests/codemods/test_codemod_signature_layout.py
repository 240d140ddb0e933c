"""Parameters added to an override keep the signature's own layout, and a parameter
that already receives the base's argument is never duplicated. Expected outputs are
written by hand; each case is also run a second time on its own output (no change)."""

from __future__ import annotations

import libcst as cst
from libcst.codemod import CodemodContext

from spyre_codemods.api_index import Param
from spyre_codemods.params_edit import add_params, fit_call_args, line_limit
from spyre_codemods.upgrade import UpgradeCommand

from .joined_notes import join_notes
from .test_codemod_upgrade_checks import UpgradeTest

T = "# TODO(spyre-adapter upgrade): "
DEFINE = ("override of PythonWrapperCodegen.define_kernel on torch 2.15: not used yet: cpp_definition=None; "
          "base is define_kernel(self, kernel_name, kernel_body, metadata=None, gpu=True, cpp_definition=None)")


class LayoutTest(UpgradeTest):
    """Short files: their line length is PEP 8's 79."""

    def test_a_parameter_per_line_with_a_trailing_comma(self) -> None:
        self.check(
            """
            from torch._inductor.codegen.wrapper import PythonWrapperCodegen

            class W(PythonWrapperCodegen):
                def define_kernel(
                        self, kernel_name: str, kernel_body: str,
                        metadata=None,
                        gpu=True,
                ):
                    return kernel_name
            """,
            f"""
            from torch._inductor.codegen.wrapper import PythonWrapperCodegen

            class W(PythonWrapperCodegen):
                {T}{DEFINE}
                def define_kernel(
                        self, kernel_name: str, kernel_body: str,
                        metadata=None,
                        gpu=True,
                        cpp_definition=None,
                ):
                    return kernel_name
            """,
            "2.6", "2.15",
        )

    def test_parameters_on_one_continuation_line_are_broken_at_the_files_limit(self) -> None:
        # the file's longest line is under 80: the new parameter would pass it
        self.check(
            """
            from torch._inductor.codegen.wrapper import PythonWrapperCodegen

            class W(PythonWrapperCodegen):
                @staticmethod
                def create(
                        is_subgraph: bool, subgraph_name: str, parent_wrapper
                ):
                    return W()
            """,
            f"""
            from torch._inductor.codegen.wrapper import PythonWrapperCodegen

            class W(PythonWrapperCodegen):
                {T}override of PythonWrapperCodegen.create on torch 2.15: not used yet: partition_signatures=None; base is create(is_subgraph, subgraph_name, parent_wrapper, partition_signatures=None)
                @staticmethod
                def create(
                        is_subgraph: bool, subgraph_name: str, parent_wrapper,
                        partition_signatures=None
                ):
                    return W()
            """,
            "2.6", "2.15",
        )

    def test_a_one_line_signature_gets_a_keyword_only_marker(self) -> None:
        self.check(
            """
            from torch._inductor.runtime.triton_heuristics import CachingAutotuner

            class A(CachingAutotuner):
                def _precompile_config(self, cfg, warm_cache_only: bool):
                    return cfg
            """,
            f"""
            from torch._inductor.runtime.triton_heuristics import CachingAutotuner

            class A(CachingAutotuner):
                {T}override of CachingAutotuner._precompile_config on torch 2.15: parameter warm_cache_only is no longer passed; not used yet: cc_override=None; base is _precompile_config(self, cfg, *, cc_override=None)
                def _precompile_config(self, cfg, warm_cache_only: bool,
                                       *, cc_override=None):
                    return cfg
            """,
            "2.6", "2.15",
        )

    def test_a_parameter_in_the_place_of_an_unchanged_one_is_not_duplicated(self) -> None:
        # TritonKernel.codegen_kernel(self, name=None) on every release: `Name` receives it
        code = """
            from torch._inductor.codegen.triton import TritonKernel

            class K(TritonKernel):
                def codegen_kernel(self, Name=None):
                    return Name
            """
        self.check(code, code, "2.6", "2.15")


def test_a_parameter_new_on_the_base_in_the_place_of_an_own_one_is_flagged() -> None:
    # CachingAutotuner.precompile gained reload_kernel (2.7) after warm_cache_only
    out = UpgradeCommand(CodemodContext(), "2.6", "2.15").transform_module(cst.parse_module(
        "from torch._inductor.runtime.triton_heuristics import CachingAutotuner\n\n"
        "class A(CachingAutotuner):\n"
        "    def precompile(self, warm_cache_only=False, reload=None):\n"
        "        return reload\n")).code
    out = join_notes(out)
    assert ("def precompile(self, warm_cache_only=False, reload=None,\n"
            "                   static_triton_bundle_key=None):") in out
    assert "parameter reload is in the place of the base's reload_kernel: rename it reload_kernel" in out
    assert "reload_kernel=None" not in out.split("def precompile")[1].split("):")[0]


def _added(src: str, params: list[Param], limit: int = 79) -> str:
    module = cst.parse_module(src)
    return module.with_changes(body=[add_params(module.body[0], params, limit)]).code


def test_a_line_that_would_pass_the_limit_is_broken_under_the_first_parameter() -> None:
    src = "def generate(self, kernel_name, call_args, grid=None, device_index=None, gpu=True):\n    pass\n"
    assert _added(src, [Param("device", "kwonly", "None"), Param("raw_keys", "kwonly", "None")]) == (
        "def generate(self, kernel_name, call_args, grid=None, device_index=None, gpu=True,\n"
        "             *, device=None, raw_keys=None):\n    pass\n")


def test_new_parameters_go_before_star_kwargs_and_after_star_args() -> None:
    assert _added("def f(self, a, *args, b=1, **kw):\n    pass\n",
                  [Param("c", "positional", "None"), Param("d", "kwonly", "2")]) == (
        "def f(self, a, c=None, *args, b=1, d=2, **kw):\n    pass\n")


def test_the_line_limit_is_the_files_own() -> None:
    assert line_limit("x = 1\n") == 79
    assert line_limit("y = " + "1" * 96 + "\n# " + "c" * 200 + "\n") == 100
    assert line_limit("z = '" + "a" * 300 + "'\n") == 120


def _fitted(code: str, first: int, limit: int, indent: int = 4) -> str:
    call = cst.parse_expression(code)
    assert isinstance(call, cst.Call)
    return cst.Module(body=[]).code_for_node(fit_call_args(call, first, limit, indent, 0, 0))


def test_a_rewritten_call_is_broken_under_its_first_argument_only_when_too_long() -> None:
    code = "reg('npu', Sched, Wrapper, device_cpp_wrapper_codegen=CppWrapper)"
    assert _fitted(code, 3, 79) == code
    assert _fitted(code, 3, 60) == "reg('npu', Sched, Wrapper,\n    device_cpp_wrapper_codegen=CppWrapper)"
    # still too long after one break: one argument per line
    assert _fitted("f(a, b=1, c=2, d=3)", 1, 12, indent=0) == "f(a,\n  b=1,\n  c=2,\n  d=3)"
    assert _fitted("f(a,\n  b=1)", 1, 5) == "f(a,\n  b=1)"  # already laid out by its author
