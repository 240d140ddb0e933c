"""spyre_shims: a stable, versioned API over PyTorch Inductor (API level 1).

Vendor backends import this package instead of ``torch._inductor``. It exposes:

* :mod:`spyre_shims.kernel_ir` - the stable Kernel IR (frozen dataclasses, JSON);
* :mod:`spyre_shims.ops` and :mod:`spyre_shims.reference` - the op set and its
  executable semantics;
* :mod:`spyre_shims.backend` - :class:`Backend` and :func:`register_backend`;
* :mod:`spyre_shims.device` - host-backed accelerator devices (PrivateUse1);
* :mod:`spyre_shims.runtime` - entry points of generated code and graph capture;
* :mod:`spyre_shims.kernels` - hand-written kernels replacing a torch function;
* :mod:`spyre_shims.lowering` - device-scoped decompositions and host fallbacks;
* :mod:`spyre_shims.compat` - version-normalised access to common Inductor internals;
* :func:`capabilities` - what works on the installed torch.

Only the private package ``spyre_shims._torch`` touches torch internals.
"""

import torch  # noqa: F401  (first: torch's import registers devices that import this package)

from ._api_level import API_LEVEL
from .capabilities import Capabilities, capabilities

__version__ = "0.1.0"
__all__ = ["API_LEVEL", "Capabilities", "capabilities", "__version__"]
