"""A complete vendor backend on the stable API: device "refdev", a reference interpreter.

``torch.compile`` sends every kernel Inductor schedules for a "refdev" tensor to
``compile`` as stable Kernel IR; the generated program calls what ``load``
returns. Replace those two methods with your code generator and runtime and you
have a real backend. Only public ``spyre_shims`` modules and public torch are used.
"""

from __future__ import annotations

from collections.abc import Mapping

import sympy
import torch

from spyre_shims import kernel_ir, reference
from spyre_shims.backend import Backend, DeviceProperties, Launch, register_backend
from spyre_shims.device import register_host_device
from spyre_shims.errors import UnsupportedKernelError

DEVICE = "refdev"
Buffers = Mapping[str, torch.Tensor]  # argument name -> flat host view of its memory
Sizes = Mapping[sympy.Symbol, int]  # size symbol -> its value in this call


class RefInterpreter(Backend):
    """Runs each kernel with the stable API's reference semantics; declines float64."""

    device = DEVICE

    def __init__(self) -> None:
        self.compiled: list[kernel_ir.Kernel] = []  # what compile() accepted
        self.graphs: list[kernel_ir.GraphIR] = []  # what on_graph() was told

    def compile(self, kernel: kernel_ir.Kernel) -> str:
        if any(b.dtype == "float64" for b in kernel.buffers):
            # A declined kernel runs on the host, with a FallbackWarning naming it.
            raise UnsupportedKernelError("dtype float64", kernel.name, "no 64-bit floats")
        self.compiled.append(kernel)
        return kernel_ir.to_json(kernel)  # embedded in Inductor's generated code

    def load(self, payload: str) -> Launch:
        kernel = kernel_ir.from_json(payload)

        def launch(buffers: Buffers, sizes: Sizes) -> None:
            reference.run_kernel(kernel, dict(buffers), sizes)

        return launch

    def properties(self) -> DeviceProperties:
        return DeviceProperties(name=DEVICE, cores=1)

    def on_graph(self, graph: kernel_ir.GraphIR) -> None:
        self.graphs.append(graph)


def register() -> RefInterpreter:
    """Create the "refdev" device and send ``torch.compile`` on it to the interpreter."""
    register_host_device(DEVICE)
    backend = RefInterpreter()
    register_backend(backend)
    return backend
