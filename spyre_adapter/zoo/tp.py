"""Tensor parallelism on Hugging Face decoders over several emulated Spyre cards,
with torch.distributed's own machinery: ``DeviceMesh("spyre", (tp,))`` and
``parallelize_module`` (attention q/k/v and MLP gate/up column-wise, attention
output and MLP down row-wise: one all_reduce after each, Megatron-style).

Run one process per card, under torchrun::

    torchrun --nproc-per-node 4 -m spyre_adapter.zoo.tp --family llama

Each rank builds the same model (same seed), decodes greedily on CPU eager (the
reference), shards the model over the mesh and decodes again on its card
(compiled unless ``--eager``). Rank 0 prints the result: tokens identical to CPU
eager, the largest logit error, and per decode token the modeled time with the
link's (collectives') share. Before anything runs on the cards, each card's
weights and KV cache are counted against the machine's DRAM (``dram_bytes``):
a model that does not fit is refused with the figures.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

from spyre_adapter.backend.report import format_bytes
from spyre_adapter.backend.session import current
from spyre_adapter.harness.rank_exit import finish
from spyre_adapter.zoo.config import TP_FAMILIES, TP_SIZES
from spyre_adapter.zoo.hf import (DTYPES, HFOptions, StepRecorder, _compare, _phase, _recording, build_model, greedy,
                                  make_config, weight_bytes)

__all__ = ["LAYER_PLAN", "CardMemoryError", "check_divisible", "card_bytes", "shard", "run_tp", "main"]

#: The plan of one decoder layer (module names shared by llama, granite, mistral, qwen2).
LAYER_PLAN = {
    "self_attn.q_proj": "colwise", "self_attn.k_proj": "colwise", "self_attn.v_proj": "colwise",
    "self_attn.o_proj": "rowwise",
    "mlp.gate_proj": "colwise", "mlp.up_proj": "colwise", "mlp.down_proj": "rowwise",
}
#: Size options (the config attributes of :data:`spyre_adapter.zoo.hf.SIZE_KEYS`).
SIZES = TP_SIZES


class CardMemoryError(RuntimeError):
    """A card's share of the model does not fit its DRAM (the message has the figures)."""


def check_divisible(config: Any, tp: int) -> None:
    """One-line ``ValueError`` when the heads, KV heads or MLP width do not split over ``tp`` cards."""
    for attr in ("num_attention_heads", "num_key_value_heads", "intermediate_size"):
        value = getattr(config, attr)
        if value % tp:
            raise ValueError(f"--tp {tp} is not accepted for this model: {attr}={value} does not split over "
                             f"{tp} cards (use a divisor of it)")


def _plan() -> dict[str, Any]:
    return {name: ColwiseParallel() if kind == "colwise" else RowwiseParallel() for name, kind in LAYER_PLAN.items()}


def shard(model: Any, mesh: Any) -> None:
    """Shard every decoder layer of ``model`` over ``mesh`` (:data:`LAYER_PLAN`);
    embeddings, norms and the LM head stay replicated."""
    for layer in model.model.layers:
        parallelize_module(layer, mesh, _plan())


