"""One note per place: advisory uses grouped per function, class or module, a TODO an
earlier run left updated where it is (never stacked), the summary counting sites
and notes apart, and notes wrapped to the file's line length (a hanging indent of three
spaces). Expected outputs are written by hand."""

from __future__ import annotations

from pathlib import Path

from spyre_codemods.advisories import ADVISORIES
from spyre_codemods.driver import Job, run
from spyre_codemods.notes import wrap_note

from .joined_notes import join_notes
from .test_codemod_upgrade_checks import UpgradeTest

T = "# TODO(spyre-adapter upgrade): "
HINT = T + next(a for a in ADVISORIES if a.id == "optimization-hint-fallback").message
DECOMP = T + next(a for a in ADVISORIES if a.id == "decomposition-table-cache").message


class NotesTest(UpgradeTest):
    def test_uses_in_one_function_share_a_note_above_the_first(self) -> None:
        self.check(
            """
            from torch._inductor.virtualized import V

            class Kernel:
                def grid(self, numel, rnumel):
                    x = V.graph.sizevars.optimization_hint(numel)

                    r = V.graph.sizevars.optimization_hint(rnumel)
                    return x, r

                def split(self, numel):
                    return V.graph.sizevars.optimization_hint(numel) // 2
            """,
            f"""
            from torch._inductor.virtualized import V

            class Kernel:
                def grid(self, numel, rnumel):
                    {HINT} (also used at +2 lines from here)
                    x = V.graph.sizevars.optimization_hint(numel)

                    r = V.graph.sizevars.optimization_hint(rnumel)
                    return x, r

                def split(self, numel):
                    {HINT}
                    return V.graph.sizevars.optimization_hint(numel) // 2
            """,
            "2.11", "2.12",
        )

    def test_a_nested_defs_decorators_belong_to_the_function_holding_it(self) -> None:
        self.check(
            """
            from torch._inductor.decomposition import decompositions, register_decomposition

            def register(ops, aten):
                for op in ops:
                    decompositions.pop(op, None)

                @register_decomposition([aten.expm1])
                def expm1(x):
                    return x
            """,
            f"""
            from torch._inductor.decomposition import decompositions, register_decomposition

            def register(ops, aten):
                for op in ops:
                    {DECOMP} (also used at +2 lines from here)
                    decompositions.pop(op, None)

                @register_decomposition([aten.expm1])
                def expm1(x):
                    return x
            """,
            "2.11", "2.12",
        )

    def test_module_level_uses_share_one_note(self) -> None:
        self.check(
            """
            from torch._inductor.decomposition import decompositions

            decompositions.pop(1, None)
            for op in (2, 3):
                decompositions.pop(op, None)
            """,
            f"""
            from torch._inductor.decomposition import decompositions

            {DECOMP} (also used at +2 lines from here)
            decompositions.pop(1, None)
            for op in (2, 3):
                decompositions.pop(op, None)
            """,
            "2.11", "2.12",
        )

    def test_a_note_an_earlier_run_left_is_updated_where_it_is(self) -> None:
        # same subject (the advisory), other words: replaced in place, other comments kept
        self.check(
            f"""
            from torch._inductor.virtualized import V

            def grid(numel):
                # keep me
                {T}advisory optimization-hint-fallback (2.12): older wording
                return V.graph.sizevars.optimization_hint(numel)
            """,
            f"""
            from torch._inductor.virtualized import V

            def grid(numel):
                # keep me
                {HINT}
                return V.graph.sizevars.optimization_hint(numel)
            """,
            "2.11", "2.12",
        )


