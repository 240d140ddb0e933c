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

CHECK = Path(__file__).parents[2] / "support" / "collectives_check.py"
COLLECTIVES = {"all_reduce", "broadcast", "reduce", "all_gather", "all_gather_into_tensor", "reduce_scatter_tensor",
               "gather", "scatter", "all_to_all_single", "send/recv", "barrier"}


def _torchrun(ranks: int, seed: int) -> list[dict]:
    env = {k: v for k, v in os.environ.items() if k not in ("LOCAL_RANK", "RANK", "WORLD_SIZE", "SPYRE_MACHINE")}
    env["CHECK_SEED"] = str(seed)
    out = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={ranks}",
                          str(CHECK)], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-4000:]
    return sorted((json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")),
                  key=lambda r: r["rank"])


@pytest.mark.parametrize(("ranks", "seed"), [(2, 1), (4, 2)])
def test_every_collective_matches_gloo_on_cpu(ranks: int, seed: int) -> None:
    results = _torchrun(ranks, seed)
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
