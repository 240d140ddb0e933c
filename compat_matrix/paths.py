"""Where the matrix's data lives: its own package data, and the installed packages it reads.

Nothing here depends on a checkout: the committed inputs and outputs are this
package's data (``compat_matrix/`` in the repository), the shims' adapters and
the vendor backend are found where they are installed (without importing them:
the matrix never imports torch), and downloads go to the user's cache unless a
command is given another folder.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

from spyre_surface import SPEC_PATH

PACKAGE_DIR = Path(__file__).resolve().parent

RESULTS_DIR = PACKAGE_DIR / "results"
SURFACE_DIR = PACKAGE_DIR / "surface"
REPORT_MD = PACKAGE_DIR / "REPORT.md"
REPORT_PNG = PACKAGE_DIR / "report.png"

#: The torch-internal surface the shims declare (read, never written).
SURFACE_SPEC = SPEC_PATH


def installed_package_dir(name: str) -> Path:
    """The folder of top-level package ``name``, located without importing it
    (importing spyre_shims would import torch)."""
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(f"package {name} is not installed")
    return Path(next(iter(spec.submodule_search_locations))).resolve()


#: The shims' per-era adapters (read with ast, never imported).
ADAPTERS_DIR = installed_package_dir("spyre_shims") / "_torch" / "adapters"
#: Vendor code scanned for release-specific lines (the report adds folders given with --vendor).
VENDOR_DIRS = (installed_package_dir("spyre_adapter"),)

#: Downloaded wheels and extracted release sources: ``$SPYRE_ADAPTER_CACHE``, else the user's cache folder.
CACHE_DIR = Path(os.environ.get("SPYRE_ADAPTER_CACHE")
                 or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "spyre-adapter")
DEFAULT_TORCH_SRC = CACHE_DIR / "torch-src"
DEFAULT_WHEELS = CACHE_DIR / "wheels"
