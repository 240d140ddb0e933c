"""Checks, before any work, of ``report``/``surface``/``compat-run`` (arguments defined by
:mod:`spyre_matrix.cli`): the same classes of bad input as every other command
get one line and exit status 2."""

from __future__ import annotations

import argparse
from pathlib import Path

from spyre_matrix.catalog import load_catalog

from spyre_adapter.cli.argcheck import ArgError

__all__ = ["check_report", "check_surface", "check_compat_run"]


def _catalog_release(argument: str, text: str) -> None:
    catalog = load_catalog()
    try:
        catalog.get(text)
    except (KeyError, ValueError):
        raise ArgError(argument, text, "expected a release of compat_matrix/releases.toml: "
                                       + ", ".join(r.torch for r in catalog)) from None


def _existing_dir(argument: str, path: Path | None) -> None:
    if path is not None and not Path(path).is_dir():
        raise ArgError(argument, str(path), "expected an existing folder (create it first)")


def check_report(args: argparse.Namespace) -> None:
    """``report``: existing vendor folders."""
    for path in args.vendor:
        _existing_dir("--vendor", path)


def check_surface(args: argparse.Namespace) -> None:
    """``surface``: catalog releases, existing folders."""
    for name in args.releases:
        _catalog_release("releases", name)
    _existing_dir("--out", args.out)
    if not args.installed:
        _existing_dir("--src", args.src)
    if args.fetch:
        _existing_dir("--wheels", args.wheels)


def check_compat_run(args: argparse.Namespace) -> None:
    """``compat-run``: a catalog release, an existing results folder."""
    _catalog_release("--torch", args.torch)
    _existing_dir("--results", args.results)
