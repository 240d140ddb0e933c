"""The family sweep command once its arguments passed the checks in
:mod:`spyre_adapter.cli.models`: list the families, or run (or summarize)
the sweep and write its summary."""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from spyre_adapter.harness.pool import journals, run_parallel
from spyre_adapter.zoo.sweep.families import causal_lm_families
from spyre_adapter.zoo.sweep.item import sweep_items
from spyre_adapter.zoo.sweep.summary import build, markdown


def _lost(key: str, cause: str) -> dict[str, Any]:
    family, shapes = key.split(":", 1)
    return {"family": family, "shapes": shapes, "status": "crash", "error": cause}


def _selected(patterns: list[str]) -> list[str]:
    """The families ``patterns`` name (checked already: each names one)."""
    all_types = [f.model_type for f in causal_lm_families()]
    if not patterns:
        return all_types
    return list(dict.fromkeys(t for p in patterns for t in all_types
                              if (t.startswith(p[:-1]) if p.endswith("*") else t == p)))


def run_command(args: argparse.Namespace) -> int:
    """List the families, or run the sweep; 1 if a family crashed or an item was not run."""
    families = _selected(args.families)
    if not args.sweep:
        classes = {f.model_type: f.model_class for f in causal_lm_families()}
        for t in families:
            print(f"{t:32s} {classes[t]}")
        print(f"{len(families)} families (transformers' causal-LM auto mapping)")
        return 0
    run = sweep_items(families, args.shapes)
    t0 = time.perf_counter()
    if args.summarize_only:
        records = journals(args.workdir)
        wall = sum(r.get("seconds", 0.0) for r in records.values()) / max(args.workers, 1)
    else:
        records = run_parallel(run, workers=args.workers, max_samples=0, workdir=args.workdir, timeout=args.timeout,
                               module="spyre_adapter.zoo.sweep.worker", label="family sweep", lost=_lost)
        wall = time.perf_counter() - t0
    summary = build(records, families, wall_seconds=wall, pending=[i.key for i in run if i.key not in records])
    (args.out / "sweep.json").write_text(json.dumps(summary, indent=1) + "\n")
    (args.out / "SWEEP.md").write_text(markdown(summary))
    for shapes, h in summary["headline"].items():
        print(f"{shapes}: {h['token_identical']}/{h['families_run']} families token-identical, "
              f"{h['with_host_fallbacks']} with host fallbacks, {h['crashes']} crashes")
    print(f"summary: {args.out / 'sweep.json'}, {args.out / 'SWEEP.md'}")
    crashed = any(h["crashes"] for h in summary["headline"].values())
    return 1 if crashed or summary["pending"] else 0
