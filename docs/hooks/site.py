"""mkdocs hooks: the pages that are generated, never hand-written.

* ``reference/*.md``: one API-reference page per public module of the stable API
  (``shims/*.py`` and public sub-packages such as ``shims/compat/``, without a
  leading underscore), rendered by mkdocstrings;
* ``compatibility.md``: the compatibility table from ``compat_matrix/releases.toml``
  and ``compat_matrix/results/*.json`` (``spyre_matrix``);
* ``<!-- generated: ... -->`` markers in guides: the codemods' real output on
  ``docs/snippets/legacy_backend.py`` and their rules by release.

The stable API's folder is ``shims/`` but its import name is ``spyre_shims``;
griffe finds packages by folder name, so ``build/docs-src/spyre_shims`` links to it.
"""

from __future__ import annotations

import ast
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parents[2]
SHIMS = ROOT / "shims"
API_SRC = ROOT / "build" / "docs-src"
PACKAGE = "spyre_shims"
LEGACY = ROOT / "docs" / "snippets" / "legacy_backend.py"
OPTIONAL_PAGES = {"codemods.md": "Codemods reference", "testing.md": "Testing"}

log = logging.getLogger("mkdocs.hooks.spyre")


# ----------------------------------------------------------------------------- sources


def _link_sources() -> None:
    """``build/docs-src/spyre_shims`` -> ``shims/`` (a copy where links are unavailable)."""
    target = API_SRC / PACKAGE
    if target.is_symlink() and target.resolve() == SHIMS.resolve():
        return
    if target.is_symlink() or target.is_file():
        target.unlink()
    elif target.exists():
        shutil.rmtree(target)
    API_SRC.mkdir(parents=True, exist_ok=True)
    try:
        target.symlink_to(SHIMS, target_is_directory=True)
    except OSError:
        shutil.copytree(SHIMS, target, ignore=shutil.ignore_patterns("__pycache__"))


def stable_modules() -> list[tuple[str, str]]:
    """``(import name, first docstring line)`` of the package and its public modules."""
    out = []
    paths = [SHIMS / "__init__.py", *sorted(SHIMS.glob("[!_]*.py"))]
    for package in sorted(p.parent for p in SHIMS.glob("[!_]*/__init__.py")):  # public sub-packages
        paths += [package / "__init__.py", *sorted(package.glob("[!_]*.py"))]
    for path in paths:
        parts = path.relative_to(SHIMS).with_suffix("").parts
        name = ".".join([PACKAGE, *(parts[:-1] if parts[-1] == "__init__" else parts)])
        doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
        out.append((name, doc.strip().splitlines()[0] if doc.strip() else ""))
    return out


# ----------------------------------------------------------------------------- pages


def _reference_page(module: str) -> str:
    # The module's own heading (level 1) is the page title and the anchor its links use.
    return f"::: {module}\n    options:\n      show_root_heading: true\n      heading_level: 1\n"


def _reference_index() -> str:
    rows = ["| module | what it holds |", "|---|---|"]
    rows += [f"| [`{name}`]({name}.md) | {summary} |" for name, summary in stable_modules()]
    return (
        "# API reference\n\n"
        "Generated from the docstrings of the stable API (`spyre_shims`, API level "
        "[policy](../api-policy.md)). A vendor backend imports only these modules.\n\n" + "\n".join(rows) + "\n"
    )


def _compatibility_page() -> str:
    from spyre_matrix.catalog import load_catalog, render_compat_table
    from spyre_matrix.results import load_results

    catalog = load_catalog()
    results = load_results()
    statuses = {torch: result["status"] for torch, result in results.items()}
    lines = [
        "# Compatibility",
        "",
        "Generated at docs build time from `compat_matrix/releases.toml` and "
        "`compat_matrix/results/*.json` (the same table as `python -m spyre_matrix compat-table`). "
        "A release shows *not run* until its `compat` nox session has written a result; see "
        "[Run the compatibility matrix](guides/compat-matrix.md).",
        "",
        f"Development release: torch {catalog.development}.",
        "",
        render_compat_table(catalog, statuses, results=results),
        "## Matrix results",
        "",
    ]
    if not results:
        lines.append("No release has a committed result yet.")
    else:
        lines += ["| torch | status | passed | failed | skipped | python | first error |", "|---|---|---|---|---|---|---|"]
        for torch, r in sorted(results.items(), key=lambda item: catalog.get(item[0]).version):
            t = r.get("tests", {})
            error = (r.get("errors") or [r.get("probe_error", "")])[0] or ""
            error = error.replace("|", "\\|").replace("\n", " ")
            lines.append(f"| {torch} | {r['status']} | {t.get('passed', 0)} | {t.get('failed', 0)} | "
                         f"{t.get('skipped', 0)} | {r.get('python', '')} | {error[:160]} |")
    static = [r for r in catalog if not r.supported]
    if static:
        lines += ["", "Releases in the catalog for the static surface report only (no session): "
                  + ", ".join(f"{r.torch} ({r.notes})" for r in static) + "."]
    return "\n".join(lines) + "\n"


def _codemod(*args: str) -> str:
    """The codemods' stdout on the legacy backend: a unified diff, fenced."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-m", "spyre_codemods", *args, "--no-progress", str(LEGACY)],
                          capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)
    if proc.returncode != 0 or not proc.stdout.strip():
        log.warning("spyre_codemods %s exited %s: %s", " ".join(args), proc.returncode, proc.stderr.strip())
    diff = proc.stdout.replace(str(LEGACY), LEGACY.relative_to(ROOT).as_posix()).rstrip()
    return f"```diff\n{diff}\n```"


def _rules_by_release() -> str:
    """A table: release -> the upgrade rules keyed by it."""
    from spyre_codemods.rule_table import RULES

    by_release: dict[str, list[str]] = {}
    for rule in RULES:
        by_release.setdefault(str(rule.since), []).append(f"`{rule.id}`")
    rows = ["| release | rules |", "|---|---|"]
    rows += [f"| {release} | {', '.join(ids)} |" for release, ids in by_release.items()]
    return "\n".join(rows)


GENERATED = {
    "migrate-legacy-backend": lambda: _codemod("migrate", "--from", "2.8"),
    "upgrade-legacy-backend": lambda: _codemod("upgrade", "--from", "2.8", "--to", "2.13"),
    "rules-by-release": _rules_by_release,
}


# ----------------------------------------------------------------------------- mkdocs events


def on_startup(command: str, dirty: bool) -> None:
    _link_sources()


def on_config(config: Any) -> Any:
    reference = [{"Overview": "reference/index.md"}] + [{name: f"reference/{name}.md"} for name, _ in stable_modules()]
    nav = config["nav"]
    for item in nav:
        if isinstance(item, dict) and "API reference" in item:
            item["API reference"] = reference
    for page, title in OPTIONAL_PAGES.items():  # owned by other docs; listed once they exist
        if (Path(config["docs_dir"]) / page).is_file():
            nav.append({title: page})
    return config


def on_files(files: Files, config: Any) -> Files:
    pages = {"reference/index.md": _reference_index(), "compatibility.md": _compatibility_page()}
    pages |= {f"reference/{name}.md": _reference_page(name) for name, _ in stable_modules()}
    for path, content in pages.items():
        files.append(File.generated(config, path, content=content))
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Files) -> str:
    for key, make in GENERATED.items():
        marker = f"<!-- generated: {key} -->"
        if marker in markdown:
            markdown = markdown.replace(marker, make())
    return markdown
