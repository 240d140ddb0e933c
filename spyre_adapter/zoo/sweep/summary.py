"""The family sweep's summary: counts per status and shape mode, the table of
every family, what fell back, crashed or did not build (``results/models/
sweep.json`` and ``SWEEP.md``)."""

from __future__ import annotations

import platform
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from spyre_adapter.zoo.sweep.families import SMALL
from spyre_adapter.zoo.sweep.item import NEW_TOKENS, PROMPT, SHAPES

#: Statuses in table order: ran (pass, tokens differ, fallback, crash), then did not build.
RAN = ("pass", "tokens differ", "fallback", "crash")
NOT_BUILT = ("needs", "no default", "not built", "no static cache")
STATUSES = RAN + NOT_BUILT
MEANING = {
    "pass": "token-identical to CPU eager, no host fallback",
    "tokens differ": "ran on the device without fallback; a generated token differs from CPU eager",
    "fallback": "ran; some op ran on the host (named)",
    "crash": "compilation or the run raised",
    "needs": "needs an optional dependency or custom kernel this environment lacks",
    "no default": "its config class's own defaults do not build a model (transformers)",
    "not built": "does not build at the sweep's small sizes",
    "no static cache": "decodes on CPU eager with the dynamic cache, not with transformers' static KV cache",
}


def build(records: Mapping[str, dict[str, Any]], families: Iterable[str], *, wall_seconds: float,
          pending: Iterable[str] = ()) -> dict[str, Any]:
    """The summary document (``complete`` is false while ``pending`` items were not run)."""
    import torch
    import transformers

    families = list(families)
    recs = [records[f"{f}:{s}"] for f in families for s in SHAPES if f"{f}:{s}" in records]
    by_shape = {s: dict(Counter(r["status"] for r in recs if r["shapes"] == s)) for s in SHAPES}
    built = sorted({r["family"] for r in recs if r["status"] in RAN})
    headline = {}
    for s in SHAPES:
        ran = [r for r in recs if r["shapes"] == s and r["status"] in RAN]
        headline[s] = {
            "families_run": len(ran),
            "token_identical": sum(1 for r in ran if r.get("tokens_identical")),
            "token_identical_share": round(sum(1 for r in ran if r.get("tokens_identical")) / len(ran), 3) if ran else 0.0,
            "with_host_fallbacks": sum(1 for r in ran if r.get("fallbacks")),
            "crashes": sum(1 for r in ran if r["status"] == "crash"),
            "with_graph_breaks": sum(1 for r in ran if r.get("graph_breaks")),
            "recompiles_max": max((r.get("recompiles", 0) for r in ran), default=0),
        }
    fallbacks: Counter[str] = Counter()
    for r in recs:
        fallbacks.update(r.get("fallbacks", []))
    return {
        "transformers": transformers.__version__, "torch": torch.__version__, "python": platform.python_version(),
        "sizes": SMALL, "prompt_tokens": PROMPT, "new_tokens": NEW_TOKENS, "dtype": "fp32",
        "wall_seconds": round(wall_seconds, 1), "item_seconds": round(sum(r.get("seconds", 0.0) for r in recs), 1),
        "complete": not list(pending), "pending": sorted(pending),
        "families": len(families), "families_built": len(built),
        "counts": {s: {k: by_shape[s].get(k, 0) for k in STATUSES} for s in SHAPES},
        "headline": headline,
        "top_fallbacks": [{"fallback": n, "items": k} for n, k in fallbacks.most_common(15)],
        # Which code each record came from (a resumed or partly re-run sweep mixes them).
        "code": dict(Counter(r.get("code", "unrecorded") for r in recs).most_common()),
        "items": recs,
    }


def _cell(r: dict[str, Any] | None) -> str:
    if r is None:
        return "-"
    if r["status"] not in RAN:
        return r["status"]
    bits = [r["status"]]
    if r["status"] == "tokens differ":
        bits.append(f"from token {r.get('first_differing_token')}, logit err {r.get('max_abs_logit_error', 0):.1e}")
    if r.get("fallbacks"):
        bits.append(", ".join(f"`{f}`" for f in r["fallbacks"]))
    if r["status"] != "crash":
        bits.append(f"{r.get('recompiles', 0)} recompile(s)" + (f", {r['graph_breaks']} break(s)" if r.get("graph_breaks")
                                                                else ""))
    return "; ".join(bits)


