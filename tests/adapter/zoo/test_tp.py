"""Tensor parallelism over emulated cards under torchrun (DeviceMesh("spyre") and
parallelize_module): decode token-identical to single-card CPU eager, the
collectives charged on the link, and each card's memory checked."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

# The tensor-parallel runner shards transformers models (the hf extra; not in the torch 2.6 cell).
pytest.importorskip("transformers", reason="the tensor-parallel runner builds transformers models")

ENV = {k: v for k, v in os.environ.items() if k not in ("LOCAL_RANK", "RANK", "WORLD_SIZE", "SPYRE_MACHINE")}


def _tp(ranks: int, *args: str, machine: str | None = None, eager: bool = True) -> subprocess.CompletedProcess[str]:
    env = dict(ENV, **({"SPYRE_MACHINE": machine} if machine else {}))
    return subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={ranks}",
                           "-m", "spyre_adapter.zoo.tp", *(("--eager",) if eager else ()), "--new-tokens", "6", *args],
                          capture_output=True, text=True, env=env, timeout=600)


def _result(out: subprocess.CompletedProcess[str]) -> dict:
    assert out.returncode == 0, out.stderr[-4000:]
    return json.loads(next(line for line in out.stdout.splitlines() if line.startswith("{")))


@pytest.mark.parametrize(("ranks", "family", "extra"), [(2, "llama", ()), (2, "granite", ()),
                                                         (4, "llama", ("--kv-heads", "4"))])
def test_sharded_decode_is_token_identical_to_cpu_eager(ranks: int, family: str, extra: tuple[str, ...]) -> None:
    r = _result(_tp(ranks, "--family", family, *extra))
    assert r["tp"] == ranks and r["tokens_identical"], r
    assert r["max_abs_logit_error"] < 1e-4
    # two all_reduces per layer per step (attention output, MLP down), charged on the link
    assert r["collectives"]["all_reduce"]["calls"] >= 2 * 2 * 6
    assert r["link_us_per_token"] > 0 and not r["fallbacks"]


def test_compiled_sharded_decode_runs_its_all_reduces_as_programs() -> None:
    r = _result(_tp(2, "--family", "granite", eager=False))
    assert r["compiled"] and r["tokens_identical"], r
    assert not r["fallbacks"] and not r["collectives_on_host"], (r["fallbacks"], r["collectives_on_host"])
    calls = r["collectives"]["all_reduce"]
    assert calls["calls"] >= 2 * 2 * 6 and all(a.endswith("(program)") for a in calls["algorithms"])
    assert 0 < r["link_us_per_token"] < r["modeled_us_per_token"]


def test_a_model_larger_than_one_cards_dram_is_refused_at_tp1_and_runs_sharded() -> None:
    # the small llama holds 7.4 MiB of fp32 weights: 6 MB of DRAM holds half of them, not all
    one = _tp(1, machine="dram_bytes=6000000")
    assert one.returncode != 0
    line = next(x for x in one.stderr.splitlines() if x.startswith("error:"))
    assert line.startswith("error: the model does not fit 1 card: each needs 7.38 MiB of weights") and \
        line.endswith("> 5.72 MiB of DRAM per card (dram_bytes); use more cards (--tp)")
    r = _result(_tp(2, machine="dram_bytes=6000000"))
    assert r["tokens_identical"] and r["card_bytes"]["total"] <= r["dram_bytes"] == 6000000


def test_heads_that_do_not_split_are_refused_in_one_line() -> None:
    out = _tp(4)  # the small llama has 2 KV heads
    assert out.returncode != 0
    assert next(x for x in out.stderr.splitlines() if x.startswith("error:")) == (
        "error: --tp 4 is not accepted for this model: num_key_value_heads=2 does not split over 4 cards "
        "(use a divisor of it)")


def test_run_tp_launches_the_ranks_itself() -> None:
    """``spyre-adapter run --tp N`` spawns torchrun; the ranks' own checks answer (here: heads that do not split)."""
    out = subprocess.run([sys.executable, "-m", "spyre_adapter.cli", "run", "--model", "hf:llama", "--tp", "4",
                          "--new-tokens", "2"], capture_output=True, text=True, env=ENV, timeout=300)
    assert out.returncode != 0
    assert "error: --tp 4 is not accepted for this model: num_key_value_heads=2 does not split over 4 cards" in \
        out.stderr
