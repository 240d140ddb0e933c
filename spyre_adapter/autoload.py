"""Entry point torch calls during ``import torch`` (group ``torch.backends``).

Set ``TORCH_DEVICE_BACKEND_AUTOLOAD=0`` to opt out (torch's own switch).
"""


def autoload() -> None:
    """Register the "spyre" device and its backend."""
    import spyre_adapter  # noqa: F401  (registers on import)
