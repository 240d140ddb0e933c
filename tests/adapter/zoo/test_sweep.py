"""The transformers family sweep: a fixed sample of families (those whose
crashes and fallbacks the sweep found) run static and dynamic on the device,
token-identical to CPU eager; the sweep command end to end on one family; how
families that do not build are told apart."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import torch

pytest.importorskip("transformers", reason="transformers is the `hf` extra")

from spyre_adapter.cli.main import main  # noqa: E402
from spyre_adapter.zoo.sweep.families import SMALL, causal_lm_families, small_config  # noqa: E402
from spyre_adapter.zoo.sweep.item import Item, no_zero_matrices, run_item, sweep_items  # noqa: E402
from spyre_adapter.zoo.sweep.summary import build, markdown  # noqa: E402

#: The CI sample: (family, shape mode) -> what it needed (see CHANGELOG, issue 33).
SAMPLE = {
    ("gpt2", "dynamic"): "learned absolute positions; hand-written attention at a head dim under a stick",
    ("gpt_neox", "dynamic"): "partial rotary: symbolic attention sizes under dynamic=True",
    ("opt", "static"): "position ids from the attention mask: cumsum as a scan program",
    ("opt", "dynamic"): "the same cumsum at every decode length",
    ("afmoe", "static"): "sigmoid router: top-k on dim 1 of a zero-initialised gate",
    ("mamba", "static"): "causal depthwise conv1d",
    ("deepseek_v2", "static"): "rotary embedding in complex numbers",
    ("qwen3_next", "static"): "gated delta rule: a unit triangular solve (UT transform)",
    ("phimoe", "static"): "sparsemixer: expert indices written through an in-place cat, read as gather indices",
    ("nemotron_h", "static"): "grouped RMSNorm: rows ending inside a kernel's dimension",
}


@pytest.mark.parametrize("family,shapes", sorted(SAMPLE))
def test_sample_family_is_token_identical_without_fallbacks(family: str, shapes: str) -> None:
    r = run_item(Item(family, shapes))
    assert r["status"] == "pass", r
    assert r["tokens_identical"] and r["fallbacks"] == [] and r["graph_breaks"] == 0, r
    assert r["steps_compared"] == 4 and r["recompiles"] <= 2, r


def test_the_sweep_command_writes_its_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Worker processes, journals, and the summary (a family that needs a missing
    dependency listed with the reason, never counted as run)."""
    families = ["llama"] + (["gemma3n"] if importlib.util.find_spec("timm") is None else [])
    rc = main(["models", "--sweep", "--families", *families, "--shapes", "static", "--workers", "1",
               "--workdir", str(tmp_path), "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert rc == 0, out
    s = json.loads((tmp_path / "sweep.json").read_text())
    assert s["complete"] and s["families"] == len(families) and s["families_built"] == 1
    assert all(r["code"] and r["code"] != "unknown" for r in s["items"])
    assert s["counts"]["static"]["pass"] == 1 and s["headline"]["static"]["token_identical_share"] == 1.0
    text = (tmp_path / "SWEEP.md").read_text()
    assert "| llama | pass; 1 recompile(s) |" in text and "static: 1/1 families token-identical" in out
    if "gemma3n" in families:
        assert s["counts"]["static"]["needs"] == 1 and "needs timm" in text


def test_every_family_of_the_auto_mapping_is_enumerated_and_small() -> None:
    families = causal_lm_families()
    types = [f.model_type for f in families]
    assert len(types) == len(set(types)) >= 150 and {"llama", "gpt2", "mixtral", "opt"} <= set(types)
    items = sweep_items(types[:4])
    assert [i.key for i in items][:4] == [f"{types[0]}:static", f"{types[0]}:dynamic", f"{types[1]}:dynamic",
                                          f"{types[1]}:static"]  # every worker gets a mix
    cfg = small_config("qwen3_moe")
    assert (cfg.hidden_size, cfg.num_hidden_layers, cfg.vocab_size, cfg.num_experts) == \
        (SMALL["hidden"], SMALL["layers"], SMALL["vocab"], SMALL["experts"])
    assert small_config("deepseek_v3").num_key_value_heads == SMALL["heads"]  # latent attention: one KV per head


def test_a_heterogeneous_config_is_shrunk_and_stays_heterogeneous() -> None:
    """Gemma 4's layers differ in head dim (its full-attention layers' is twice
    the sliding ones'); reading such a size from the whole config raises, so the
    family never built. Small, it keeps one layer of each kind, sizes scaled."""
    from spyre_adapter.zoo.hf import build_model

    cfg = small_config("gemma4_text")
    assert cfg.num_hidden_layers == SMALL["layers"]
    heads = [cfg.per_layer_config[i].head_dim for i in range(SMALL["layers"])]
    assert heads == [SMALL["hidden"] // SMALL["heads"], 2 * SMALL["hidden"] // SMALL["heads"]]
    build_model(cfg, device="meta")
    # The run's report names each layer's size where they differ (it raised reading the global one).
    from spyre_adapter.zoo.hf import _config_summary

    assert _config_summary(cfg)["head_dim"] == heads


def test_sizes_that_live_only_in_sub_configs_are_shrunk() -> None:
    """BLT has no layer count of its own: its patcher, local encoder and decoder
    and global transformer each have one. Unshrunk it needed 17 GiB ("not built")."""
    from spyre_adapter.zoo.hf import build_model, weight_bytes

    cfg = small_config("blt")
    for sub in ("patcher_config", "encoder_config", "decoder_config", "global_config"):
        part = getattr(cfg, sub)
        assert (part.hidden_size, part.num_hidden_layers) == (SMALL["hidden"], SMALL["layers"]), sub
    assert weight_bytes(build_model(cfg, device="meta"))["total"] < 16 * 2**20


def test_zero_initialised_matrices_get_random_values() -> None:
    """An all-zero router gate scores every expert alike; top-k among exact ties
    is unspecified (torch's CPU kernel orders ties by its partial sort)."""
    lin, norm = torch.nn.Linear(8, 4, bias=True), torch.nn.LayerNorm(8)
    with torch.no_grad():
        lin.weight.zero_()
        lin.bias.zero_()
    model = torch.nn.Sequential(lin, norm)
    assert no_zero_matrices(model) == ["0.weight"]
    assert bool(lin.weight.any()) and not bool(lin.bias.any()) and bool((norm.weight == 1).all())
    assert abs(float(lin.weight.detach().std()) - 0.02) < 0.02


def test_summary_counts_and_table() -> None:
    recs = {
        "a:static": {"key": "a:static", "family": "a", "shapes": "static", "status": "pass", "tokens_identical": True,
                     "fallbacks": [], "recompiles": 1, "graph_breaks": 0, "code": "abc1234"},
        "a:dynamic": {"key": "a:dynamic", "family": "a", "shapes": "dynamic", "status": "fallback",
                      "tokens_identical": True, "fallbacks": ["aten op aten.sort.stable"], "recompiles": 2,
                      "graph_breaks": 0},
        "b:static": {"key": "b:static", "family": "b", "shapes": "static", "status": "needs", "error": "needs timm"},
        "b:dynamic": {"key": "b:dynamic", "family": "b", "shapes": "dynamic", "status": "needs", "error": "needs timm"},
    }
    s = build(recs, ["a", "b"], wall_seconds=1.0)
    assert s["families_built"] == 1 and s["counts"]["dynamic"]["fallback"] == 1
    assert s["headline"]["dynamic"] == {"families_run": 1, "token_identical": 1, "token_identical_share": 1.0,
                                        "with_host_fallbacks": 1, "crashes": 0, "with_graph_breaks": 0,
                                        "recompiles_max": 2}
    text = markdown(s)
    assert "| a | pass; 1 recompile(s) | fallback; `aten op aten.sort.stable`; 2 recompile(s) |" in text
    assert "- `b` (needs): needs timm" in text and "| aten op aten.sort.stable | 1 |" not in text
    assert "| `aten op aten.sort.stable` | 1 |" in text
    # Which code each record ran is kept (a resumed or partly re-run sweep mixes them).
    assert s["code"] == {"unrecorded": 3, "abc1234": 1}
    assert "3 from `unrecorded`, 1 from `abc1234`" in text
