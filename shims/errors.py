"""Exceptions raised by the stable API (all derive from :class:`ShimError`)."""

from __future__ import annotations


class ShimError(RuntimeError):
    """Base class of every error the stable API raises on purpose."""


class UnsupportedTorchError(ShimError):
    """The installed torch release lacks something the stable API needs.

    The message names the feature, the installed release and the supported window,
    so a vendor sees at import or registration time what to change.
    """

    def __init__(self, feature: str, release: str, window: str, detail: str = "") -> None:
        self.feature = feature
        self.release = release
        self.window = window
        msg = (
            f"spyre-adapter: feature {feature!r} is unavailable on torch {release}; "
            f"the supported window is torch {window}"
        )
        if detail:
            msg += f" ({detail})"
        super().__init__(msg)


class UnsupportedKernelError(ShimError):
    """A kernel uses something the stable Kernel IR cannot express.

    Carries the op (or construct) and the Inductor node it came from.
    """

    def __init__(self, what: str, node: str = "", detail: str = "") -> None:
        self.what = what
        self.node = node
        msg = f"spyre-adapter: cannot express {what!r} in the Kernel IR"
        if node:
            msg += f" (node {node})"
        if detail:
            msg += f": {detail}"
        super().__init__(msg)


class PatchTargetError(ShimError):
    """A registered patch target is missing or has an unexpected signature."""
