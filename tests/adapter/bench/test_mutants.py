"""Planted bugs in real programs are caught: by the checker's error, or by outputs
farther from CPU eager than the unmutated programs'. The oracle is eager torch
on the CPU, not the reference interpreter the emulator's vector steps share code
with; and every checker rule catches some mutant no other rule catches."""

from __future__ import annotations

import pytest

from spyre_adapter.bench.mutants import OPERATORS
from spyre_adapter.bench.mutation_cases import function_cases, kernel_cases
from spyre_adapter.bench.mutation_runs import rule_self_test, run_all, run_case, summary
from spyre_adapter.model.checker_rules import RULES
from spyre_adapter.model.machine import DEFAULT


def test_planted_bugs_are_caught_against_cpu_eager() -> None:
    s = summary(run_all(function_cases(quick=True), kernel_cases(DEFAULT), DEFAULT, per_operator=1))
    assert set(s["by_operator"]) == set(OPERATORS), set(OPERATORS) - set(s["by_operator"])
    for op in ("retag_barrier", "drop_core_barrier", "drop_barrier", "lose_message", "swap_messages", "lose_chunk",
               "overlap_alloc", "stale_read", "duplicate_core"):
        assert s["by_operator"][op]["killed"] >= 1, op
    assert s["killed_ratio"] >= 0.95, s["survivors"]


def test_the_decoder_block_and_its_attention_are_mutated_too() -> None:
    (block,) = [c for c in function_cases() if c.name == "llama_block"]
    judged = run_case(block, per_operator=1, seed=3)
    s = summary([(block.name, kind, o) for kind, o in judged])
    assert {"attention", "matmul", "loop"} <= set(s["by_kind"])
    assert s["by_operator"]["lose_message"]["mutants"] >= 1  # the block's matmuls share operands over the ring
    assert s["killed_ratio"] >= 0.95, s["survivors"]


@pytest.fixture(scope="module")
def self_test() -> dict[str, dict[str, int]]:
    scatter = [c for c in function_cases(quick=True) if c.name == "index_put"]
    return rule_self_test(scatter, kernel_cases(DEFAULT), DEFAULT, per_operator=1)


@pytest.mark.parametrize("rule", sorted(RULES))
def test_every_checker_rule_catches_a_mutant_no_other_rule_catches(self_test, rule: str) -> None:
    """With the rule switched off the checker catches fewer mutants: some planted
    bug is caught by that rule alone."""
    assert self_test[rule]["mutants"] == self_test["all rules"]["mutants"]
    assert self_test[rule]["killed_by_checker"] < self_test["all rules"]["killed_by_checker"], self_test