def markdown(summary: dict[str, Any]) -> str:
    """The human-readable SWEEP.md."""
    s = summary
    lines = ["# transformers causal-LM families on the emulated Spyre device", ""]
    if s["pending"]:
        lines += [f"**Incomplete: {len(s['pending'])} items not run yet.**", ""]
    lines += [
        f"transformers {s['transformers']}, torch {s['torch']}: every family of transformers' causal-LM auto mapping "
        f"({s['families']}), built from its config class with {s['sizes']['layers']} layers, hidden "
        f"{s['sizes']['hidden']}, {s['sizes']['heads']} heads ({s['sizes']['kv_heads']} KV), vocabulary "
        f"{s['sizes']['vocab']}, random weights, fp32; greedy decode of {s['new_tokens']} tokens after a "
        f"{s['prompt_tokens']}-token prompt with `forward` compiled for spyre, against the same model on CPU eager. "
        f"static: static KV cache, torch.compile's default; dynamic: `dynamic=True`, dynamic KV cache. "
        f"{s['item_seconds'] / 60:.0f} min of item time. Command: `spyre-adapter models --sweep` (also `nox -s models`).",
        "",
        "Records by the code they ran (commit; `+`: with changes not committed): "
        + ", ".join(f"{n} from `{c}`" for c, n in s.get("code", {}).items()) + ".",
        "",
        "| | " + " | ".join(SHAPES) + " |",
        "|---|" + "---:|" * len(SHAPES),
    ]
    for k in ("families_run", "token_identical", "token_identical_share", "with_host_fallbacks", "crashes",
              "with_graph_breaks", "recompiles_max"):
        lines.append(f"| {k.replace('_', ' ')} | " + " | ".join(str(s["headline"][sh][k]) for sh in SHAPES) + " |")
    lines += ["", "| status | " + " | ".join(SHAPES) + " | meaning |", "|---|" + "---:|" * len(SHAPES) + "---|"]
    for st in STATUSES:
        lines.append(f"| {st} | " + " | ".join(str(s["counts"][sh][st]) for sh in SHAPES) + f" | {MEANING[st]} |")
    if s["top_fallbacks"]:
        lines += ["", "## Host fallbacks (items)", "", "| fallback | items |", "|---|---:|"]
        lines += [f"| `{f['fallback']}` | {f['items']} |" for f in s["top_fallbacks"]]
    items = {(r["family"], r["shapes"]): r for r in s["items"]}
    fams = list(dict.fromkeys(r["family"] for r in s["items"]))
    lines += ["", "## Every family", "", "| family | " + " | ".join(SHAPES) + " |", "|---|" + "---|" * len(SHAPES)]
    for f in fams:
        lines.append(f"| {f} | " + " | ".join(_cell(items.get((f, sh))) for sh in SHAPES) + " |")
    problems = [r for r in s["items"] if r["status"] in ("crash", "tokens differ", "fallback")]
    if problems:
        lines += ["", "## Crashes, differing tokens, fallbacks", ""]
        for r in problems:
            detail = r.get("error") or _cell(r)
            where = f" (at {', '.join(r['where'])})" if r.get("where") else ""
            lines.append(f"- `{r['family']}` {r['shapes']}: {detail}{where}")
    skipped = [r for r in s["items"] if r["status"] in NOT_BUILT]
    if skipped:
        by_family: dict[str, list[dict[str, Any]]] = {}
        for r in skipped:
            by_family.setdefault(r["family"], []).append(r)
        lines += ["", f"## Not run ({len(skipped)} items, {len(by_family)} families)", ""]
        for f, rs in sorted(by_family.items()):
            if len(rs) == len(SHAPES) and len({(r["status"], r.get("error")) for r in rs}) == 1:
                lines.append(f"- `{f}` ({rs[0]['status']}): {rs[0].get('error', '')}")
            else:
                lines += [f"- `{f}` {r['shapes']} ({r['status']}): {r.get('error', '')}" for r in rs]
    return "\n".join(lines) + "\n"
