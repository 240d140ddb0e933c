"""The cache of planned programs, by kernel *structure*: identical kernels (every
layer of a model) are planned once per machine and run-time sizes, and share
what depends on their program alone (see :meth:`ProgramCache.shared`)."""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import threading
from typing import Any

import sympy

from spyre_shims import index as sidx
from spyre_shims import kernel_ir as kir
from spyre_shims.reference import concrete

from spyre_adapter.model.bodies import with_ranges
from spyre_adapter.model.isa import with_buffers
from spyre_adapter.model.machine import Machine
from spyre_adapter.model.program import Program
from spyre_adapter.model.structure import buffer_names, structure_text

__all__ = ["ProgramCache"]


@functools.lru_cache(maxsize=64)
def _machine_text(m: Machine) -> bytes:
    """A machine's parameters as canonical JSON (asked once per launch at new sizes)."""
    return json.dumps(m.to_dict(), sort_keys=True).encode()


class ProgramCache:
    """Programs by kernel *structure*: the Kernel IR with buffer and kernel names
    made positional, the machine and the sizes. Identical kernels - every layer of
    a model - are planned once; a hit is the cached program with the new kernel's
    buffer names. Each entry also holds the launch state its kernels share (see
    :meth:`shared`)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._programs: dict[str, tuple[Program, tuple[str, ...], dict[Any, Any]]] = {}
        self.hits = 0
        self.misses = 0

    @classmethod
    def key(cls, kernel: Any, m: Machine, sizes: dict[Any, int], extra: str = "") -> str:
        h = hashlib.sha256(structure_text(kernel))
        h.update(_machine_text(m))
        h.update(json.dumps(sorted((str(k), v) for k, v in sizes.items())).encode())
        h.update(extra.encode())
        return h.hexdigest()

    def get(self, key: str, kernel: Any) -> Program | None:
        """The program cached under ``key``, for ``kernel`` (its names)."""
        with self._lock:
            got = self._programs.get(key)
            if got is None:
                self.misses += 1
                return None
            self.hits += 1
        p, names, _ = got
        mine = buffer_names(kernel)
        if names == mine:
            return p if p.kernel is kernel else dataclasses.replace(p, kernel=kernel)
        bodies = p.bodies
        if isinstance(kernel, kir.KernelGroup):
            bodies = tuple(_as_planned(k, b, p.sizes) for k, b in zip(kernel.kernels, p.bodies)) + \
                p.bodies[len(kernel.kernels):]
        return with_buffers(p, dict(zip(names, mine)), kernel, bodies)

    def shared(self, key: str, kernel: Any) -> tuple[Program, dict[str, str], dict[Any, Any]] | None:
        """The program cached under ``key`` as it was planned (its first kernel's
        buffer names), each of those names -> ``kernel``'s, and the entry's shared
        state: a launch of ``kernel`` can run that program on its buffers renamed,
        and share with every identical kernel what depends on the program alone
        (its checks, its recorded steps, its timing)."""
        with self._lock:
            got = self._programs.get(key)
        if got is None:
            return None
        p, names, state = got
        return p, dict(zip(names, buffer_names(kernel))), state

    def put(self, key: str, p: Program, kernel: Any) -> None:
        with self._lock:
            self._programs[key] = (p, buffer_names(kernel), {})

    def clear(self) -> None:
        with self._lock:
            self._programs.clear()


def _as_planned(kernel: kir.LoopKernel, body: kir.LoopKernel, sizes: tuple[tuple[str, int], ...]) -> kir.LoopKernel:
    """``kernel`` iterated the way the cached program's ``body`` is (the planner
    may have split a dimension where the rows end)."""
    if tuple(kernel.ranges) == tuple(body.ranges):
        return kernel
    bound = {sidx.index_symbol(n): v for n, v in sizes}
    fixed = dataclasses.replace(kernel, ranges=tuple(sympy.Integer(concrete(r, bound)) for r in kernel.ranges))
    return with_ranges(fixed, tuple(int(r) for r in body.ranges))
