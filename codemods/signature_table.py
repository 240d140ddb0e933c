"""What the signature checks need besides the API index, as data.

* ``RECEIVERS``: receivers whose class a vendor's code names by convention
  (``V.ops.to_dtype(...)``, ``V.graph.sizevars.size_hint(...)``), so a method call on
  them is checked against that class's signature in the index;
* ``EXTERNAL``: callables the index cannot see (C++ methods bound into Python), with
  their parameter history;
* ``CHECKED_DUNDERS``: dunder methods whose overrides are compared with the base
  (``__init__`` is not: a subclass's constructor is its own business).
"""

from __future__ import annotations

from dataclasses import dataclass

from .releases import Release
from .releases import parse_release as _r

__all__ = ["RECEIVERS", "ExternalSignature", "EXTERNAL", "CHECKED_DUNDERS"]

_I = "torch._inductor"

RECEIVERS: dict[str, str] = {
    "ops": f"{_I}.ops_handler.OpsHandler",
    "sizevars": f"{_I}.sizevars.SizeVarAllocator",
    "wrapper_code": f"{_I}.codegen.wrapper.PythonWrapperCodegen",
    "scheduler": f"{_I}.scheduler.Scheduler",
    "graph": f"{_I}.graph.GraphLowering",
}


@dataclass(frozen=True)
class ExternalSignature:
    """A method outside the index: ``history`` = (first release, parameters) pairs."""

    method: str
    history: tuple[tuple[Release, str], ...]
    confirmed: str

    def at(self, release: Release) -> str | None:
        chosen = None
        for since, params in self.history:
            if since <= release:
                chosen = params
        return chosen


EXTERNAL: tuple[ExternalSignature, ...] = (
    ExternalSignature(
        method="add_lambda_guard",
        history=((_r("2.6"), "self, guard_fn, verbose_code_parts"),
                 (_r("2.11"), "self, guard_fn, verbose_code_parts, user_stack")),
        confirmed="GuardManager.add_lambda_guard is C++; 2.10.0 torch/_dynamo/guards.py:1798 passes "
                  "(guard_fn, verbose_code_parts), 2.11.0 same file:1824 (guard_fn, verbose_code_parts, None)",
    ),
)

CHECKED_DUNDERS = frozenset({"__call__"})
