"""Check the installed torch against the internal surface the shims rely on.

Reads the surface declaration (:mod:`spyre_surface`) and reports, per symbol, whether it is present,
moved (found only at a documented alias), missing, or present with a changed
signature, and which stable-API features are therefore unavailable. A vendor
runs this (``spyre-adapter probe``) before upgrading torch.
"""

from __future__ import annotations

import importlib
import inspect
import os
from pathlib import Path
from typing import Any

import torch
from spyre_surface import SPEC_PATH, SurfaceSymbol, load_entries, load_surface_spec

from ._torch import select
from ._torch.version import WINDOW_TEXT, in_window, installed

#: The surface declaration the probe checks (package data of ``spyre_surface``).
SURFACE = SPEC_PATH

__all__ = ["load_surface", "run_probe", "print_probe", "SURFACE"]


def load_surface(path: Path = SURFACE) -> list[dict[str, Any]]:
    """The symbol table (see the header of surface.toml), defaults filled in."""
    return load_entries(path)


def _lookup(module: str, qualname: str) -> Any:
    obj: Any = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


def _params(obj: Any) -> list[str] | None:
    try:
        return list(inspect.signature(obj).parameters)
    except (TypeError, ValueError):
        return None


def _check(symbol: SurfaceSymbol) -> dict[str, Any]:
    out: dict[str, Any] = {"name": symbol.location.name, "module": symbol.location.module, "feature": symbol.feature,
                           "required": symbol.required}
    changed = None
    for k, (where, want) in enumerate(symbol.places()):
        try:
            obj = _lookup(where.module, where.name)
        except (ImportError, AttributeError):
            continue
        got = _params(obj) if want else None
        if want and got is not None and tuple(got[: len(want)]) != want:
            changed = changed or {"found_at": where.key, "params": got}
            continue
        # Primary location and signature; or a documented older name/signature.
        out["status"] = "present" if k == 0 else ("adapted" if where == symbol.location else "moved")
        out["found_at"] = where.key
        return out
    if changed:
        out.update(status="signature-changed", **changed)
    else:
        out["status"] = "missing"
    return out


def run_probe() -> dict[str, Any]:
    """Probe the installed torch; returns a JSON-able dict."""
    symbols = [_check(s) for s in load_surface_spec(SURFACE)]
    features: dict[str, dict[str, Any]] = {}
    for s in symbols:
        f = features.setdefault(s["feature"], {"available": True, "problems": []})
        if s["status"] in ("missing", "signature-changed") and s["required"]:
            f["available"] = False
            f["problems"].append(f"{s['module']}:{s['name']} {s['status']}")
    adapters: dict[str, str] = {}
    na: list[dict[str, str]] = []
    for feature, chooser in (("device.host_backed", select.host_device),):
        try:
            chooser()
            adapters[feature] = select.ACTIVE.get(feature, "?")
        except Exception as exc:  # noqa: BLE001 - report, do not crash the probe
            na.append({"feature": feature, "reason": str(exc)})
    for name, f in features.items():
        if not f["available"]:
            na.append({"feature": name, "reason": "; ".join(f["problems"])})
    counts: dict[str, int] = {}
    for s in symbols:
        counts[s["status"]] = counts.get(s["status"], 0) + 1
    return {
        "torch": str(installed()), "torch_full": torch.__version__, "window": WINDOW_TEXT,
        "window_ok": in_window(), "counts": counts, "symbols": symbols,
        "features": {k: v["available"] for k, v in sorted(features.items())},
        "adapters": sorted(f"{k}={v}" for k, v in adapters.items()), "na": na,
    }


def print_probe(result: dict[str, Any]) -> None:
    """Human-readable probe output on stdout; when that is not a terminal (and
    COLUMNS is not set) the table takes its natural width: no name is cut."""
    from rich.console import Console
    from rich.table import Table

    c = Console()
    if not c.is_terminal and "COLUMNS" not in os.environ:
        c = Console(width=10_000)
    ok = "[green]inside[/green]" if result["window_ok"] else "[red]OUTSIDE[/red]"
    c.print(f"torch {result['torch_full']}: {ok} the supported window {result['window']}")
    table = Table(title="internal surface used by the shims")
    for col in ("status", "symbol", "feature", "found at"):
        table.add_column(col)
    colors = {"present": "green", "moved": "yellow", "adapted": "yellow", "missing": "red", "signature-changed": "red"}
    for s in sorted(result["symbols"], key=lambda s: (s["status"] == "present", s["feature"])):
        st = s["status"]
        table.add_row(f"[{colors[st]}]{st}[/{colors[st]}]", f"{s['module']}:{s['name']}", s["feature"],
                      s.get("found_at", "-"))
    c.print(table)
    c.print("counts: " + ", ".join(f"{k} {v}" for k, v in sorted(result["counts"].items())))
    c.print("active adapters: " + (", ".join(result["adapters"]) or "none"))
    if result["na"]:
        for n in result["na"]:
            c.print(f"[red]unavailable[/red] {n['feature']}: {n['reason']}")
    else:
        c.print("[green]every stable-API feature is available[/green]")
