"""Command line: ``spyre-adapter report|surface|compat-run|compat-table`` (also ``python -m spyre_matrix``)."""

from __future__ import annotations

import argparse
import difflib
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from packaging.version import Version

from spyre_surface import load_surface_spec

from spyre_matrix.catalog import Catalog, Release, load_catalog, render_compat_table
from spyre_matrix.chart import render_chart
from spyre_matrix.extract import extract_release, write_surface
from spyre_matrix.report import build_rows, load_inputs, render_report
from spyre_matrix.results import load_results
from spyre_matrix.runner import run_compat
from spyre_matrix.source_tree import SourceTree
from spyre_matrix.sources import ensure_release, is_extracted, release_dir
from spyre_matrix.paths import DEFAULT_TORCH_SRC, DEFAULT_WHEELS, REPORT_MD, REPORT_PNG, SURFACE_DIR, VENDOR_DIRS


def register(subparsers: Any) -> None:
    """Add this package's subcommands to an ``argparse`` subparsers object."""
    report = subparsers.add_parser("report", help="render compat_matrix/REPORT.md and report.png from committed data")
    report.add_argument("--check", action="store_true", help="write nothing; exit 1 if REPORT.md is stale")
    report.add_argument("--no-png", action="store_true", help="skip the chart (no matplotlib needed)")
    report.add_argument("--vendor", type=Path, action="append", default=[], metavar="DIR",
                        help="also scan DIR for release-specific vendor lines (default: the installed spyre_adapter)")
    report.set_defaults(func=cmd_report)

    surface = subparsers.add_parser("surface", help="extract per-release API-surface JSON from release sources")
    surface.add_argument("releases", nargs="*", help="catalog releases (default: all)")
    surface.add_argument("--src", type=Path, default=DEFAULT_TORCH_SRC,
                         help=f"holds <version>/torch/... trees (default: {DEFAULT_TORCH_SRC})")
    surface.add_argument("--fetch", action="store_true", help="download and extract releases missing from --src")
    surface.add_argument("--wheels", type=Path, default=DEFAULT_WHEELS,
                         help=f"download directory for --fetch (default: {DEFAULT_WHEELS})")
    surface.add_argument("--installed", action="store_true", help="analyse the installed torch instead of --src")
    surface.add_argument("--out", type=Path, default=SURFACE_DIR, help="where <version>.json is written")
    surface.set_defaults(func=cmd_surface)

    run = subparsers.add_parser("compat-run", help="(nox compat session) run tests + probe, write the result JSON")
    run.add_argument("--torch", required=True, help="the catalog release this environment should hold")
    run.add_argument("--results", type=Path, default=None, help="results directory (default: compat_matrix/results)")
    run.add_argument("pytest_args", nargs=argparse.REMAINDER, help="passed to pytest after `--`")
    run.set_defaults(func=cmd_compat_run)

    table = subparsers.add_parser("compat-table", help="print the docs compatibility table (Markdown)")
    table.add_argument("--all", action="store_true", help="include static-only releases")
    table.set_defaults(func=cmd_compat_table)


def cmd_report(args: argparse.Namespace) -> int:
    inputs = load_inputs((*VENDOR_DIRS, *args.vendor))
    text = render_report(inputs)
    if args.check:
        current = REPORT_MD.read_text(encoding="utf-8") if REPORT_MD.is_file() else ""
        if current == text:
            print(f"{REPORT_MD.name} is up to date")
            return 0
        sys.stdout.writelines(difflib.unified_diff(
            current.splitlines(keepends=True), text.splitlines(keepends=True), "committed", "regenerated"))
        print(f"\n{REPORT_MD} is stale: run `nox -s report` or `python -m spyre_matrix report`", file=sys.stderr)
        return 1
    REPORT_MD.write_text(text, encoding="utf-8")
    print(f"wrote {REPORT_MD}")
    if not args.no_png:
        print(f"wrote {render_chart(build_rows(inputs), REPORT_PNG)}")
    return 0


def _selected(catalog: Catalog, names: Sequence[str]) -> list[Release]:
    return [catalog.get(name) for name in names] if names else list(catalog)


def cmd_surface(args: argparse.Namespace) -> int:
    catalog = load_catalog()
    spec = load_surface_spec()

    # Each tree is parsed once, as a release and then as the next release's baseline;
    # only that one is kept (a parsed Inductor tree holds a few hundred MB of AST).
    trees: dict[str, SourceTree | None] = {}

    def tree_for(release: Release) -> SourceTree | None:
        if release.torch not in trees:
            if args.fetch:
                ensure_release(release.torch, args.src, args.wheels)
            present = is_extracted(args.src, release.torch)
            trees[release.torch] = SourceTree(release_dir(args.src, release.torch)) if present else None
        return trees[release.torch]

    installed = SourceTree.installed() if args.installed else None
    if installed is not None:
        releases = [catalog.get(Version(installed.version or "0").public)]
    else:
        releases = _selected(catalog, args.releases)
    for release in releases:
        tree = installed or tree_for(release)
        if tree is None:
            print(f"{release.torch}: no sources under {args.src} (use --fetch)", file=sys.stderr)
            return 2
        previous = catalog.previous(release)
        previous_tree = tree_for(previous) if previous else None
        record = extract_release(
            release.torch, tree, spec, (previous.torch, previous_tree) if previous and previous_tree else None
        )
        path = write_surface(record, args.out)
        for version in [v for v in trees if v != release.torch]:
            del trees[version]
        statuses = [s["status"] for s in record["symbols"].values()]
        print(f"{release.torch}: {statuses.count('present')} present, {statuses.count('moved')} moved, "
              f"{statuses.count('missing')} missing -> {path}")
    return 0


def cmd_compat_run(args: argparse.Namespace) -> int:
    release = load_catalog().get(args.torch)
    pytest_args = [a for a in args.pytest_args if a != "--"]
    kwargs = {"results_dir": args.results} if args.results else {}
    result = run_compat(release.torch, pytest_args, tools=release.tools, **kwargs)
    tests = result["tests"]
    print(f"torch {release.torch}: {result['status']} ({tests['passed']} passed, {tests['failed']} failed, "
          f"{tests['skipped']} skipped)" + (f"; probe error: {result['probe_error']}" if "probe_error" in result else ""))
    return 0 if result["status"] == "pass" else 1


def cmd_compat_table(args: argparse.Namespace) -> int:
    results = load_results()
    statuses = {torch: r["status"] for torch, r in results.items()}
    sys.stdout.write(render_compat_table(load_catalog(), statuses, only_supported=not args.all, results=results))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m spyre_matrix", description=__doc__)
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return int(args.func(args))
