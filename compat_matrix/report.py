"""REPORT.md: the compatibility matrix and what following Inductor costs, per release.

Rendered only from committed inputs (catalog, surface JSON, results JSON, the
shims' surface spec and adapters, vendor sources), deterministically, so a test
can regenerate it and fail when the committed copy is stale.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from spyre_surface import SurfaceSymbol, load_surface_spec

from spyre_matrix.adapters import Adapter, active_adapters, load_adapters
from spyre_matrix.catalog import Catalog, Release, load_catalog, render_compat_table
from spyre_matrix.churn import ApiDiff, diff_api
from spyre_matrix.extract import STATUSES, read_surface, surface_renames
from spyre_matrix.paths import ADAPTERS_DIR, RESULTS_DIR, SURFACE_DIR, SURFACE_SPEC, VENDOR_DIRS
from spyre_matrix.results import load_results
from spyre_matrix.vendor import METHOD as VENDOR_METHOD
from spyre_matrix.vendor import VendorLine, scan_vendor

DASH = "—"
REGENERATE = "nox -s report"


@dataclass(frozen=True)
class ReportInputs:
    catalog: Catalog
    spec: tuple[SurfaceSymbol, ...]
    surfaces: Mapping[str, dict[str, Any]]  # release -> committed surface record
    results: Mapping[str, dict[str, Any]]  # release -> committed matrix result
    adapters: list[Adapter] | None  # None: the adapters folder does not exist yet
    vendor: list[VendorLine]


def load_inputs(vendor_dirs: Iterable[Path] = VENDOR_DIRS) -> ReportInputs:
    """Everything the report reads: the committed files, the installed shims'
    adapters, and the vendor trees ``vendor_dirs``."""
    catalog = load_catalog()
    surfaces = {r.torch: s for r in catalog if (s := read_surface(r.torch, SURFACE_DIR)) is not None}
    return ReportInputs(
        catalog=catalog,
        spec=load_surface_spec(SURFACE_SPEC),
        surfaces=surfaces,
        results=load_results(RESULTS_DIR),
        adapters=load_adapters(ADAPTERS_DIR),
        vendor=scan_vendor(vendor_dirs),
    )


@dataclass(frozen=True)
class Row:
    release: Release
    previous: Release | None
    result: dict[str, Any] | None
    surface: dict[str, Any] | None
    churn: ApiDiff | None  # touched surface vs the previous release
    adapters: list[Adapter] = field(default_factory=list)
    vendor_lines: int = 0

    @property
    def status(self) -> str:
        return self.result["status"] if self.result else "not run"

    def symbol_counts(self) -> dict[str, int] | None:
        if self.surface is None:
            return None
        symbols = self.surface["symbols"].values()
        counts = {status: sum(s["status"] == status for s in symbols) for status in STATUSES}
        counts["signature_changed"] = sum(bool(s["signature_changed"]) for s in symbols)
        return counts

    @property
    def vs_previous(self) -> dict[str, Any] | None:
        """Whole-tree measurements against the previous release (from the surface record)."""
        return self.surface["inductor"]["vs_previous"] if self.surface else None

    @property
    def adapter_lines(self) -> int:
        return sum(a.lines for a in self.adapters)


def build_rows(inputs: ReportInputs) -> list[Row]:
    renames = surface_renames(inputs.spec)
    rows = []
    for previous, release in inputs.catalog.pairs():
        surface = inputs.surfaces.get(release.torch)
        before = inputs.surfaces.get(previous.torch) if previous else None
        churn = diff_api(before["surface"], surface["surface"], renames) if surface and before else None
        rows.append(Row(
            release=release,
            previous=previous,
            result=inputs.results.get(release.torch),
            surface=surface,
            churn=churn,
            adapters=active_adapters(inputs.adapters, release.torch),
            vendor_lines=len(inputs.vendor),
        ))
    return rows


# -- cells ---------------------------------------------------------------------------------


def _num(value: int | None) -> str:
    return DASH if value is None else f"{value:,}"


def _slash(values: Iterable[int]) -> str:
    return " / ".join(str(v) for v in values)


def _tests(row: Row) -> str:
    if row.result is None:
        return DASH
    t = row.result["tests"]
    return _slash((t["passed"], t["failed"], t["skipped"]))


def _churn(row: Row) -> str:
    return DASH if row.churn is None else _slash(row.churn.counts().values())


def _symbols(row: Row) -> str:
    counts = row.symbol_counts()
    return DASH if counts is None else _slash(counts.values())


def _diff_lines(row: Row) -> str:
    vs = row.vs_previous
    return DASH if vs is None else _num(vs["added_lines"] + vs["removed_lines"])


def _na(row: Row) -> str:
    if row.result is None:
        return DASH
    return str(len(row.result["na"]))


# -- sections --------------------------------------------------------------------------------


def _header(inputs: ReportInputs) -> list[str]:
    return [
        "# Compatibility matrix and maintenance cost",
        "",
        f"<!-- Generated by `{REGENERATE}` (same as `spyre-adapter report`). Do not edit by hand:",
        "     tests/matrix/test_report.py regenerates it from the committed inputs and fails when it differs. -->",
        "",
        f"Generated by `{REGENERATE}` from committed inputs only: `compat_matrix/releases.toml`, "
        "`compat_matrix/results/*.json`, `compat_matrix/surface/*.json`, `surface/surface.toml`, "
        "`shims/_torch/adapters/` and the vendor sources. Regenerate after changing any of them.",
        "",
        f"{len(inputs.catalog.supported)} supported releases "
        f"({inputs.catalog.supported[0].torch} … {inputs.catalog.supported[-1].torch}); "
        f"{len(inputs.results)} with matrix results; {len(inputs.surfaces)} with extracted surface data; "
        f"{len(inputs.spec)} torch-internal symbols in the shims' surface.",
        "",
    ]


def _provenance(results: Mapping[str, dict[str, Any]]) -> list[str]:
    """Which checkout(s) the results come from: the promise is one commit on every release."""
    by_commit: dict[str, list[str]] = {}
    for torch, result in results.items():
        by_commit.setdefault(str(result.get("commit", "unrecorded")), []).append(torch)
    if not by_commit:
        return []
    if len(by_commit) == 1 and "unrecorded" not in by_commit:
        (commit, releases), = by_commit.items()
        return [f"All {len(releases)} results come from one checkout: commit `{commit}`.", ""]
    parts = [f"`{commit}`: {', '.join(releases)}" for commit, releases in sorted(by_commit.items())]
    return [f"Results come from {len(by_commit)} checkouts: " + "; ".join(parts) + ".", ""]


def _compat_section(inputs: ReportInputs) -> list[str]:
    statuses = {torch: result["status"] for torch, result in inputs.results.items()}
    return ["## Compatibility", "", *_provenance(inputs.results),
            render_compat_table(inputs.catalog, statuses, results=inputs.results)]


def _cost_section(rows: list[Row]) -> list[str]:
    lines = [
        "## Maintenance cost per release",
        "",
        "| torch | status | tests passed / failed / skipped | surface churn vs previous: added / removed / moved / "
        "sig-changed | shim symbols present / moved / missing / sig-changed | `torch/_inductor` lines | "
        "`torch/_inductor` diff lines vs previous | shim adapter lines active | vendor lines changed | n/a cells |",
        "|---|---|---|---|---|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        inductor = row.surface["inductor"] if row.surface else None
        torch = row.release.torch + ("" if row.release.supported else " (static)")
        lines.append(
            f"| {torch} | {row.status} | {_tests(row)} | {_churn(row)} | {_symbols(row)} | "
            f"{_num(inductor['lines'] if inductor else None)} | {_diff_lines(row)} | "
            f"{row.adapter_lines} | {row.vendor_lines} | {_na(row)} |"
        )
    return lines + [""]


def _adapter_section(inputs: ReportInputs) -> list[str]:
    """Each adapter module: which tier of the stable API it serves, the releases it is
    active for (so the lines each release adds) and what it implements."""
    if not inputs.adapters:
        return []
    lines = [
        "## Shim adapters",
        "",
        "Release-specific code in `shims/_torch/adapters/`; a release's *shim adapter lines active* "
        "above is the sum over the adapters whose releases contain it. Tier 2 adapters implement "
        "`spyre_shims.compat` names a release lacks; tier 1 ones serve the Kernel IR backend and the device.",
        "",
        "| adapter | tier | releases | features | code lines |",
        "|---|---|---|---|---:|",
    ]
    for adapter in sorted(inputs.adapters, key=lambda a: a.name):
        tier = "2" if adapter.features and all(f.startswith("compat.") for f in adapter.features) else "1"
        features = ", ".join(f"`{f}`" for f in adapter.features) or DASH
        lines.append(f"| `{adapter.name}` | {tier} | `{adapter.releases}` | {features} | {adapter.lines} |")
    return lines + [""]


def _inductor_section(rows: list[Row]) -> list[str]:
    lines = [
        "## Whole `torch/_inductor` churn (context)",
        "",
        "| torch | .py files | lines | lines added / removed vs previous | files added / removed / changed | "
        "public API added / removed / moved / sig-changed |",
        "|---|---:|---:|---|---|---|",
    ]
    for row in rows:
        if row.surface is None:
            continue
        inductor = row.surface["inductor"]
        vs = inductor["vs_previous"]
        line_cell = files_cell = api_cell = DASH
        if vs is not None:
            line_cell = f"+{vs['added_lines']:,} / −{vs['removed_lines']:,}"
            files_cell = _slash((vs["files_added"], vs["files_removed"], vs["files_changed"]))
            api_cell = _slash(vs["api"].values())
        lines.append(
            f"| {row.release.torch} | {inductor['files']:,} | {inductor['lines']:,} | {line_cell} | "
            f"{files_cell} | {api_cell} |"
        )
    return lines + [""]


_MARK = {"present": "✓", "moved": "↪", "missing": "✗"}


def _symbol_matrix(inputs: ReportInputs, rows: list[Row]) -> list[str]:
    with_data = [row for row in rows if row.surface is not None]
    if not with_data:
        return []
    header = " | ".join(row.release.torch for row in with_data)
    lines = [
        "## Shim surface by release",
        "",
        "✓ present where the newest release keeps it · ↪ only under an older/newer alias · ✗ missing · "
        "≠ parameters differ from the shims' expected prefix.",
        "",
        f"| symbol | feature | {header} |",
        "|---|---|" + "---|" * len(with_data),
    ]
    for symbol in inputs.spec:
        cells = []
        for row in with_data:
            entry = row.surface["symbols"].get(symbol.key)
            mark = DASH if entry is None else _MARK[entry["status"]] + ("≠" if entry["signature_changed"] else "")
            cells.append(mark)
        optional = "" if symbol.required else " (optional)"
        lines.append(f"| `{symbol.key}` | {symbol.feature}{optional} | {' | '.join(cells)} |")
    return lines + [""]


def _changes_section(rows: list[Row]) -> list[str]:
    lines = ["## Surface changes per release pair", ""]
    for row in rows:
        if row.churn is None or row.previous is None:
            continue
        diff = row.churn
        lines.append(f"### {row.previous.torch} → {row.release.torch}")
        lines.append("")
        if not diff.total:
            lines += ["No change on the touched surface.", ""]
            continue
        lines += [f"- moved: `{old}` → `{new}`" for old, new in diff.moved]
        lines += [f"- removed: `{key}`" for key in diff.removed]
        lines += [f"- signature changed: `{key}`: `{old}` → `{new}`" for key, old, new in diff.signature_changed]
        if diff.added:
            names = ", ".join(f"`{key}`" for key in diff.added)
            lines += [f"- added: {len(diff.added)}", "", f"<details><summary>added</summary>\n\n{names}\n\n</details>"]
        lines.append("")
    return lines


def _na_section(inputs: ReportInputs) -> list[str]:
    lines = ["## Unavailable cells and run notes", ""]
    any_note = False
    for torch, result in sorted(inputs.results.items(), key=lambda item: inputs.catalog.get(item[0]).version):
        notes = [f"n/a `{cell.get('feature', cell)}`: {cell.get('reason', '')}" if isinstance(cell, dict)
                 else f"n/a `{cell}`" for cell in result["na"]]
        if "probe_error" in result:
            notes.append(f"probe error: {result['probe_error'].splitlines()[0] if result['probe_error'] else ''}")
        notes += [f"error: {error}" for error in result.get("errors", [])]
        if notes:
            any_note = True
            lines.append(f"- **{torch}**: " + "; ".join(notes))
    if not any_note:
        lines.append("None.")
    return lines + [""]


def _method_section(inputs: ReportInputs) -> list[str]:
    adapters = (
        "`shims/_torch/adapters/` does not exist yet: 0 lines for every release."
        if inputs.adapters is None
        else f"{len(inputs.adapters)} adapter modules declare `RELEASES`."
    )
    return [
        "## How each column is measured",
        "",
        "- **status, tests**: `nox -s \"compat(torch='X')\"` installs that release with uv, runs the full "
        "test suite (`pytest --junitxml`, counts parsed from the XML; errors count as failed) and "
        "`spyre-adapter probe --json`; `pass` needs a green suite and a probe that ran. `not run`: no result "
        "committed for that release.",
        "- **surface churn**: the touched surface is every symbol in `surface/surface.toml` where the "
        "release has it, plus every public member of each class the shims touch (a vendor subclass "
        "inherits all of it). Compared with the previous catalog release: *moved* = known alias or the same "
        "top-level name in another module (members that come along unchanged are not counted); "
        "*sig-changed* = any change in parameter names, order, kinds or default-presence, or in kind.",
        "- **shim symbols**: each surface entry resolved statically (ast; imports, re-exports, `Old = New` "
        "aliases and base classes followed, never importing torch): present at its expected place, moved "
        "(found only under an alias), missing; sig-changed = its parameters do not start with the expected "
        "`params`.",
        "- **`torch/_inductor` lines / diff lines**: `.py` files of the release wheel; diff = added + removed "
        "lines from `git diff --no-index --numstat` against the previous catalog release.",
        f"- **shim adapter lines**: non-blank, non-comment lines of the adapter modules whose `RELEASES` "
        f"specifier contains the release. {adapters}",
        f"- **vendor lines changed**: {VENDOR_METHOD}. Currently {len(inputs.vendor)}.",
        "",
    ]


def render_report(inputs: ReportInputs) -> str:
    rows = build_rows(inputs)
    sections = [
        _header(inputs),
        _compat_section(inputs),
        _cost_section(rows),
        _adapter_section(inputs),
        _inductor_section(rows),
        _symbol_matrix(inputs, rows),
        _changes_section(rows),
        _na_section(inputs),
        _method_section(inputs),
    ]
    text = "\n".join(line for section in sections for line in section)
    return text.rstrip("\n") + "\n"


def default_report_text() -> str:
    """The report as it should read for the repository's committed inputs."""
    return render_report(load_inputs())

