"""Release sources for static analysis: download a torch wheel, keep only the Python trees we read.

Layout (shared with the codemods work): ``<src>/<version>/torch/...``, with a
``.complete`` marker once a release is fully extracted. A release whose
``torch/_inductor`` already exists is never downloaded again.
"""

from __future__ import annotations

import fnmatch
import subprocess
import sys
import zipfile
from pathlib import Path

# Everything the extractor resolves lives in these parts of the wheel.
MEMBERS = (
    "torch/_inductor/*",
    "torch/_dynamo/*",
    "torch/utils/*",
    "torch/_functorch/*",
    "torch/__init__.py",
    "torch/version.py",
)
MARKER = ".complete"
# Wheels already on this machine (the local CPU build) are used before downloading.
LOCAL_WHEEL_DIRS = (Path("/opt/wheels"),)


def release_dir(src: Path, version: str) -> Path:
    return src / version


def is_extracted(src: Path, version: str) -> bool:
    return (release_dir(src, version) / "torch" / "_inductor").is_dir()


def extract_wheel(wheel: Path, dest: Path) -> int:
    """Unpack the Python trees we analyse from ``wheel`` into ``dest``; returns files written."""
    written = 0
    with zipfile.ZipFile(wheel) as archive:
        for name in archive.namelist():
            if name.endswith("/") or not any(fnmatch.fnmatchcase(name, pattern) for pattern in MEMBERS):
                continue
            archive.extract(name, dest)
            written += 1
    (dest / MARKER).write_text(wheel.name + "\n", encoding="utf-8")
    return written


def _find_wheel(version: str, directories: tuple[Path, ...]) -> Path | None:
    for directory in directories:
        # Any build of exactly this release (local labels like +cpu included).
        for wheel in sorted(directory.glob(f"torch-{version}-*.whl")) + sorted(
            directory.glob(f"torch-{version}+*.whl")
        ):
            return wheel
    return None


def download_wheel(version: str, wheels: Path) -> Path:
    """``pip download`` one torch wheel for this interpreter/platform into ``wheels``."""
    wheels.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [sys.executable, "-m", "pip", "download", f"torch=={version}", "--no-deps",
         "--only-binary=:all:", "-d", str(wheels), "-q"],
        check=True,
    )
    wheel = _find_wheel(version, (wheels,))
    if wheel is None:
        raise FileNotFoundError(f"pip download left no torch {version} wheel in {wheels}")
    return wheel


def ensure_release(version: str, src: Path, wheels: Path, keep_wheel: bool = False) -> Path:
    """Make ``<src>/<version>/torch`` exist; download only what is missing."""
    dest = release_dir(src, version)
    if is_extracted(src, version):
        return dest
    wheel = _find_wheel(version, (wheels, *LOCAL_WHEEL_DIRS))
    downloaded = wheel is None
    if wheel is None:
        wheel = download_wheel(version, wheels)
    dest.mkdir(parents=True, exist_ok=True)
    extract_wheel(wheel, dest)
    if downloaded and not keep_wheel:
        wheel.unlink()  # several GB each for CUDA builds; the extracted trees are ~20 MB
    return dest
