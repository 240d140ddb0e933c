"""A name the upgrade moves into a module the file already imports from joins that
import, in the list's own order and layout; nothing else moves. Expected outputs are
written by hand."""

from __future__ import annotations

import libcst as cst

from spyre_codemods.import_merge import merge_names

from .test_codemod_upgrade_checks import UpgradeTest


class MergeTest(UpgradeTest):
    def test_a_moved_statement_joins_the_files_import_of_that_module(self) -> None:
        # codecache re-exported typing's Union on 2.6 only
        self.check(
            """
            from typing import Optional

            from torch._inductor.codecache import Union
            from torch._inductor.virtualized import V

            def f(x: Optional[Union[int, str]]):
                return V.graph
            """,
            """
            from typing import Optional, Union

            from torch._inductor.virtualized import V

            def f(x: Optional[Union[int, str]]):
                return V.graph
            """,
            "2.6", "2.15",
        )

    def test_a_name_moved_out_of_a_group_joins_a_grouped_import_one_per_line(self) -> None:
        self.check(
            """
            from torch._inductor.ops_handler import (
                DefaultHandler,
                ReductionType,
            )
            from torch._inductor.codegen.triton import (
                TritonKernel,
                OpsHandler,
            )
            """,
            """
            from torch._inductor.ops_handler import (
                DefaultHandler,
                OpsHandler,
                ReductionType,
            )
            from torch._inductor.codegen.triton import (
                TritonKernel,
            )
            """,
            "2.6", "2.15",
        )

    def test_an_import_inside_a_function_stays_local(self) -> None:
        self.check(
            """
            from typing import Optional

            def f():
                from torch._inductor.codecache import Union
                return Optional, Union
            """,
            """
            from typing import Optional

            def f():
                from typing import Union
                return Optional, Union
            """,
            "2.6", "2.15",
        )


def _merged(src: str, *names: str) -> str:
    node = cst.parse_statement(src).body[0]
    assert isinstance(node, cst.ImportFrom)
    merged = merge_names(node, [cst.ImportAlias(name=cst.Name(n)) for n in names])
    return cst.Module(body=[cst.SimpleStatementLine(body=[merged])]).code


def test_an_unsorted_list_gets_the_name_at_its_end_and_known_names_are_skipped() -> None:
    assert _merged("from m import b, a\n", "c", "a") == "from m import b, a, c\n"
    assert _merged("from m import a, c\n", "b") == "from m import a, b, c\n"


def test_a_hanging_parenthesised_list_keeps_its_alignment() -> None:
    assert _merged("from m import (alpha,\n               gamma)\n", "beta") == (
        "from m import (alpha,\n               beta,\n               gamma)\n")
