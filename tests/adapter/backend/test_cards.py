"""Several cards as devices: ``spyre:0 .. spyre:N-1`` from the machine spec's
``cards``, ``set_device``/``current_device``/``LOCAL_RANK``, one-line errors for
bad indices, and one session (card, memory, report) per card."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from spyre_adapter.backend import session

ENV = {k: v for k, v in os.environ.items() if k not in ("LOCAL_RANK", "SPYRE_MACHINE")}


def _run(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env={**ENV, **env},
                          timeout=120)


def test_tensors_live_on_the_card_they_name_and_compute_like_cpu() -> None:
    x = torch.randn(4, 6)
    for i in range(torch.spyre.device_count()):
        y = x.to(f"spyre:{i}")
        assert y.device == torch.device("spyre", i)
        z = (y * 2 + 1).sum(0)  # eager ops keep the card of their inputs
        assert z.device == torch.device("spyre", i)
        torch.testing.assert_close(z.cpu(), (x * 2 + 1).sum(0))
    a, b = x.to("spyre:1"), x.to("spyre:2")
    assert torch.equal(a.to("spyre:2").cpu(), b.cpu())  # card to card
    with pytest.raises(RuntimeError, match="same device"):
        a + b


def test_set_device_and_the_device_context_choose_the_current_card() -> None:
    before = torch.spyre.current_device()
    try:
        torch.spyre.set_device(3)
        assert torch.spyre.current_device() == 3 and torch.empty(2, device="spyre").device.index == 3
        # paths where torch fills the index in from the device guard land on the current card too
        assert torch.arange(3.0).to("spyre").device.index == 3
        assert torch.tensor([1.0, 2.0], device="spyre").device.index == 3
        assert torch.ones(1, device="spyre:2").device.index == 2
        with torch.spyre.device("spyre:5"):
            assert torch.zeros(1, device="spyre").device.index == 5
            assert session.current().index == 5
        assert torch.spyre.current_device() == 3
        torch.spyre.set_device(torch.device("spyre", 1))
        assert torch.spyre.current_device() == 1
    finally:
        torch.spyre.set_device(before)


@pytest.mark.parametrize("bad", [-1, 8, 99, "x", 1.5, True])
def test_bad_card_indices_are_refused_in_one_line(bad: object) -> None:
    with pytest.raises(ValueError) as info:
        torch.spyre.set_device(bad)
    message = str(info.value)
    assert "\n" not in message and "0..7" in message and "device=" in message
    with pytest.raises(RuntimeError, match=r"spyre:8 is not accepted: expected a device index 0\.\.7"):
        torch.ones(1, device="spyre:8")


def test_each_card_has_its_own_session_memory_and_report() -> None:
    s1, s2 = session.card_session(1), session.card_session(2)
    assert s1 is not s2 and s1.index == 1 and s2.index == 2
    assert s1.card is not s2.card and s1.report is not s2.report
    assert session.card_session(1) is s1
    assert torch.spyre.card_report(1) is s1.report


def test_the_card_count_comes_from_the_machine_spec() -> None:
    out = _run("import torch; print(torch.spyre.device_count(), torch.ones(1, device='spyre:3').device)",
               SPYRE_MACHINE="cards=4")
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["4", "spyre:3"]
    out = _run("import torch; torch.ones(1, device='spyre:4')", SPYRE_MACHINE="cards=4")
    assert out.returncode != 0 and "spyre:4 is not accepted: expected a device index 0..3" in out.stderr


def test_local_rank_picks_the_card_under_torchrun() -> None:
    out = _run("import torch; print(torch.spyre.current_device(), torch.ones(1, device='spyre').device)",
               LOCAL_RANK="2")
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["2", "spyre:2"]
    out = _run("import torch; torch.ones(1, device='spyre')", LOCAL_RANK="9")
    assert out.returncode != 0
    assert out.stderr.strip().splitlines()[-1].endswith(
        "LOCAL_RANK='9' is not accepted: expected a card index 0..7 (the machine has 8 cards; "
        "set cards= in SPYRE_MACHINE for more)")


def test_compiled_code_runs_on_the_current_card_and_reports_there() -> None:
    f = torch.compile(lambda a: torch.softmax(a, -1) * 2)
    x = torch.randn(8, 64)
    before = [session.card_session(i).report.launch_count for i in (1, 2)]
    with torch.spyre.device(2):
        y = f(x.to("spyre:2"))
    assert y.device == torch.device("spyre", 2)
    torch.testing.assert_close(y.cpu(), torch.softmax(x, -1) * 2)
    after = [session.card_session(i).report.launch_count for i in (1, 2)]
    assert after[0] == before[0] and after[1] > before[1]
