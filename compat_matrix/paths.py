"""Where the matrix's committed inputs and outputs live in the repository."""

from __future__ import annotations

from pathlib import Path

# spyre_compat is the repo's compat_matrix/ folder (setuptools package-dir), so
# the committed data sits beside the code and the repo root is its parent.
PACKAGE_DIR = Path(__file__).resolve().parent
REPO_ROOT = PACKAGE_DIR.parent

RESULTS_DIR = PACKAGE_DIR / "results"
SURFACE_DIR = PACKAGE_DIR / "surface"
REPORT_MD = PACKAGE_DIR / "REPORT.md"
REPORT_PNG = PACKAGE_DIR / "report.png"

# Inputs owned by other parts of the repo (read, never written).
SURFACE_SPEC = REPO_ROOT / "shims" / "_torch" / "surface.toml"
ADAPTERS_DIR = REPO_ROOT / "shims" / "_torch" / "adapters"
VENDOR_DIRS = (REPO_ROOT / "spyre_adapter", REPO_ROOT / "examples")

# Release sources extracted from wheels (shared with the codemods work).
DEFAULT_TORCH_SRC = Path("/work/torch-src")
