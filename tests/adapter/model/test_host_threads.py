"""The backend's host work (planning, emulating) runs on SPYRE_EMULATOR_THREADS
intra-op threads and gives the process its own count back, also on an error."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

from spyre_adapter.model.host_threads import host_threads, wanted


@pytest.fixture
def two_threads() -> Iterator[None]:
    had = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(had)


@pytest.mark.parametrize(("raw", "inside"), [(None, 1), ("1", 1), ("3", 3), ("0", 1), ("x", 1)])
def test_the_block_runs_on_the_configured_threads(two_threads: None, monkeypatch: pytest.MonkeyPatch,
                                                  raw: str | None, inside: int) -> None:
    if raw is None:
        monkeypatch.delenv("SPYRE_EMULATOR_THREADS", raising=False)
    else:
        monkeypatch.setenv("SPYRE_EMULATOR_THREADS", raw)
    assert wanted() == inside
    with host_threads() as own:
        assert torch.get_num_threads() == inside
        assert own == 2
    assert torch.get_num_threads() == 2


def test_the_process_count_comes_back_after_an_error(two_threads: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPYRE_EMULATOR_THREADS", "1")
    with pytest.raises(RuntimeError), host_threads():
        raise RuntimeError("a planner failed")
    assert torch.get_num_threads() == 2
