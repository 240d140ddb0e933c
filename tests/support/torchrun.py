"""Running a check script under torchrun from a test: each rank writes
``rank<N>.json`` into the given folder; the results come back sorted by rank."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

__all__ = ["rank_results"]


def rank_results(script: Path, ranks: int, seed: int, out: Path, timeout: float = 600) -> list[dict]:
    """Run ``script`` on ``ranks`` processes (``CHECK_SEED``, ``CHECK_OUT`` in their
    environment, the caller's rank variables and machine spec removed); the ranks' JSON."""
    env = {k: v for k, v in os.environ.items() if k not in ("LOCAL_RANK", "RANK", "WORLD_SIZE", "SPYRE_MACHINE")}
    env["CHECK_SEED"], env["CHECK_OUT"] = str(seed), str(out)
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={ranks}",
                           str(script)], capture_output=True, text=True, env=env, timeout=timeout)
    assert done.returncode == 0, done.stderr[-4000:]
    return sorted((json.loads(f.read_text()) for f in out.glob("rank*.json")), key=lambda r: r["rank"])
