"""The upgrade's checks driven by the API index and the advisory table: deprecation
windows on a real-shaped 2.11 backend, imports that must resolve, signature changes at
call sites and overrides, advisories, and the 2.6-era vendor fixture tree end to end."""

from __future__ import annotations

import shutil
from pathlib import Path

import libcst as cst
from libcst.codemod import CodemodContext

from spyre_codemods.advisories import ADVISORIES, select_advisories
from spyre_codemods.api_index import Param, Signature, load_index
from spyre_codemods.driver import Job, process_file, run
from spyre_codemods.fileio import iter_python_files
from spyre_codemods.import_resolution import unresolved_imports
from spyre_codemods.redesigns import REDESIGNS, select_changes
from spyre_codemods.signatures import compare, mechanical_rename, plan_call
from spyre_codemods.upgrade import UpgradeCommand

from .joined_notes import JoinedNotesTest as CodemodTest
from .joined_notes import join_notes

FIXTURES = Path(__file__).parent / "fixtures"
T = "# TODO(spyre-adapter upgrade): "


def _advisory(advisory_id: str) -> str:
    return T + next(a for a in (*ADVISORIES, *REDESIGNS) if a.id == advisory_id).message


def test_a_2_11_backend_calling_size_hint_is_upgraded_to_2_12(tmp_path: Path) -> None:
    path = tmp_path / "backend.py"
    shutil.copyfile(FIXTURES / "backend_2_11.py", path)
    original = path.read_text()
    assert original.count(".size_hint(") == 7
    result = process_file(path, Job("upgrade", "2.11", "2.12", mode="write"))
    assert result.status == "changed", result.error
    text = join_notes(path.read_text())
    # six sites sit in sympy `hasattr` / `except (TypeError, ValueError)` blocks, which
    # guard nothing: rewritten; the seventh is in a real torch-version guard: kept, marked.
    # The one passing fallback= becomes optimization_hint, the five without guarding_hint_or_throw
    # (they raised on unbacked symbols, and still do); the guarded block's own optimization_hint stays
    assert text.count(".optimization_hint(") == 1 + 1 and text.count(".guarding_hint_or_throw(") == 5
    assert text.count(".size_hint(") == 1
    assert text.count("left alone inside a version-guarded block") == 1
    # one note per function: numel_hint's two uses share the note above the first
    assert text.count(_advisory("optimization-hint-fallback")) == 5
    assert text.count(_advisory("optimization-hint-fallback") + " (also used at +1 line from here)\n") == 1
    assert sum(1 for f in result.findings if f.kind == "advisory") == 6
    assert result.notes == 5 + 1  # and the compat block's
    rewrites = [f for f in result.findings if f.rule == "sizevars-optimization-hint" and f.kind == "rewrite"]
    assert len(rewrites) == 6
    compile(text, str(path), "exec")
    assert process_file(path, Job("upgrade", "2.11", "2.12", mode="write")).status == "unchanged"


def test_the_same_backend_upgraded_within_its_window_needs_modernize(tmp_path: Path) -> None:
    path = tmp_path / "backend.py"
    shutil.copyfile(FIXTURES / "backend_2_11.py", path)
    assert process_file(path, Job("upgrade", "2.10", "2.11", mode="check")).status == "unchanged"
    diff = process_file(path, Job("upgrade", "2.10", "2.11", mode="diff"))
    assert diff.optional == ["sizevars-optimization-hint"]
    modern = process_file(path, Job("upgrade", "2.10", "2.11", mode="diff", modernize=True))
    assert modern.status == "changed" and "+        return V.graph.sizevars.optimization_hint(expr" in modern.diff


class UpgradeTest(CodemodTest):
    TRANSFORM = UpgradeCommand

    def check(self, before: str, after: str, source: str, target: str, package: str | None = None) -> None:
        context = CodemodContext(full_package_name=package, full_module_name=f"{package}.m" if package else None)
        self.assertCodemod(before, after, source=source, target=target, context_override=context)
        self.assertCodemod(after, after, source=source, target=target, context_override=context)


