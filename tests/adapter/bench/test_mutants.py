"""Planted bugs in real compiled programs are caught: an error, or numbers that
no longer match CPU eager. The emulator's results come from the program."""

from __future__ import annotations

from collections import Counter

import torch

from spyre_shims import kernel_ir as kir
from spyre_shims.runtime import capture_graphs, reset_compiled
from tests.support import kernels as K

from spyre_adapter.backend.spyre import plan
from spyre_adapter.bench.mutants import OPERATORS, judge, mutants, reference_run
from spyre_adapter.model.machine import DEFAULT
from spyre_adapter.zoo import blocks as models


def _block_kernels() -> list:
    cfg = models.ModelConfig(hidden=128, heads=2, kv_heads=1, intermediate=256, seq=64)
    model = models.build("llama-block", cfg)
    x = models.example_inputs("llama-block", cfg)
    reset_compiled()
    with torch.no_grad(), capture_graphs() as graphs:
        torch.compile(model.to("spyre"), dynamic=False)(x.to("spyre"))
    return [k for g in graphs for k in g.kernels if not (isinstance(k, kir.ExternKernel) and k.op == "attention")]


def test_planted_bugs_are_caught() -> None:
    outcomes = []
    for kernel in _block_kernels():
        p = plan(kernel, DEFAULT, {})
        inputs = K.buffers(kernel, seed=1)
        want = reference_run(kernel, inputs)
        for mut in mutants(p, DEFAULT, per_operator=2, seed=3):
            outcomes.append(judge(mut, inputs, want, K.outputs(kernel), DEFAULT))
    by_op = Counter(o.mutant.operator for o in outcomes)
    killed = sum(o.killed for o in outcomes)
    survivors = [(o.mutant.operator, o.mutant.kernel, o.mutant.detail) for o in outcomes if not o.killed]
    assert set(by_op) >= set(OPERATORS) - {"drop_barrier"}  # the block's kernels need no barrier
    assert killed / len(outcomes) >= 0.95, survivors
