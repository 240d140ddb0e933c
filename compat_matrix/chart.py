"""report.png: the maintenance-cost report as a chart (matplotlib, Agg; no display needed)."""

from __future__ import annotations

from pathlib import Path

from spyre_matrix.churn import CATEGORIES
from spyre_matrix.report import Row

_COLORS = {"added": "#4c956c", "removed": "#d1495b", "moved": "#edae49", "signature_changed": "#00798c"}


def render_chart(rows: list[Row], path: Path) -> Path:
    import matplotlib
    import matplotlib.ticker

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [row.release.torch for row in rows]
    x = range(len(rows))
    fig, (ax_tree, ax_surface, ax_code) = plt.subplots(3, 1, figsize=(10, 10), sharex=True)

    diff = [(vs["added_lines"] + vs["removed_lines"]) if (vs := row.vs_previous) else 0 for row in rows]
    size = [row.surface["inductor"]["lines"] if row.surface else 0 for row in rows]
    ax_tree.bar(x, diff, color="#8d99ae", label="diff lines vs previous")
    ax_tree.plot(x, size, color="#2b2d42", marker="o", label="total lines")
    ax_tree.set_title("torch/_inductor (.py)")
    ax_tree.yaxis.set_major_formatter(matplotlib.ticker.StrMethodFormatter("{x:,.0f}"))
    ax_tree.legend(loc="upper left")

    bottom = [0] * len(rows)
    for category in CATEGORIES:
        values = [row.churn.counts()[category] if row.churn else 0 for row in rows]
        ax_surface.bar(x, values, bottom=bottom, color=_COLORS[category], label=category.replace("_", "-"))
        bottom = [b + v for b, v in zip(bottom, values)]
    ax_surface.set_title("Churn on the surface the shims touch (vs previous release)")
    ax_surface.legend(loc="upper right", ncols=4, fontsize="small")

    width = 0.4
    ax_code.bar([i - width / 2 for i in x], [row.adapter_lines for row in rows], width, label="shim adapter lines")
    ax_code.bar([i + width / 2 for i in x], [row.vendor_lines for row in rows], width, label="vendor lines changed")
    ax_code.set_title("What following the release costs: shims vs vendor code")
    ax_code.legend(loc="upper left")
    ax_code.set_xticks(list(x), labels, rotation=45)
    ax_code.set_xlabel("torch release (grey: static report only, outside the supported window)")

    static = [i for i, row in enumerate(rows) if not row.release.supported]
    for ax in (ax_tree, ax_surface, ax_code):
        if static:  # releases outside the supported window (static analysis only)
            ax.axvspan(min(static) - 0.5, max(static) + 0.5, color="#eeeeee", zorder=0)

    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    # No "Software" metadata: the file only changes when the data does.
    fig.savefig(path, dpi=100, metadata={"Software": None})
    plt.close(fig)
    return path

