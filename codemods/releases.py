"""PyTorch release identifiers as the codemods understand them: ``major.minor``.

Rules are keyed by the minor release that introduced the new spelling; patch
releases never move Inductor APIs, so ``2.9.1`` and ``2.9`` select the same rules.
The releases themselves come from the project's one release catalog
(``compat_matrix/releases.toml``, read through :mod:`spyre_matrix.catalog`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from spyre_matrix.catalog import load_catalog

__all__ = ["Release", "KNOWN_RELEASES", "parse_release", "known_release"]

_RELEASE_RE = re.compile(r"^\s*v?(\d+)\.(\d+)(?:\.\d+)?(?:[+.\-]?[0-9A-Za-z.+\-]*)?\s*$")


@dataclass(frozen=True, order=True)
class Release:
    """A ``major.minor`` PyTorch release; ordering is numeric (2.10 > 2.9)."""

    major: int
    minor: int

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}"


def parse_release(text: str | Release) -> Release:
    """Parse ``"2.9"``, ``"2.9.1"`` or ``"2.13.0+cpu"`` into a :class:`Release`.

    Raises ``ValueError`` on anything else, so a typo on the command line fails
    loudly instead of selecting no rules.
    """
    if isinstance(text, Release):
        return text
    match = _RELEASE_RE.match(text)
    if match is None:
        raise ValueError(f"not a torch release: {text!r} (expected e.g. 2.9 or 2.9.1)")
    return Release(int(match.group(1)), int(match.group(2)))


#: The catalog's releases (latest patch of each minor, oldest first): the rule table
#: was confirmed against them.
KNOWN_RELEASES: tuple[Release, ...] = tuple(parse_release(r.torch) for r in load_catalog())


def known_release(text: str | Release) -> Release:
    """:func:`parse_release`, limited to the catalog's releases (``ValueError`` naming
    the accepted range otherwise)."""
    release = parse_release(text)
    if release not in KNOWN_RELEASES:
        raise ValueError(f"{text} is not a release the codemods know (accepted: "
                         f"{KNOWN_RELEASES[0]} to {KNOWN_RELEASES[-1]}, e.g. 2.9 or 2.9.1)")
    return release
