"""spyre_shims.compilation: recompiles and graph breaks counted as Dynamo sees them."""

from __future__ import annotations

import logging

import pytest
import torch

from spyre_shims.compilation import count_compiles, mark_dynamic


def _f(x: torch.Tensor) -> torch.Tensor:
    return x * 2 + 1


def test_static_shapes_recompile_once_then_go_dynamic() -> None:
    f = torch.compile(_f)
    with count_compiles() as c:
        for n in (3, 5, 7, 9):
            f(torch.randn(n).to("spyre"))
    # the second size makes the dimension dynamic (one recompile), later sizes reuse it
    assert (c.compiles, c.recompiles, c.graph_breaks) == (2, 1, 0)


def test_mark_dynamic_compiles_once() -> None:
    x = torch.randn(4, 6).to("spyre")
    mark_dynamic(x, 0)
    f = torch.compile(_f)
    with count_compiles() as c:
        for n in (4, 8, 12):
            f(torch.randn(n, 6).to("spyre") if n != 4 else x)
    assert (c.compiles, c.recompiles, c.graphs) == (1, 0, 1)
    assert c.seconds is not None and c.seconds > 0
    with count_compiles() as again:
        f(torch.randn(16, 6).to("spyre"))
    assert again.compiles == 0 and again.seconds == 0.0


def test_graph_breaks_are_counted_with_their_reason() -> None:
    def g(x: torch.Tensor) -> torch.Tensor:
        y = x + 1
        if y.sum() > 0:  # data-dependent branch: Dynamo splits the graph here
            return y * 2
        return y * 3

    with count_compiles() as c:
        torch.compile(g)(torch.ones(5).to("spyre"))
    assert c.graph_breaks >= 1 and c.break_reasons
    assert c.recompiles == 0


def test_counting_graph_breaks_leaves_dynamo_logging_as_it_was(capfd: pytest.CaptureFixture[str]) -> None:
    """Breaks some releases only log (torch 2.6: a data-dependent jump) are read
    from Dynamo's graph-break log; reading it prints nothing and leaves the
    logger's level, propagation and handlers as they were."""
    log = logging.getLogger("torch._dynamo.symbolic_convert.__graph_breaks")
    before = (log.level, log.propagate, list(log.handlers))

    def h(x: torch.Tensor) -> torch.Tensor:
        if (x - 1).sum() > 0:
            return x * 5
        return x * 7

    capfd.readouterr()
    with count_compiles() as c:
        torch.compile(h)(torch.ones(3).to("spyre"))
    assert c.graph_breaks == 1 and sum(c.break_reasons.values()) == 1, c
    assert (log.level, log.propagate, list(log.handlers)) == before
    assert "Graph break" not in capfd.readouterr().err


def test_device_guard_does_not_break_graphs() -> None:
    """torch asks the device guard for its type while Dynamo traces; that call
    must not become a frame of its own (it used to cost a graph break)."""
    with count_compiles() as c:
        torch.compile(_f)(torch.randn(3).to("spyre"))
    assert (c.compiles, c.graph_breaks) == (1, 0)