class TestImports(UpgradeTest):
    def test_a_function_that_became_a_class_method_is_called_through_the_class(self) -> None:
        # gen_common_triton_imports became TritonKernel's classmethod in 2.11 (also through the
        # re-export in select_algorithm); an attribute of the same name is someone else's
        self.check(
            """
            from torch._inductor.codegen.triton import TritonKernel, gen_common_triton_imports
            from torch._inductor.select_algorithm import gen_common_triton_imports as gen

            class NPUKernel(TritonKernel):
                def codegen_header(self, code):
                    code.splice(gen_common_triton_imports())
                    code.splice(gen())
                    code.splice(self.helper.gen_common_triton_imports())
            """,
            """
            from torch._inductor.codegen.triton import TritonKernel

            class NPUKernel(TritonKernel):
                def codegen_header(self, code):
                    code.splice(TritonKernel.gen_common_triton_imports())
                    code.splice(TritonKernel.gen_common_triton_imports())
                    code.splice(self.helper.gen_common_triton_imports())
            """,
            "2.10", "2.11",
        )

    def test_unresolved_imports_move_to_their_home_or_get_a_todo(self) -> None:
        self.check(
            """
            from torch._inductor.codecache import TritonFuture, Union
            from torch._inductor.codegen.triton import OpsHandler, TritonKernel
            from torch._inductor.runtime.triton_heuristics import grid as launch_grid
            """,
            f"""
            {T}TritonFuture cannot be imported from torch._inductor.codecache on torch 2.15 (removed in 2.7); no candidate in the index
            from torch._inductor.codecache import TritonFuture
            from typing import Union
            from torch._inductor.codegen.triton import TritonKernel
            from torch._inductor.ops_handler import OpsHandler
            {T}grid cannot be imported from torch._inductor.runtime.triton_heuristics on torch 2.15 (removed in 2.7); no candidate in the index
            from torch._inductor.runtime.triton_heuristics import grid as launch_grid
            """,
            "2.6", "2.15",
        )

    def test_relative_imports_inside_torch_resolve_against_the_package(self) -> None:
        self.check(
            """
            from ..codecache import TritonFuture
            from .triton import OpsHandler
            """,
            f"""
            {T}TritonFuture cannot be imported from torch._inductor.codecache on torch 2.10 (removed in 2.7); no candidate in the index
            from ..codecache import TritonFuture
            from torch._inductor.ops_handler import OpsHandler
            """,
            "2.6", "2.10", package="torch._inductor.codegen",
        )

    def test_imports_that_resolve_are_untouched(self) -> None:
        code = """
            from torch._inductor.codegen.common import CSEVariable, IndentedBuffer
            from torch._inductor.virtualized import V, ops
            import torch._inductor.config
            """
        self.check(code, code, "2.6", "2.15")

    def test_missing_module_import_gets_a_todo(self) -> None:
        self.check(
            "import torch._inductor.fb.remote_cache\n",
            f"{T}module torch._inductor.fb.remote_cache does not exist on torch 2.15 (not found on torch 2.6 either); "
            "modules named remote_cache: torch._inductor.remote_cache\nimport torch._inductor.fb.remote_cache\n",
            "2.6", "2.15",
        )


