# An Inductor backend as vendors write it for one torch release (here 2.8):
# the input of the codemod examples in docs/guides/upgrade-torch.md.
from torch._inductor.codegen.common import register_backend_for_device
from torch._inductor.codegen.wrapper import PythonWrapperCodegen
from torch._inductor.scheduler import BaseScheduling
from torch._inductor.virtualized import V


class MyWrapper(PythonWrapperCodegen):
    pass


class MyScheduling(BaseScheduling):
    def tile_rows(self, numel):
        return min(V.graph.sizevars.size_hint(numel), 1024)

    def check_same(self, a, b):
        V.graph.sizevars.guard_equals(a, b)


def my_pass(graph):
    return graph


register_backend_for_device("mydev", MyScheduling, MyWrapper, None, my_pass)
