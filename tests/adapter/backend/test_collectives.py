"""The spyre c10d backend (``sccl``) under torchrun: every collective on spyre
tensors against the same collective on CPU tensors through gloo, at a random
size, dtype and reduce op, with 2 and 4 ranks; each charged on the modeled link."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ...support.torchrun import rank_results

CHECK = Path(__file__).parents[2] / "support" / "collectives_check.py"
COLLECTIVES = {"all_reduce", "broadcast", "reduce", "all_gather", "all_gather_into_tensor", "reduce_scatter_tensor",
               "gather", "scatter", "all_to_all_single", "send/recv", "barrier"}


def _torchrun(ranks: int, seed: int, tmp_path: Path) -> list[dict]:
    return rank_results(CHECK, ranks, seed, tmp_path, timeout=300)


@pytest.mark.parametrize(("ranks", "seed"), [(2, 1), (4, 2)])
def test_every_collective_matches_gloo_on_cpu(ranks: int, seed: int, tmp_path: Path) -> None:
    results = _torchrun(ranks, seed, tmp_path)
    assert [r["rank"] for r in results] == list(range(ranks))
    assert [r["card"] for r in results] == list(range(ranks))  # LOCAL_RANK picks the card
    for r in results:
        names = {c.split("[")[0] for c in r["checked"]}
        roots_only = {"reduce", "gather"}  # checked on the root rank of each draw
        assert COLLECTIVES - roots_only <= names, COLLECTIVES - names
        assert {"sum", "max", "min", "product"} <= {c[len("all_reduce["):-1] for c in r["checked"]
                                                   if c.startswith("all_reduce[") and " " not in c}
        # every collective was charged on the link, by an algorithm of the model
        assert r["link_ns"] > 0
        assert {"all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send", "recv", "barrier"} <= \
            set(r["collectives"])
    checked = {c.split("[")[0] for r in results for c in r["checked"]}
    assert COLLECTIVES <= checked


FAULTS = Path(__file__).parents[2] / "support" / "fault_check.py"


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ranks(scenario: str, ranks: int, timeout_s: float) -> list[tuple[int, float, str]]:
    """Launch the scenario's ranks; (exit code, seconds to exit, last stderr line) of each."""
    import time

    port = _free_port()
    procs, t0 = [], time.monotonic()
    for rank in range(ranks):
        env = {k: v for k, v in os.environ.items() if k != "SPYRE_MACHINE"}
        env.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(ranks), MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=str(port))
        procs.append(subprocess.Popen([sys.executable, str(FAULTS), scenario, str(timeout_s)], env=env,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True))
    out = []
    for p in procs[:-1]:  # the survivors (the last rank is the one that fails)
        _, err = p.communicate(timeout=timeout_s + 120)
        lines = err.strip().splitlines()
        out.append((p.returncode, time.monotonic() - t0, lines[-1] if lines else ""))
    procs[-1].kill()
    procs[-1].wait()
    return out


@pytest.mark.parametrize("scenario", ["dies", "hangs"])
def test_a_rank_that_dies_or_hangs_gives_the_others_a_one_line_error_within_the_timeout(scenario: str) -> None:
    timeout_s = 8.0
    for code, seconds, line in _ranks(scenario, 3, timeout_s):
        assert code == 3, line
        assert seconds < timeout_s + 60  # start-up included; no hang
        assert line.startswith("CollectiveError: sccl all_reduce on rank ") and \
            "failed: another rank is gone or did not answer within the group's timeout" in line, line


def test_ranks_that_disagree_on_size_and_dtype_all_get_a_clear_error() -> None:
    results = _ranks("mismatch", 2, 30.0)
    code, _, line = results[0]
    assert code == 3
    assert line == ("CollectiveError: sccl all_reduce: the ranks disagree (rank 0: all_reduce of float32[4194304], "
                    "rank 1: all_reduce of float16[100]); every rank must call the same collective with tensors of "
                    "the same dtype and size")


def test_a_collective_is_charged_in_the_report_and_drawn_on_the_link_track(tmp_path: Path) -> None:
    from spyre_shims.distributed import CollectiveCall

    from spyre_adapter.backend.collectives import charge
    from spyre_adapter.backend.session import Session, activate
    from spyre_adapter.emulator.trace import LINK_PID
    from spyre_adapter.model.collectives import link_cost

    session = Session()
    with activate(session):
        charge(CollectiveCall("all_reduce", 1 << 20, 4, 0, None, 0))
        charge(CollectiveCall("send", 4096, 4, 0, 2, 0))
    want = link_cost("all_reduce", 1 << 20, 4, session.machine).ns + link_cost("send", 4096, 4, session.machine).ns
    d = session.report.to_dict()
    assert d["link_ns"] == want == d["modeled_device_ns"]  # the card waits for eager collectives
    assert d["collectives"]["all_reduce"] == {"calls": 1, "bytes": 1 << 20, "modeled_ns": d["collectives"][
        "all_reduce"]["modeled_ns"], "algorithms": {"direct": 1}}
    assert "card-to-card link:" in session.report.summary()
    path = tmp_path / "trace.json"
    session.report.write_trace(path)
    events = [e for e in json.loads(path.read_text())["traceEvents"] if e.get("pid") == LINK_PID and e["ph"] == "X"]
    assert [(e["name"], e["args"]["algorithm"]) for e in events] == [("all_reduce", "direct"), ("send", "direct")]
    assert events[1]["ts"] == events[0]["ts"] + events[0]["dur"]
