"""The collective bandwidth benchmark under torchrun: nccl-tests' figures of the
modeled link (never above the link's roof, growing with size), of the compiled
collectives' programs, and the measured host time of the same collectives."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path


def test_busbw_rows_for_two_cards(tmp_path: Path) -> None:
    out = tmp_path / "busbw.json"
    env = {k: v for k, v in os.environ.items() if k not in ("LOCAL_RANK", "RANK", "WORLD_SIZE", "SPYRE_MACHINE")}
    res = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
                          "-m", "spyre_adapter.bench.collectives", "--max-bytes", "262144", "--repeats", "1",
                          "--json", str(out)], capture_output=True, text=True, env=env, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "busbw GB/s" in res.stdout and "link roof: 50 GB/s" in res.stdout
    data = json.loads(out.read_text())
    link = data["machine"]["link_gbps"]
    for op in ("all_reduce", "all_gather"):
        rows = [r for r in data["rows"] if r["op"] == op]
        assert [r["bytes"] for r in rows] == [4096, 16384, 65536, 262144]
        etas = [r["eta"] for r in rows]
        assert etas == sorted(etas) and 0 < etas[0] and etas[-1] <= 1.0
        for r in rows:
            assert r["busbw_gbps"] <= link and r["host_us"] > 0
            assert abs(r["eta"] - r["busbw_gbps"] / link) < 1e-9
            # the compiled collective's program: the link's time and the cores' work, never faster than the link alone
            assert r["program_eta"] <= r["eta"] * (1 + 1e-9) and r["program_stages"] >= 1
            assert abs(r["program_eta"] - r["program_busbw_gbps"] / link) < 1e-9


def test_bad_arguments_exit_2_in_one_line() -> None:
    res = subprocess.run([sys.executable, "-m", "spyre_adapter.bench.collectives", "--max-bytes", "10"],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 2
    assert res.stderr.strip().splitlines()[-1].endswith("--max-bytes=10 is not accepted: expected at least 4096")