def test_the_summary_counts_sites_and_notes_apart(tmp_path: Path) -> None:
    (tmp_path / "k.py").write_text(
        "from torch._inductor.virtualized import V\n\n"
        "def grid(a, b, c):\n"
        "    x = V.graph.sizevars.size_hint(a)\n"
        "    y = V.graph.sizevars.size_hint(b)\n"
        "    return x, y, V.graph.sizevars.size_hint(c)\n")
    report = run([tmp_path], Job("upgrade", "2.11", "2.12", mode="write"))
    summary = report.summary()
    assert summary["advisories"] == {"optimization-hint-fallback": 3}
    assert summary["noted_sites"] == 3 and summary["notes"] == 1
    text = (tmp_path / "k.py").read_text()
    assert text.count(T) == 1 and "(also used at +1, +2 lines from here)" in text
    again = run([tmp_path], Job("upgrade", "2.11", "2.12", mode="check"))
    assert not again.changed and again.summary()["notes"] == 1


def test_a_long_note_is_wrapped_with_a_hanging_indent() -> None:
    assert wrap_note("# TODO(spyre-adapter upgrade): alpha beta gamma delta epsilon zeta eta theta", 40) == [
        "# TODO(spyre-adapter upgrade): alpha",
        "#   beta gamma delta epsilon zeta eta",
        "#   theta",
    ]
    assert wrap_note("# TODO(spyre-adapter upgrade): short", 79) == ["# TODO(spyre-adapter upgrade): short"]


def test_notes_fit_the_files_line_length_and_offsets_count_their_lines(tmp_path: Path) -> None:
    path = tmp_path / "k.py"
    path.write_text(
        "from torch._inductor.decomposition import decompositions\n"
        "from torch._inductor.virtualized import V\n\n"
        "def grid(numel):\n"
        "    x = V.graph.sizevars.optimization_hint(numel)\n"
        "    decompositions.pop(numel, None)\n"
        "    return x, V.graph.sizevars.optimization_hint(numel)\n")
    run([tmp_path], Job("upgrade", "2.11", "2.12", mode="write"))
    lines = path.read_text().splitlines()
    assert max(len(line) for line in lines) <= 79
    decomp = lines.index("    " + wrap_note(DECOMP, 75)[0])
    decomp_lines = len(wrap_note(DECOMP, 75))
    assert decomp_lines > 1
    assert lines[decomp:decomp + decomp_lines] == ["    " + line for line in wrap_note(DECOMP, 75)]
    # the hint's other use is 2 statements below its first, with the decomposition note between
    assert f"(also used at +{2 + decomp_lines} lines from here)" in join_notes("\n".join(lines))
    assert not run([tmp_path], Job("upgrade", "2.11", "2.12", mode="check")).changed


def test_a_note_wrapped_at_another_width_is_kept(tmp_path: Path) -> None:
    # an earlier run wrapped the note when the file's longest line was longer: same words, kept
    path = tmp_path / "k.py"
    wide = wrap_note(HINT, 110)
    path.write_text("from torch._inductor.virtualized import V\n\n"
                    + "".join(line + "\n" for line in wide)
                    + "n = V.graph.sizevars.optimization_hint(x)\n")
    before = path.read_text()
    assert not run([tmp_path], Job("upgrade", "2.11", "2.12", mode="check")).changed
    assert path.read_text() == before


def test_an_override_note_whose_subject_is_wrapped_is_read_back(tmp_path: Path) -> None:
    # the "not used yet" list is read back from the joined note, even when the wrap falls
    # inside its subject: the check after the write reports the same TODOs
    path = tmp_path / "w.py"
    path.write_text("from torch._inductor.codegen.wrapper import PythonWrapperCodegen\n\n"
                    "class W(PythonWrapperCodegen):\n"
                    "    def generate_kernel_call(self, kernel_name, call_args, *, device=None, triton=True,\n"
                    "                             arg_types=None, raw_args=None, triton_meta=None):\n"
                    "        return kernel_name\n")
    first = run([tmp_path], Job("upgrade", "2.11", "2.12", mode="write"))
    todos = [f.message for r in first.files for f in r.findings if f.kind == "todo"]
    assert any("not used yet" in m for m in todos)
    again = run([tmp_path], Job("upgrade", "2.11", "2.12", mode="check"))
    assert not again.changed
    assert [f.message for r in again.files for f in r.findings if f.kind == "todo"] == todos
