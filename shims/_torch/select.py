"""Choose the adapter that serves each stable-API feature on the installed torch.

Feature detection decides; each adapter's ``RELEASES`` documents the range it was
written for and breaks ties. The choice is recorded for the probe and the matrix.
"""

from __future__ import annotations

import functools
from types import ModuleType

from packaging.specifiers import SpecifierSet

from ..errors import UnsupportedTorchError
from .version import WINDOW_TEXT, installed

#: feature -> adapter module name, filled as adapters are chosen.
ACTIVE: dict[str, str] = {}


def _pick(feature: str, candidates: list[str]) -> ModuleType:
    import importlib

    mods = [importlib.import_module(f"{__package__}.adapters.{name}") for name in candidates]
    # Adapters whose documented range covers this release first; the first one
    # that works is taken (a check can be costly: the C++ one imports setuptools).
    mods.sort(key=lambda m: installed() not in SpecifierSet(m.RELEASES))
    for mod in mods:
        if mod.available():
            ACTIVE[feature] = mod.__name__.rsplit(".", 1)[-1]
            return mod
    raise UnsupportedTorchError(feature, str(installed()), WINDOW_TEXT,
                                f"no adapter works here (tried {', '.join(candidates)})")


@functools.cache
def host_device() -> ModuleType:
    """Adapter creating host-backed PrivateUse1 tensors."""
    return _pick("device.host_backed", ["host_device_acc", "host_device_cext"])
