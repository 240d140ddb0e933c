"""The session is the one place the device keeps state: two sessions in one
process, on two machines, run the same compiled model and share nothing."""

from __future__ import annotations

import pytest
import torch

from spyre_adapter.backend.session import Session, activate, current
from spyre_adapter.model.machine import Machine


def test_two_sessions_on_two_machines_share_nothing() -> None:
    a = Session(Machine.from_spec("cores=8"))
    b = Session(Machine.from_spec("cores=4,lx_kib=512"))
    f = torch.compile(lambda x, w: torch.softmax(x @ w, -1) * 2)
    x, w = torch.randn(64, 256), torch.randn(256, 128)
    want = torch.softmax(x @ w, -1) * 2
    with activate(a):
        assert current() is a
        got_a = f(x.to("spyre"), w.to("spyre")).cpu()
    launches_a = a.report.launch_count
    with activate(b):
        got_b = f(x.to("spyre"), w.to("spyre")).cpu()
    assert current() is not a and current() is not b
    torch.testing.assert_close(got_a, want, rtol=1e-3, atol=1e-3)
    torch.testing.assert_close(got_b, want, rtol=1e-3, atol=1e-3)
    # each session's launches are in its own report, run on its own card, planned for its own machine
    assert launches_a > 0 and a.report.launch_count == launches_a and b.report.launch_count == launches_a
    assert a.card is not b.card and a.card.lx.shape == (8, 2 << 20) and b.card.lx.shape == (4, 512 << 10)
    assert max(r["cores"] for r in a.report.per_kernel()) > 4
    assert max(r["cores"] for r in b.report.per_kernel()) <= 4
    assert a.programs is not b.programs


def test_what_if_machines_are_scoped_to_the_session() -> None:
    s = Session(Machine.from_spec("cores=8"))
    card = s.card
    with s.use_machine(Machine.from_spec("cores=2")) as m:
        assert s.machine is m and s.card is not card and s.card.lx.shape[0] == 2
    assert s.machine.cores == 8 and s.card is card
    with s.generic_path():
        assert not s.handwritten
    assert s.handwritten


def test_the_report_attributes_the_backends_host_time_to_its_phases() -> None:
    s = Session()
    with activate(s):
        f = torch.compile(lambda a, b: (a @ b).relu() + 1, dynamic=False, options={"fx_graph_cache": False})
        a, b = torch.randn(64, 64, device="spyre"), torch.randn(64, 64, device="spyre")
        f(a, b)
        first = dict(s.report.host_s)
        f(a, b)
    assert set(first) == {"compile", "graph", "plan_at_launch", "first_launch"}
    # static sizes: every program was planned at compile time, none at a launch
    assert first["plan_at_launch"] == 0
    assert all(v > 0 for k, v in first.items() if k != "plan_at_launch"), first
    # a steady launch is not the backend's own work: nothing more is counted
    assert s.report.host_s == first
    assert "backend host time: compile" in s.report.summary()
    with pytest.raises(ValueError, match="host phase 'planning'"):
        with s.report.host_time("planning"):
            pass


def test_identical_kernels_with_other_size_symbols_share_one_program() -> None:
    """Under dynamic shapes each layer's KV cache gets a size symbol of its own;
    at equal sizes the layers' kernels are one structure: planned once, the
    second launched on the first's program with its sizes rebound (a decode
    token planned each layer's kernels anew before)."""
    s = Session()
    with activate(s):
        f = torch.compile(lambda q, k1, k2: (torch.softmax(q @ k1.T, -1), torch.softmax(q @ k2.T, -1)),
                          dynamic=True, options={"fx_graph_cache": False})
        q = torch.randn(4, 64)
        for n1, n2, planned in ((5, 7, 4), (9, 9, 2), (12, 12, 2)):
            k1, k2 = torch.randn(n1, 64), torch.randn(n2, 64)
            misses, hits = s.programs.misses, s.programs.hits
            a, b = f(q.to("spyre"), k1.to("spyre"), k2.to("spyre"))
            torch.testing.assert_close(a.cpu(), torch.softmax(q @ k1.T, -1), rtol=1e-3, atol=1e-3)
            torch.testing.assert_close(b.cpu(), torch.softmax(q @ k2.T, -1), rtol=1e-3, atol=1e-3)
            # (5, 7): the two matmuls and softmaxes differ in size; then each pair is one program
            assert (s.programs.misses - misses, s.programs.hits - hits) == (planned, 4 - planned)