class TestSignatures(UpgradeTest):
    def test_overridden_to_dtype_gains_the_parameter_inductor_passes(self) -> None:
        self.check(
            """
            from torch._inductor.codegen.common import OpOverrides

            class AccelOverrides(OpOverrides):
                @staticmethod
                def to_dtype(x, dtype, src_dtype=None):
                    return f"convert({x})"
            """,
            f"""
            from torch._inductor.codegen.common import OpOverrides

            class AccelOverrides(OpOverrides):
                {T}override of OpsHandler.to_dtype on torch 2.12: not used yet: use_compute_types=True; base is to_dtype(self, x, dtype, src_dtype=None, use_compute_types=True)
                @staticmethod
                def to_dtype(x, dtype, src_dtype=None, use_compute_types=True):
                    return f"convert({{x}})"
            """,
            "2.11", "2.12",
        )

    def test_override_that_cannot_be_fixed_mechanically_gets_the_new_signature(self) -> None:
        self.check(
            """
            from torch._inductor.scheduler import BaseScheduling

            class AccelScheduling(BaseScheduling):
                def codegen_node(self):
                    pass
            """,
            f"""
            from torch._inductor.scheduler import BaseScheduling

            {T}advisory loop-reindexing-fusion (2.13): {next(a for a in ADVISORIES if a.id == "loop-reindexing-fusion").note} (overridden here: codegen_node)
            class AccelScheduling(BaseScheduling):
                {T}override of BaseScheduling.codegen_node on torch 2.15: takes 1 positional arguments (node); base is codegen_node(self, node)
                def codegen_node(self):
                    pass
            """,
            "2.12", "2.15",
        )

    def test_call_site_positional_arguments_follow_the_new_signature(self) -> None:
        # add_lambda_guard is C++ (outside the index): its history is in signature_table
        self.check(
            """
            def install(builder, fn, parts):
                builder.guard_manager.root.add_lambda_guard(fn, parts)
            """,
            f"""
            def install(builder, fn, parts):
                {T}add_lambda_guard() changed in 2.11: new required parameter(s) not passed: user_stack; now add_lambda_guard(self, guard_fn, verbose_code_parts, user_stack)
                builder.guard_manager.root.add_lambda_guard(fn, parts)
            """,
            "2.10", "2.11",
        )

    def test_a_method_gone_from_a_conventional_receiver_is_flagged(self) -> None:
        # SizeVarAllocator.symbolic_hint: 2.11 has it, 2.12 not, and no rule renames it
        self.check(
            """
            from torch._inductor.virtualized import V

            def numel_hint(numel):
                return V.graph.sizevars.symbolic_hint(numel)
            """,
            f"""
            from torch._inductor.virtualized import V

            def numel_hint(numel):
                {T}sizevars.symbolic_hint() is gone on torch 2.15 (removed in 2.12): SizeVarAllocator has no symbolic_hint
                return V.graph.sizevars.symbolic_hint(numel)
            """,
            "2.11", "2.15",
        )

    def test_a_method_already_gone_on_the_source_release_is_flagged_too(self) -> None:
        # guard_leq went in 2.9 (the rule renaming it applies from older releases only)
        self.check(
            """
            from torch._inductor.virtualized import V

            def check(index, size):
                V.graph.sizevars.guard_leq(0, index)
                return V.graph.sizevars.check_lt(index, size)
            """,
            f"""
            from torch._inductor.virtualized import V

            def check(index, size):
                {T}sizevars.guard_leq() is gone on torch 2.12 (last in 2.8, not on torch 2.11 either): SizeVarAllocator has no guard_leq
                V.graph.sizevars.guard_leq(0, index)
                return V.graph.sizevars.check_lt(index, size)
            """,
            "2.11", "2.12",
        )

    def test_a_patch_of_an_inductor_function_or_method_must_accept_the_new_parameters(self) -> None:
        # make_fallback gained get_decomp_fn (2.12); CachingAutotuner.precompile is unchanged
        self.check(
            """
            from torch._inductor import lowering as inductor_lowering
            from torch._inductor.runtime.triton_heuristics import CachingAutotuner

            from .lowering import npu_make_fallback, npu_precompile

            def patch():
                inductor_lowering.make_fallback = npu_make_fallback
                CachingAutotuner.precompile = npu_precompile
            """,
            f"""
            from torch._inductor import lowering as inductor_lowering
            from torch._inductor.runtime.triton_heuristics import CachingAutotuner

            from .lowering import npu_make_fallback, npu_precompile

            def patch():
                {T}patches lowering.make_fallback: its parameters changed in 2.12: the replacement must accept make_fallback(op, layout_constraint=None, warn=True, override_decomp=False, get_decomp_fn=None); Inductor's implementation changed in 2.12: compare the replacement with it
                {_advisory("lowering-registration")}
                inductor_lowering.make_fallback = npu_make_fallback
                CachingAutotuner.precompile = npu_precompile
            """,
            "2.11", "2.12", package="vendor",
        )

    def test_a_replacement_defined_in_the_file_gets_the_new_parameters_at_its_definition(self) -> None:
        # make_fallback gained get_decomp_fn (2.12), BaseView.mark_reuse graph_reuse (2.13); the
        # maintainers of a real NPU backend added both to their replacements, as an override would
        self.check(
            """
            from torch._inductor import ir
            from torch._inductor import lowering as inductor_lowering

            def npu_make_fallback(op, layout_constraint=None, warn=True, override_decomp=False):
                return op

            def patch():
                def mark_reuse(self, users):
                    self.data.mark_reuse(users)

                inductor_lowering.make_fallback = npu_make_fallback
                ir.BaseView.mark_reuse = mark_reuse
            """,
            f"""
            from torch._inductor import ir
            from torch._inductor import lowering as inductor_lowering

            {T}replaces lowering.make_fallback on torch 2.13: Inductor's implementation changed in 2.12: compare and re-sync; not used yet: get_decomp_fn=None; Inductor's is make_fallback(op, layout_constraint=None, warn=True, override_decomp=False, get_decomp_fn=None)
            def npu_make_fallback(op, layout_constraint=None, warn=True, override_decomp=False,
                                  get_decomp_fn=None):
                return op

            def patch():
                {T}replaces BaseView.mark_reuse on torch 2.13: Inductor's implementation changed in 2.13: compare and re-sync; not used yet: graph_reuse=True; Inductor's is mark_reuse(self, users, *, graph_reuse=True)
                def mark_reuse(self, users, *, graph_reuse=True):
                    self.data.mark_reuse(users)

                {_advisory("lowering-registration")}
                inductor_lowering.make_fallback = npu_make_fallback
                ir.BaseView.mark_reuse = mark_reuse
            """,
            "2.11", "2.13", package="vendor",
        )

    def test_a_module_level_copy_of_a_changed_inductor_function_is_fitted_like_a_replacement(self) -> None:
        # a vendored lowering.py keeps its own make_fallback (the 2.11 parameters exactly);
        # a namesake with other parameters is not a copy
        self.check(
            """
            from torch._inductor import ir

            def make_fallback(op, layout_constraint=None, warn=True, override_decomp=False):
                return op

            def ceildiv(a, b):
                return -(a // -b)
            """,
            f"""
            from torch._inductor import ir

            {T}copies lowering.make_fallback on torch 2.12: Inductor's implementation changed in 2.12: compare and re-sync; not used yet: get_decomp_fn=None; Inductor's is make_fallback(op, layout_constraint=None, warn=True, override_decomp=False, get_decomp_fn=None)
            def make_fallback(op, layout_constraint=None, warn=True, override_decomp=False,
                              get_decomp_fn=None):
                return op

            def ceildiv(a, b):
                return -(a // -b)
            """,
            "2.11", "2.12",
        )
        # ceildiv(numer, denom) became ceildiv(number, denom) in 2.8: a namesake is left alone
        namesake = "from torch._inductor import ir\n\ndef ceildiv(a, b):\n    return -(a // -b)\n"
        self.check(namesake, namesake, "2.7", "2.8")

    def test_a_replacement_whose_inductor_body_changed_gets_a_note_and_no_parameters(self) -> None:
        # _get_optimization_cflags changed its body, not its parameters, in 2.10: the replacement
        # (which never took min_optimize) is not given the parameter by this upgrade
        code = """
            from torch._inductor import cpp_builder

            def _get_optimization_cflags(cpp_compiler):
                return [], []

            def patch():
                cpp_builder._get_optimization_cflags = _get_optimization_cflags
            """
        note = (f"{T}replaces cpp_builder._get_optimization_cflags on torch 2.10: Inductor's implementation "
                "changed in 2.10: compare and re-sync")
        self.check(code, code.replace("            def _get_opt", f"            {note}\n            def _get_opt"),
                   "2.9", "2.10")

    def test_copies_whose_inductor_implementation_changed_share_one_note_per_module(self) -> None:
        # both bodies changed in Inductor's lowering.py between 2.13 and 2.14, not their parameters
        code = """
            from torch._inductor import ir

            def _convert_element_type(x, dtype):
                return x

            def _full(fill_value, device, dtype, size):
                return fill_value
            """
        note = (f"{T}copy of an Inductor function whose implementation changed after torch 2.13 (same name and "
                "parameters): compare with Inductor's on torch 2.14 and re-sync (also used at +3 lines from here)")
        self.check(code, code.replace("            def _convert", f"            {note}\n            def _convert"),
                   "2.13", "2.14")
        self.check(code, code, "2.14", "2.15")  # unchanged since: nothing to re-sync

    def test_an_override_whose_parameters_do_not_line_up_gets_a_note_not_more_parameters(self) -> None:
        # the base is call_kernel(self, name, node=None, deallocate_ws=True): the vendor's `name`
        # sits where the base has node, so appending node= would not make it compatible
        code = """
            from torch._inductor.codegen.simd import SIMDKernel

            class MlirKernel(SIMDKernel):
                def call_kernel(self, call_args, name):
                    pass
            """
        note = (f"{T}override of SIMDKernel.call_kernel on torch 2.10: parameter(s) name not in the base's "
                "position(s); base is call_kernel(self, name, node=None, deallocate_ws=True)")
        self.check(code, code.replace("    def call_kernel", f"    {note}\n                def call_kernel"),
                   "2.9", "2.10")

    def test_a_base_that_moved_keeps_its_methods(self) -> None:
        # template_heuristics became heuristics.template (2.14); should_run did not go
        result = UpgradeCommand(CodemodContext(), "2.13", "2.15").transform_module(cst.parse_module(
            "from torch._inductor.template_heuristics.base import TemplateConfigHeuristics\n\n"
            "class H(TemplateConfigHeuristics):\n"
            "    def should_run(self, inputs):\n"
            "        return True\n")).code
        assert "from torch._inductor.heuristics.template.base import TemplateConfigHeuristics" in result
        assert "is gone" not in result

    def test_calls_through_an_alias_or_an_imported_class_are_checked(self) -> None:
        # ceildiv's numer became number (2.8); CppCodeCache.load lost source_code (2.8)
        result = UpgradeCommand(CodemodContext(), "2.6", "2.15").transform_module(cst.parse_module(
            "from torch._inductor.codecache import CppCodeCache\n"
            "from torch._inductor.utils import ceildiv as cdiv\n\n"
            "def blocks(n):\n"
            "    return cdiv(numer=n, denom=64)\n\n"
            "def build(code):\n"
            "    return CppCodeCache.load(code, device_type='cpu')\n")).code
        result = join_notes(result)
        # numer -> number is mechanical (same slot, kind and default, one spelling grown): renamed
        assert "return cdiv(number=n, denom=64)\n" in result and "ceildiv() changed" not in result
        assert "CppCodeCache.load() changed in 2.8" in result or "load() changed in 2.8" in result

    def test_only_a_mechanical_rename_is_applied(self) -> None:
        numer, number = Param("numer", "positional", None), Param("number", "positional", None)
        assert mechanical_rename(numer, number)
        assert mechanical_rename(Param("strict_sum", "kwonly", "False"), Param("strict_reduction", "kwonly", "False"))
        assert not mechanical_rename(Param("compile_only", "positional", None), Param("do_link", "positional", None))
        assert not mechanical_rename(Param("src", "positional", "1"), Param("source", "positional", "2"))
        assert not mechanical_rename(numer, Param("number", "kwonly", None))
        # a positional argument in a mechanically renamed slot needs nothing; a keyword is renamed
        changes = compare(Signature("numer, denom", "f"), Signature("number, denom", "f"))
        assert plan_call(changes, 2, []).problems == [] and not plan_call(changes, 2, []).edits
        plan = plan_call(changes, 0, ["numer", "denom"])
        assert plan.rename_keywords == {"numer": "number"} and not plan.problems

    def test_a_renamed_keyword_is_flagged_not_guessed(self) -> None:
        # the index pairs compile_only with do_link (same slot): not provably a rename
        result = UpgradeCommand(CodemodContext(), "2.6", "2.15").transform_module(
            cst.parse_module("from torch._inductor.cpp_builder import get_cpp_options\n"
                             "opts = get_cpp_options('g++', compile_only=True)\n")).code
        result = join_notes(result)
        assert "compile_only=True" in result and "keyword compile_only= is gone; its place is now do_link" in result


