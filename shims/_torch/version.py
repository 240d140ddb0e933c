"""The supported torch window and the installed release, compared with packaging."""

from __future__ import annotations

import functools

import torch
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from ..errors import UnsupportedTorchError

#: Every minor release from 2.6 to 2.15 is supported from one commit.
WINDOW = SpecifierSet(">=2.6,<2.16")
WINDOW_TEXT = "2.6 - 2.15"


@functools.cache
def installed() -> Version:
    """The installed torch release without local tags (``2.13.0+cpu`` -> ``2.13.0``)."""
    return Version(Version(torch.__version__).base_version)


def in_window(version: Version | None = None) -> bool:
    """True when ``version`` (default: the installed torch) is in the window."""
    return (version or installed()) in WINDOW


def require_window(feature: str = "spyre-adapter", version: Version | None = None) -> None:
    """Raise :class:`UnsupportedTorchError` when ``version`` (default: the installed
    torch) is outside the window."""
    v = version or installed()
    if not in_window(v):
        raise UnsupportedTorchError(feature, str(v), WINDOW_TEXT, "release outside the window")
