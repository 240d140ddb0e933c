"""Max-autotune for the Spyre planner (spyre_adapter.scheduler.search): the
stationary one-dimensional divisions the closed form cannot tell from the
near-ties it picks, simulated; and the request reaching the planner from
torch.compile's mode and from the compiled payload."""

from __future__ import annotations

import json

import pytest
import torch

from spyre_shims.compat.config import inductor_config
from spyre_shims.runtime import reset_compiled
from tests.support import kernels as K

from spyre_adapter.backend.session import use_machine
from spyre_adapter.backend.spyre import PayloadError, SpyreBackend, read_payload
from spyre_adapter.harness.on_device import run_compiled
from spyre_adapter.model.machine import DEFAULT
from spyre_adapter.model.timing import simulate
from spyre_adapter.scheduler import matmul
from spyre_adapter.scheduler.search import autotuning, max_autotune

#: An 8-core card: the divisions differ as on 32 cores, at a fraction of the planning.
EIGHT = DEFAULT.replace(cores=8)


def test_max_autotune_finds_a_faster_stationary_division_than_the_default_plan() -> None:
    """512x2048x2048 on 8 cores: the default plan keeps the closed form's near-tie;
    max-autotune simulates the stationary one-dimensional divisions (B's columns
    held for the whole K walk and A streamed once, shared over the ring - or the
    mirror, A's rows held), and one of them is faster."""
    kern = K.mm(512, 2048, 2048)
    default = matmul.plan_matmul(kern, EIGHT, {}, "mm")
    with max_autotune():
        tuned = matmul.plan_matmul(kern, EIGHT, {}, "mm")
    assert (tuned.plan.grid, tuned.plan.order) in (((1, 1, 8, 1), "b"), ((1, 8, 1, 1), "a"))
    assert default.plan.grid != tuned.plan.grid
    t_default = simulate(default, EIGHT, keep_events=False).total_ns
    t_tuned = simulate(tuned, EIGHT, keep_events=False).total_ns
    assert t_tuned < 0.99 * t_default


def test_the_default_plan_does_not_search_the_seeds(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without max-autotune the seeds are not built (what keeps the default compile's
    time and memory where they were)."""
    calls: list[bool] = []
    real = matmul._seeded
    monkeypatch.setattr(matmul, "_seeded", lambda *a: calls.append(True) or real(*a))
    matmul.plan_matmul(K.mm(512, 2048, 2048), EIGHT, {}, "mm")
    assert not calls and not autotuning()
    with max_autotune():
        matmul.plan_matmul(K.mm(512, 2048, 2048), EIGHT, {}, "mm")
    assert calls and not autotuning()


@pytest.mark.parametrize("how", ["mode", "config"])
def test_torch_compile_max_autotune_reaches_the_planner_and_matches_eager(how: str,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """torch.compile(mode="max-autotune"), or Inductor's max_autotune patched while
    compiling: the matmul is planned with the longer search, and the result equals
    CPU eager's."""
    seen: list[bool] = []
    real = matmul.plan_matmul

    def spy(*a, **k):
        seen.append(autotuning())
        return real(*a, **k)

    monkeypatch.setattr(matmul, "plan_matmul", spy)
    from spyre_adapter.scheduler import kinds
    monkeypatch.setattr(kinds, "plan_matmul", spy)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(128, 256, generator=g).half()
    # (a shape per case: the program cache would serve the other case's program)
    w = torch.randn(256, 384 if how == "mode" else 320, generator=g).half()
    fn = lambda x, w: torch.relu(x @ w)  # noqa: E731
    reset_compiled()
    with use_machine(EIGHT):
        if how == "mode":
            compiled = torch.compile(lambda *a: fn(*a), dynamic=False, mode="max-autotune")
            out = compiled(x.to("spyre"), w.to("spyre")).cpu()
        else:
            with inductor_config(max_autotune=True):
                out, fallbacks = run_compiled(fn, (x, w))
            assert not fallbacks
    assert seen and all(seen)
    torch.testing.assert_close(out.float(), fn(x.float(), w.float()), atol=0.05, rtol=0.01)


def test_the_payload_carries_max_autotune_to_launch_time_planning() -> None:
    """A kernel compiled with max-autotune says so in its payload (launches at new
    run-time sizes plan with it too); a payload without the flag is the default, and
    a flag that is not a boolean is refused with one line."""
    kern = K.mm(64, 128, 64)
    backend = SpyreBackend()
    with max_autotune():
        tuned = json.loads(backend.compile(kern))
    plain = json.loads(backend.compile(kern))
    assert tuned.get("autotune") is True and "autotune" not in plain
    assert read_payload(json.dumps(tuned))[0].name == kern.name
    with pytest.raises(PayloadError, match="autotune: true or false"):
        read_payload(json.dumps(tuned | {"autotune": "yes"}))