class TestAdvisories(UpgradeTest):
    def test_each_kind_of_use_site(self) -> None:
        self.check(
            """
            from torch._inductor.decomposition import decompositions
            from torch._inductor.virtualized import V

            decompositions[key] = fn
            n = V.graph.sizevars.optimization_hint(x)
            """,
            f"""
            from torch._inductor.decomposition import decompositions
            from torch._inductor.virtualized import V

            {_advisory("decomposition-table-cache")}
            decompositions[key] = fn
            {_advisory("optimization-hint-fallback")}
            n = V.graph.sizevars.optimization_hint(x)
            """,
            "2.11", "2.12",
        )

    def test_advisories_outside_the_window_are_not_given(self) -> None:
        code = """
            from torch._inductor.virtualized import V

            n = V.graph.sizevars.optimization_hint(x)
            """
        self.check(code, code, "2.12", "2.15")
        assert {a.id for a in select_advisories("2.6", "2.15")} == {a.id for a in ADVISORIES}
        assert not select_advisories("2.15", "2.15")


def test_vendor_fixture_tree_upgrades_with_every_import_resolved_or_flagged(tmp_path: Path) -> None:
    tree = tmp_path / "vendor26"
    shutil.copytree(FIXTURES / "vendor26", tree)
    index = load_index()
    before = unresolved_imports(list(iter_python_files([tree])), "2.15", index)
    assert {(u.module.rpartition(".")[2], u.name) for u in before} == {
        ("codecache", "TritonFuture"), ("codecache", "Union"), ("triton_heuristics", "grid"),
        ("triton", "OpsHandler"), ("cpp_utils", "DEVICE_TO_ATEN")}
    report = run([tree], Job("upgrade", "2.6", "2.15", mode="write"), jobs=2)
    assert not report.errors and len(report.changed) == 7
    after = unresolved_imports(list(iter_python_files([tree])), "2.15", index)
    assert len(after) == 3 and all(u.marked for u in after)  # Union and OpsHandler moved
    for path in iter_python_files([tree]):
        compile(path.read_bytes(), str(path), "exec")
    # the fixture meets every advisory and redesign
    assert set(report.advisories()) == {a.id for a in ADVISORIES} | {r.id for r in REDESIGNS}
    again = run([tree], Job("upgrade", "2.6", "2.15", mode="check"), jobs=1)
    assert not again.changed and not again.errors


