"""Bad input a command finds: reported by the command line as one line naming
the argument, the value and what is accepted, with exit status 2 (see
:mod:`spyre_adapter.cli.argcheck`). Here, below the commands, so that a command
that finds a problem only once it runs (a machine too small for the model) can
say so the same way."""

from __future__ import annotations

__all__ = ["UsageError", "ArgError"]


class UsageError(Exception):
    """Bad input found by a command: reported as one line, exit status 2."""


class ArgError(UsageError):
    """A bad argument found after parsing (e.g. two arguments that do not fit together)."""

    def __init__(self, argument: str, value: object, accepted: str) -> None:
        self.argument, self.value, self.accepted = argument, value, accepted
        if value is None:  # a missing value
            super().__init__(f"argument {argument}: {accepted}")
        else:
            super().__init__(f"argument {argument}: {_show(value)} is not accepted: {accepted}")


def _show(value: object) -> str:
    return repr(value) if isinstance(value, str) else str(value)
