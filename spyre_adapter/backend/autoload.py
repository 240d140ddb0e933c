"""Entry point torch calls during ``import torch`` (group ``torch.backends``).

It registers the "spyre" device and nothing heavy: the compiler (scheduler,
emulator, Inductor, sympy) is set up when Inductor first compiles. Set
``TORCH_DEVICE_BACKEND_AUTOLOAD=0`` to opt out (torch's own switch).
"""

from spyre_adapter.backend.device import register


def autoload() -> None:
    """Register the "spyre" device; its compiler backend follows on first compile."""
    register()
