"""Entry point torch calls from ``import torch`` (group ``torch.backends``)."""


def autoload() -> None:
    """Register the "spyre" device when torch is imported."""
