"""Kernel kinds: one record per kind of kernel the card runs, the single place
that says how a kernel of that kind is recognised, planned, measured and
handled when it cannot run.

A kind (:class:`KernelKind`) holds

* ``matches``: whether a Kernel IR kernel is of this kind;
* ``plan``: its planner, kernel + machine + run-time sizes -> a program;
* ``program_kind``: the :attr:`~spyre_adapter.model.program.Program.kind` its programs carry;
* ``dtypes``: the dtypes it computes in, and ``unsupported``: why a kernel of the
  kind cannot run on the card, as (what, where, detail) - e.g. ``("op lgamma",
  "<loop kernel>", "no Spyre vector/SFU implementation")`` - or None when it can;
  checked before planning;
* ``work``: its useful work from the Kernel IR alone (the roofline's numerator);
* its fallback policy: ``host_fallback`` (a kernel no program fits at some
  run-time sizes runs its reference semantics on the host, announced) and
  ``reference`` (it has reference semantics to verify a launch against).

The scheduler registers the built-in kinds (:mod:`spyre_adapter.scheduler.kinds`);
a new kind is one :func:`register_kind` call with its record, in one module
(``tests/adapter/model/test_kinds.py`` adds a toy kind that way).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

import sympy

from spyre_adapter.model.machine import Machine
from spyre_adapter.model.program import Program

__all__ = ["MATMUL_OPS", "KernelKind", "register_kind", "unregister_kind", "kind_of", "kinds"]

#: The extern ops the PE arrays multiply as one matmul (bias and batch variants).
MATMUL_OPS = frozenset({"mm", "bmm", "addmm", "baddbmm"})

Planner = Callable[[Any, Machine, Mapping[sympy.Symbol, int]], Program]


@dataclasses.dataclass(frozen=True)
class KernelKind:
    """One kind of kernel (see the module docstring)."""

    name: str
    program_kind: str
    matches: Callable[[Any], bool]
    plan: Planner
    dtypes: frozenset[str]
    work: Callable[[Any, Mapping[sympy.Symbol, int]], tuple[str, float]]
    unsupported: Callable[[Any], tuple[str, str, str] | None] = lambda kernel: None
    host_fallback: bool = True
    reference: bool = True


_KINDS: dict[str, KernelKind] = {}


def register_kind(kind: KernelKind) -> KernelKind:
    """Add ``kind`` (a kernel takes the first registered kind that matches it)."""
    if kind.name in _KINDS:
        raise ValueError(f"kernel kind {kind.name!r} is already registered")
    _KINDS[kind.name] = kind
    return kind


def unregister_kind(name: str) -> None:
    """Remove the kind ``name`` (tests that add a kind of their own)."""
    _KINDS.pop(name, None)


def kinds() -> tuple[KernelKind, ...]:
    """Every registered kind, in registration order."""
    return tuple(_KINDS.values())


def kind_of(kernel: Any) -> KernelKind | None:
    """The kind of ``kernel`` (None: no registered kind takes it)."""
    return next((k for k in _KINDS.values() if k.matches(kernel)), None)
