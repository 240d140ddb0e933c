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

Policy (the full text: ``docs/api-policy.md``)
----------------------------------------------
*API level.* :data:`API_LEVEL` (an integer, now 1) names this API's version. An
additive change (a new module, name, keyword parameter with a default after the
existing ones, op in the op set, exception subclass) raises it by one in the next
release that contains it. A backend records the level it was written against in
``Backend.api_level``; ``register_backend`` refuses a backend that needs a newer
level than the installed one, naming both.

*What is promised.* Every module of this package without a leading underscore,
and in each the names of its ``__all__``: that each exists with its kind; the
signatures of functions and methods (names, order, kinds, defaults, annotations);
classes' bases and public members, dataclasses' fields, defaults and frozenness;
the values of contract constants (the op set, ``kernel_ir.IR_VERSION``); and the
behaviour their docstrings describe. The Kernel IR's JSON form carries its own
``IR_VERSION``: readers refuse a newer one and read older ones, and loading never
runs code. Not promised: ``spyre_shims._torch`` and underscored names, the members
of the Inductor classes ``compat`` re-exports (the names resolve on every
supported release; the classes are Inductor's), and the ``spyre_adapter`` backend
built on top. The committed snapshot ``api/spyre_shims.json`` is compared with
this package by the test suite, so no change slips through unnoticed.

*How deprecations are announced.* A breaking change takes three steps, each an
entry under "Stable API" in ``CHANGELOG.md``: the replacement is added (level
N + 1); in the same release the old spelling keeps working but emits a
:class:`DeprecationWarning` naming its replacement and the level that removes it,
and its docstring says so (``spyre-adapter migrate`` gains a rule where the change
is mechanical); it is removed no earlier than level N + 3. Leaving a torch release
out of the supported window is announced in the changelog one release ahead;
outside the window registration raises ``UnsupportedTorchError`` naming the
feature, the release and the window.
"""

import torch  # noqa: F401  (first: torch's import registers devices that import this package)

from ._api_level import API_LEVEL
from .capabilities import Capabilities, capabilities

__version__ = "0.1.0"
__all__ = ["API_LEVEL", "Capabilities", "capabilities", "__version__"]
