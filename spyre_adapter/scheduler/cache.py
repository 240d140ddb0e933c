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

from spyre_adapter.model.bodies import with_ranges, with_symbols
from spyre_adapter.model.isa import with_buffers
from spyre_adapter.model.machine import Machine
from spyre_adapter.model.program import Program
from spyre_adapter.model.structure import buffer_names, structure_sizes, structure_text, symbol_names
from spyre_adapter.scheduler.size_templates import SizeTemplates

__all__ = ["ProgramCache", "Shared"]


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
        #: key -> (program, its kernel's buffer names, its size symbols, shared launch state)
        self._programs: dict[str, tuple[Program, tuple[str, ...], tuple[str, ...], dict[Any, Any]]] = {}
        self.hits = 0
        self.misses = 0
        #: programs the planners made (misses less those bound from size templates)
        self.planned = 0
        #: programs bound from size templates
        self.bound = 0
        #: size templates by (structure, machine, bucket): see :mod:`.size_templates`
        self.templates = SizeTemplates()
        #: keys of programs bound from a template -> (templates key, template)
        self.bound_from: dict[str, tuple[str, Any]] = {}

    @classmethod
    def key(cls, kernel: Any, m: Machine, sizes: dict[Any, int], extra: str = "") -> str:
        h = hashlib.sha256(structure_text(kernel))
        h.update(_machine_text(m))
        h.update(json.dumps(structure_sizes(kernel, sizes)).encode())
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
        p, names, symbols, _ = got
        return _for_kernel(p, names, symbols, kernel)

    def shared(self, key: str, kernel: Any) -> Shared | None:
        """The program cached under ``key`` as it was planned (its first kernel's
        buffer names and size symbols), each of those names and symbols ->
        ``kernel``'s, and the entry's shared state: a launch of ``kernel`` can run
        that program on its buffers renamed with its sizes rebound, and share with
        every identical kernel what depends on the program alone (its checks, its
        recorded steps, its timing)."""
        with self._lock:
            got = self._programs.get(key)
        if got is None:
            return None
        p, names, symbols, state = got
        return Shared(p, dict(zip(names, buffer_names(kernel))), dict(zip(symbols, symbol_names(kernel))), state,
                      names, symbols)

    def put(self, key: str, p: Program, kernel: Any) -> None:
        with self._lock:
            self._programs[key] = (p, buffer_names(kernel), symbol_names(kernel), {})

    def drop(self, key: str) -> None:
        """Forget the program under ``key``."""
        with self._lock:
            self._programs.pop(key, None)
            self.bound_from.pop(key, None)

    def clear(self) -> None:
        with self._lock:
            self._programs.clear()
            self.templates.clear()
            self.bound_from.clear()


@dataclasses.dataclass(frozen=True)
class Shared:
    """A cached program as it was planned, and how a kernel of the same structure
    runs it: ``names`` and ``symbols`` map the program's buffer names and size
    symbols to the kernel's; ``state`` is what every such kernel shares."""

    program: Program
    names: dict[str, str]
    symbols: dict[str, str]
    state: dict[Any, Any]
    #: the program's own buffer names and size symbols, in the kernel's order
    planned_names: tuple[str, ...] = ()
    planned_symbols: tuple[str, ...] = ()

    def for_kernel(self, kernel: Any) -> Program:
        """The program under ``kernel``'s buffer names and size symbols (what
        :meth:`ProgramCache.get` gives ``kernel``)."""
        return _for_kernel(self.program, self.planned_names, self.planned_symbols, kernel)


def _for_kernel(p: Program, names: tuple[str, ...], symbols: tuple[str, ...], kernel: Any) -> Program:
    """Program ``p`` planned for a kernel with buffer ``names`` and size ``symbols``,
    under ``kernel``'s names and symbols."""
    mine, my_symbols = buffer_names(kernel), symbol_names(kernel)
    if names == mine and symbols == my_symbols:
        return p if p.kernel is kernel else dataclasses.replace(p, kernel=kernel)
    if symbols != my_symbols:  # the same sizes under this kernel's symbols
        to_mine = dict(zip(symbols, my_symbols))
        p = dataclasses.replace(p, sizes=tuple((to_mine.get(n, n), v) for n, v in p.sizes),
                                bodies=tuple(with_symbols(b, to_mine) for b in p.bodies))
    bodies = p.bodies
    if isinstance(kernel, kir.KernelGroup):
        bodies = tuple(_as_planned(k, b, p.sizes) for k, b in zip(kernel.kernels, p.bodies)) + \
            p.bodies[len(kernel.kernels):]
    return with_buffers(p, dict(zip(names, mine)), kernel, bodies)


def _as_planned(kernel: kir.LoopKernel, body: kir.LoopKernel, sizes: tuple[tuple[str, int], ...]) -> kir.LoopKernel:
    """``kernel`` iterated the way the cached program's ``body`` is (the planner
    may have split a dimension where the rows end)."""
    if tuple(kernel.ranges) == tuple(body.ranges):
        return kernel
    bound = {sidx.index_symbol(n): v for n, v in sizes}
    fixed = dataclasses.replace(kernel, ranges=tuple(sympy.Integer(concrete(r, bound)) for r in kernel.ranges))
    return with_ranges(fixed, tuple(int(r) for r in body.ranges))