class TestConfigDefaults(UpgradeTest):
    CONFIG = """
        from torch._inductor import config

        config.allow_buffer_reuse = False
        config.triton.unique_kernel_names = True

        def configure(verbose):
            config.debug = verbose
        """

    def test_a_new_default_is_noted_where_the_backend_sets_inductor_config(self) -> None:
        note = _advisory("loop-reindexing-fusion") + " (Inductor config is set here) (also used at +1 line from here)"
        # settings of constants are sites (one note for the module); a value passed in is not
        after = self.CONFIG.replace("        config.allow_buffer_reuse", f"        {note}\n        config.allow_buffer_reuse")
        self.check(self.CONFIG, after, "2.12", "2.13")

    def test_a_backend_that_sets_the_new_option_already_gets_no_note(self) -> None:
        code = self.CONFIG.replace("config.allow_buffer_reuse = False",
                                   "config.allow_buffer_reuse = False\n        config.loop_reindexing_after_fusion = False")
        self.check(code, code, "2.12", "2.13")


class TestRedesigns(UpgradeTest):
    def test_a_copy_of_make_fallback_is_flagged_where_it_reads_the_tables(self) -> None:
        lowering = _advisory("lowering-registration")
        decomp = _advisory("decomposition-table-cache")
        self.check(
            """
            from torch._inductor.decomposition import decompositions
            from torch._inductor.lowering import fallback_handler, lowerings

            def npu_make_fallback(op, layout_constraint=None, warn=True, override_decomp=False):
                if op in decompositions and not override_decomp:
                    raise RuntimeError(op)
                lowerings[op] = fallback_handler(op)
            """,
            f"""
            from torch._inductor.decomposition import decompositions
            from torch._inductor.lowering import fallback_handler, lowerings

            def npu_make_fallback(op, layout_constraint=None, warn=True, override_decomp=False):
                {decomp}
                if op in decompositions and not override_decomp:
                    raise RuntimeError(op)
                {lowering}
                lowerings[op] = fallback_handler(op)
            """,
            "2.11", "2.12",
        )

    def test_a_handler_intercepting_ops_in_getattr_is_flagged_one_in_default_is_not(self) -> None:
        code = """
            from torch._inductor.ops_handler import WrapperHandler

            class Counting(WrapperHandler):
                def __getattr__(self, name):
                    return getattr(self._inner, name)

            class Tracing(WrapperHandler):
                def _default(self, name, args, kwargs):
                    return super()._default(name, args, kwargs)
            """
        note = _advisory("ops-handler-default") + " (overridden here: __getattr__)"
        self.check(code, code.replace("class Counting", f"{note}\n            class Counting"), "2.6", "2.7")
        self.check(code, code, "2.7", "2.15")

    def test_code_reading_a_custom_pass_hook_is_flagged_from_2_13(self) -> None:
        code = """
            from torch._inductor import config

            def install(graph_pass):
                previous = config.post_grad_custom_post_pass
                config.post_grad_custom_post_pass = graph_pass
            """
        note = _advisory("custom-graph-pass-lists") + " (also used at +1 line from here)"
        self.check(code, code.replace("previous = ", f"{note}\n                previous = "), "2.12", "2.13")
        self.check(code, code, "2.13", "2.15")

    def test_registering_a_device_interface_is_flagged_for_the_benchmarker_from_2_13(self) -> None:
        code = """
            from torch._dynamo.device_interface import register_interface_for_device

            register_interface_for_device("npu", NpuInterface)
            """
        note = _advisory("gpu-benchmark-device-types")
        self.check(code, code.replace("register_interface_for_device(\"npu\"", f"{note}\n            "
                                      "register_interface_for_device(\"npu\""), "2.12", "2.13")
        self.check(code, code, "2.13", "2.14")

    def test_a_dependency_class_lacking_the_new_abstract_method_is_flagged(self) -> None:
        code = """
            from torch._inductor.dependencies import Dep, MemoryDep

            class NpuDep(Dep):
                def rename(self, renames):
                    return self

            class Complete(Dep):
                def numel_hint(self):
                    return 0

            class Concrete(MemoryDep):
                pass
            """
        note = _advisory("dep-numel-hint") + " (not defined here: numel_hint)"
        self.check(code, code.replace("            class NpuDep", f"            {note}\n            class NpuDep"),
                   "2.9", "2.10")

    def test_a_redesign_applies_inside_its_window_only(self) -> None:
        assert "fx-graph-cache-key" in {r.id for r in select_changes("2.11", "2.12")}
        assert "fx-graph-cache-key" not in {r.id for r in select_changes("2.12", "2.15")}
        assert "fx-graph-cache-key" not in {r.id for r in select_changes("2.6", "2.11")}


def test_every_redesign_says_what_changed_what_to_do_and_where_it_was_read() -> None:
    for r in REDESIGNS:
        assert r.kind == "redesign" and r.registry and r.note and r.action and (r.qualnames or r.base)
        # each record cites the release before and the release of the change, by file:line
        before = f"{r.release.major}.{r.release.minor - 1}."
        assert before in r.confirmed and f"{r.release}." in r.confirmed and ".py:" in r.confirmed
        assert r.message.startswith(f"redesign {r.id} ({r.release}) of ") and "; to do: " in r.message
