"""spyre_adapter: an emulated IBM Spyre backend built only on the stable API.

``import torch`` registers the "spyre" device through the ``torch.backends``
entry point (:mod:`spyre_adapter.backend.autoload`); with ``TORCH_DEVICE_BACKEND_AUTOLOAD=0``
call :func:`register`. The package root imports nothing else (not even torch), so
the command line parses its arguments before torch loads.
"""

from importlib import import_module

__version__ = "0.1.0"
__all__ = ["register", "__version__"]


def register() -> None:
    """Register the "spyre" device (its compiler follows on the first compile)."""
    # Deliberately lazy: the device module imports torch (see the module docstring).
    import_module("spyre_adapter.backend.device").register()
