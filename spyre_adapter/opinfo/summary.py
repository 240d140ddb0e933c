"""The sweep's summary: counts, the most common fallbacks, every fail, as JSON
(``results/opinfo/summary.json``) and as a Markdown table (``SUMMARY.md``)."""

from __future__ import annotations

import platform
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

import torch

from spyre_adapter.opinfo.corpus import DTYPES, Item
from spyre_adapter.opinfo.expectations import TOLERANCES
from spyre_adapter.workloads import differential as diff

STATUSES = [diff.PASS, diff.PASS_NO_KERNEL, diff.FALLBACK, diff.XFAIL, diff.FAIL, diff.SKIPPED]


def build(records: Mapping[str, dict[str, Any]], not_applicable: Iterable[Item], *, max_samples: int,
          wall_seconds: float, pending: Iterable[Item] = ()) -> dict[str, Any]:
    """The summary document (``complete`` is false while ``pending`` items were not run)."""
    pending = sorted(i.key for i in pending)
    recs = sorted(records.values(), key=lambda r: (r["op"], list(DTYPES).index(r["dtype"])))
    counts = Counter(r["status"] for r in recs)
    by_dtype = {d: dict(Counter(r["status"] for r in recs if r["dtype"] == d)) for d in DTYPES}
    fallback_items: Counter[str] = Counter()
    for r in recs:
        fallback_items.update(r.get("fallbacks", []))
    return {
        "torch": torch.__version__,
        "python": platform.python_version(),
        "max_samples_per_item": max_samples,
        "tolerances": {d: {"atol": a, "rtol": r} for d, (a, r) in TOLERANCES.items()},
        # wall time covers the last invocation only (a resumed sweep re-runs what is missing);
        # item_seconds sums every item's own run time, so it does not depend on resuming
        "wall_seconds": round(wall_seconds, 1),
        "item_seconds": round(sum(r.get("seconds", 0.0) for r in recs), 1),
        "complete": not pending,
        "pending": pending,
        "ops": len({r["op"] for r in recs}),
        "items": len(recs),
        "counts": {s: counts.get(s, 0) for s in STATUSES},
        "by_dtype": by_dtype,
        "samples": dict(sum((Counter(r.get("samples", {})) for r in recs), Counter())),
        "top_fallbacks": [{"fallback": name, "items": n} for name, n in fallback_items.most_common(10)],
        "silent_fallback_items": sorted(f"{r['op']}:{r['dtype']}" for r in recs if r.get("silent_fallback")),
        "stale_xfails": sorted(f"{r['op']}:{r['dtype']}" for r in recs if r.get("xfail_unneeded")),
        "not_applicable": sorted(i.key for i in not_applicable),
        "items_detail": recs,
    }


def markdown(summary: dict[str, Any]) -> str:
    """The human-readable SUMMARY.md."""
    c = summary["counts"]
    lines = [
        "# OpInfo sweep on the emulated Spyre device",
        "",
        *([f"**Incomplete: {len(summary['pending'])} op x dtype items not run yet.**", ""] if summary["pending"]
          else []),
        f"torch {summary['torch']}: {summary['ops']} ops x dtypes = {summary['items']} items "
        f"(up to {summary['max_samples_per_item']} samples each), "
        f"{summary['item_seconds'] / 60:.1f} min of item time (last invocation: {summary['wall_seconds'] / 60:.1f} min wall). "
        f"{len(summary['not_applicable'])} op x dtype pairs have no CPU eager kernel and are not counted.",
        "",
        "| status | " + " | ".join(DTYPES) + " | total |",
        "|---|" + "---:|" * (len(DTYPES) + 1),
    ]
    for s in STATUSES:
        row = [str(summary["by_dtype"][d].get(s, 0)) for d in DTYPES]
        lines.append(f"| {s} | " + " | ".join(row) + f" | {c[s]} |")
    lines += ["", "## Most common fallbacks (items)", "", "| fallback | items |", "|---|---:|"]
    lines += [f"| `{f['fallback']}` | {f['items']} |" for f in summary["top_fallbacks"]]
    if summary["silent_fallback_items"]:
        lines += ["", f"{len(summary['silent_fallback_items'])} fallback items ran some aten op eagerly on the host "
                  "without a FallbackWarning (Dynamo graph break); the sweep detected them by counting eager ops."]
    fails = [r for r in summary["items_detail"] if r["status"] == diff.FAIL]
    lines += ["", f"## Fails ({len(fails)})", ""]
    lines += [f"- `{r['op']}` {r['dtype']}: {r.get('first_failure', {}).get('error', '')[:200]}" for r in fails]
    xfails = [r for r in summary["items_detail"] if r["status"] == diff.XFAIL]
    lines += ["", f"## Xfails ({len(xfails)})", ""]
    lines += [f"- `{r['op']}` {r['dtype']}: {r['xfail_reason']}" for r in xfails]
    if summary["stale_xfails"]:
        lines += ["", "Stale xfail entries (listed, but did not fail): " + ", ".join(summary["stale_xfails"])]
    return "\n".join(lines) + "\n"
