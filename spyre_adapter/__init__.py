"""spyre_adapter: an emulated IBM Spyre backend built only on the stable API.

``import spyre_adapter`` (or just ``import torch``, through the torch.backends
entry point) registers the "spyre" device and its Inductor backend.
"""

from .device import register

__version__ = "0.1.0"
__all__ = ["register", "__version__"]

register()