def card_bytes(model: Any, config: Any, opts: HFOptions, tp: int) -> dict[str, int]:
    """One card's DRAM: its weights (its shards of the sharded ones, all of the
    replicated ones) and its KV cache (its share of the KV heads, at the longest
    sequence of the run)."""
    weights = 0
    for p in model.parameters():
        local = p.to_local() if isinstance(p, DTensor) else p
        weights += local.numel() * local.element_size()
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    itemsize = torch.empty(0, dtype=DTYPES[opts.dtype]).element_size()
    kv = (2 * config.num_hidden_layers * opts.batch * (opts.prompt + opts.new_tokens)
          * (config.num_key_value_heads // tp) * head_dim * itemsize)
    return {"weights": weights, "kv_cache": kv, "total": weights + kv}


def run_tp(opts: HFOptions, compile: bool = True) -> dict[str, Any]:
    """Decode ``opts``' model sharded over the process group's ranks (one card
    each) and compare it with CPU eager; see the module docstring."""
    if opts.family not in TP_FAMILIES:
        raise ValueError(f"--family {opts.family} is not accepted for tensor parallelism: expected one of "
                         f"{', '.join(TP_FAMILIES)}")
    tp = dist.get_world_size()
    config = make_config(opts.family, None, opts.sizes)
    check_divisible(config, tp)
    model = build_model(config, DTYPES[opts.dtype], opts.seed, opts.family)
    weights = weight_bytes(model)
    g = torch.Generator().manual_seed(opts.seed + 1)
    ids = torch.randint(0, config.vocab_size, (opts.batch, opts.prompt), generator=g)
    ref_seq, ref_logits = greedy(model, ids, opts)

    mesh = init_device_mesh("spyre", (tp,))
    model.to("spyre")
    shard(model, mesh)
    need = card_bytes(model, config, opts, tp)
    machine = current().machine
    if need["total"] > machine.dram_bytes:
        raise CardMemoryError(
            f"the model does not fit {tp} card{'s' if tp > 1 else ''}: each needs {format_bytes(need['weights'])} "
            f"of weights + {format_bytes(need['kv_cache'])} of KV cache = {format_bytes(need['total'])} > "
            f"{format_bytes(machine.dram_bytes)} of DRAM per card (dram_bytes); use more cards (--tp)")

    report = current().report
    report.reset()
    forward = torch.compile(model.forward, dynamic=True) if compile else model.forward
    dev = StepRecorder(forward, device=True)
    link_before: list[float] = []

    def recorded(*args: Any, **kwargs: Any) -> Any:
        link_before.append(report.link_ns)
        return dev(*args, **kwargs)

    recorded.__signature__ = dev.__signature__  # type: ignore[attr-defined]
    with _recording(model, recorded):  # type: ignore[arg-type]
        seq, logits = greedy(model, ids.to("spyre"), opts)
    link_after = link_before[1:] + [report.link_ns]
    link_per_step = [b - a for a, b in zip(link_before, link_after)]
    check = _compare(ref_seq, ref_logits, seq, logits)
    decode = _phase(dev.steps, weights["per_token"] // tp, machine, True, False)
    steady = [(s, link) for s, link in zip(dev.steps[1:], link_per_step[1:]) if s.compiles == 0] or \
        list(zip(dev.steps[1:], link_per_step[1:]))
    tokens = sum(s.tokens for s, _ in steady) or 1
    link_us = sum(link for _, link in steady) / tokens / 1e3
    summary = report.to_dict()
    fallbacks = summary["fallbacks"]
    collectives = {op: n for op, n in fallbacks.items() if "_c10d_functional" in op}
    return {
        "model": opts.name, "tp": tp, "rank": dist.get_rank(), "card": torch.spyre.current_device(),
        "compiled": compile, "dtype": opts.dtype, "prompt_tokens": opts.prompt, "new_tokens": opts.new_tokens,
        **check, "generated": seq[0, opts.prompt:].tolist(), "reference": ref_seq[0, opts.prompt:].tolist(),
        "card_bytes": need, "dram_bytes": machine.dram_bytes,
        "modeled_us_per_token": decode.get("modeled_us_per_token", 0.0), "link_us_per_token": link_us,
        "link_share": link_us / decode["modeled_us_per_token"] if decode.get("modeled_us_per_token") else 0.0,
        "collectives": summary["collectives"],
        "fallbacks": {op: n for op, n in fallbacks.items() if op not in collectives},
        "collectives_on_host": collectives,
    }


def _args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m spyre_adapter.zoo.tp", description=__doc__.split("\n\n")[0])
    ap.add_argument("--family", default="llama", choices=TP_FAMILIES)
    ap.add_argument("--dtype", default="fp32", choices=sorted(DTYPES))
    ap.add_argument("--prompt", type=int, default=8)
    ap.add_argument("--new-tokens", type=int, default=8)
    for size in SIZES:
        ap.add_argument(f"--{size.replace('_', '-')}", type=int, default=None,
                        help=f"{size.replace('_', ' ')} (default: the family's small config)")
    ap.add_argument("--eager", action="store_true", help="run the sharded model eagerly (no torch.compile)")
    ap.add_argument("--json", default=None, help="write rank 0's result here")
    args = ap.parse_args(argv)
    for name in ("prompt", "new_tokens", *SIZES):
        value = getattr(args, name)
        if value is not None and value < 1:
            ap.error(f"--{name.replace('_', '-')}={value} is not accepted: expected a whole number >= 1")
    return args


def main(argv: list[str] | None = None) -> int:
    """Entry point under torchrun (one process per card)."""
    args = _args(argv)
    sizes = {k: getattr(args, k) for k in SIZES if getattr(args, k) is not None}
    opts = HFOptions(family=args.family, dtype=args.dtype, prompt=args.prompt, new_tokens=args.new_tokens,
                     sizes=sizes)
    dist.init_process_group()
    try:
        try:
            result = run_tp(opts, compile=not args.eager)
        except (ValueError, CardMemoryError) as exc:
            if dist.get_rank() == 0:
                print(f"error: {exc}", file=sys.stderr)
            return 2
        if dist.get_rank() == 0:
            print(json.dumps(result))
            if args.json:
                with open(args.json, "w") as f:
                    json.dump(result, f, indent=1)
        return 0 if result["tokens_identical"] else 1
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    finish(main())
