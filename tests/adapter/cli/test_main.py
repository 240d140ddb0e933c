"""The command line: the main job, traces, the probe, and generated code that
runs from Inductor's cache in a fresh process."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

SMALL = ["--hidden", "128", "--heads", "4", "--kv-heads", "2", "--intermediate", "352", "--seq", "16"]


#: Printed by torch itself, not by us: torch.utils.cpp_extension (which builds the
#: device extension on torch < 2.10) announces a CUDA toolkit without a GPU in
#: every process that imports it, Inductor's compile workers included, so the
#: line can come after our error; 2.6-2.8 print it bare, 2.9 through its logger
#: (with a source location).
TORCH_NOTICES = ("No CUDA runtime is found",)


def _ours(stderr: str) -> list[str]:
    """stderr's lines without torch's own environment notices."""
    return [line for line in stderr.splitlines() if not any(n in line for n in TORCH_NOTICES)]


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "spyre_adapter.cli", *args], capture_output=True, text=True,
                          env={**os.environ, "COLUMNS": "200", **(env or {})})


def test_run_llama_block_reports_check_and_device(tmp_path: Path) -> None:
    out, trace = tmp_path / "run.json", tmp_path / "trace.json"
    res = _cli("run", "--model", "llama-block", *SMALL, "--json", str(out), "--trace", str(trace))
    assert res.returncode == 0, res.stdout + res.stderr
    assert "result check vs CPU eager: PASS" in res.stdout
    assert "modeled device time" in res.stdout and "kernels generated" in res.stdout
    # progress: a line per stage on stderr, without source locations
    ours = "\n".join(_ours(res.stderr))
    assert "compiling for the spyre device" in ours and not re.search(r"\w\.py:\d", ours), res.stderr
    data = json.loads(out.read_text())
    assert data["passed"] and data["device"]["kernels_generated"] >= 10
    assert data["device"]["fallbacks"] == {} and data["device"]["modeled_device_ns"] > 0
    kinds = {k["kind"] for k in data["kernels"]}
    assert kinds == {"loop", "matmul", "attention"}
    events = json.loads(trace.read_text())["traceEvents"]
    cores = {e["pid"] for e in events if e.get("cat") in ("dma_in", "compute")}
    assert len(cores) > 1 and any(e.get("cat") == "kernel" for e in events)


def test_run_other_models_and_machine_override(tmp_path: Path) -> None:
    out = tmp_path / "run.json"
    res = _cli("run", "--model", "granite-tiny", *SMALL, "--layers", "1", "--machine", "cores=8,lx_kib=1024",
               "--json", str(out))
    assert res.returncode == 0, res.stdout + res.stderr
    data = json.loads(out.read_text())
    assert data["machine"]["cores"] == 8 and data["passed"]
    assert max(k["cores"] for k in data["kernels"]) <= 8


def test_nested_regions_lower_the_layer_once_and_call_it_per_layer(tmp_path: Path) -> None:
    import torch
    if not hasattr(torch.compiler, "nested_compile_region"):  # torch 2.6, 2.7: refused, in one line
        res = _cli("run", "--model", "llama-tiny", *SMALL, "--layers", "3", "--nested-regions")
        assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
        assert _ours(res.stderr) == [f"spyre-adapter run: error: argument --nested-regions: '{torch.__version__}' "
                                     "is not accepted: a torch with torch.compiler.nested_compile_region "
                                     "(releases 2.8 and later)"], res.stderr
        return
    runs = {}
    for flag in ((), ("--nested-regions",)):
        out = tmp_path / f"run{len(flag)}.json"
        res = _cli("run", "--model", "llama-tiny", *SMALL, "--layers", "3", *flag, "--json", str(out))
        assert res.returncode == 0, res.stdout + res.stderr
        runs[bool(flag)] = json.loads(out.read_text())
    nested, plain = runs[True], runs[False]
    assert nested["passed"] and nested["config"]["nested_regions"] and not plain["config"]["nested_regions"]
    # one layer's kernels generated for three layers; every layer's launched
    assert nested["device"]["kernels_generated"] < plain["device"]["kernels_generated"]
    assert nested["device"]["launches"] > nested["device"]["kernels_generated"]
    assert nested["device"]["fallbacks"] == {} and nested["device"]["eager_ops"] == 0
    assert nested["device"]["graphs"] == 2 and plain["device"]["graphs"] == 1


def test_a_machine_too_small_for_a_kernel_names_the_kernel_and_the_limit(tmp_path: Path) -> None:
    # Twice on one Inductor cache: the second run loads the graph from the cache
    # (no kernel is compiled) and must still refuse the machine.
    env = {"TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")}
    out = tmp_path / "run.json"
    for attempt in ("cold cache", "warm cache"):
        res = _cli("run", "--model", "mlp", "--hidden", "64", "--intermediate", "128", "--seq", "8",
                   "--machine", "lx_kib=1", "--json", str(out), env=env)
        assert res.returncode == 2 and "Traceback" not in res.stderr, (attempt, res.stdout + res.stderr)
        error = _ours(res.stderr)[-1]
        assert error.startswith("spyre-adapter run: error: argument --machine: 'lx_kib=1'"), (attempt, error)
        assert "kernel spyre_" in error and "lx_usable_bytes=781" in error and "Inductor" not in error
        assert not out.exists()
    assert any((tmp_path / "inductor").rglob("*.py")), "the first run left no generated code in the cache"


def test_probe_json(tmp_path: Path) -> None:
    out = tmp_path / "probe.json"
    res = _cli("probe", "--json", str(out))
    assert res.returncode == 0, res.stdout + res.stderr
    data = json.loads(out.read_text())
    assert data["window_ok"] and data["na"] == []
    required_missing = [s for s in data["symbols"] if s["status"] == "missing" and s["required"]]
    assert required_missing == []
    assert any(a.startswith("device.host_backed=") for a in data["adapters"])
    # Piped (no terminal, no COLUMNS): the table takes its natural width, no name is cut.
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    piped = subprocess.run([sys.executable, "-m", "spyre_adapter.cli", "probe"], capture_output=True, text=True,
                           env=env)
    for symbol in data["symbols"]:
        assert f"{symbol['module']}:{symbol['name']}" in piped.stdout


def test_generated_code_runs_from_cache_in_a_fresh_process(tmp_path: Path) -> None:
    script = textwrap.dedent("""\
        import torch
        from spyre_shims.runtime import stats
        x = torch.randn(33, 65)
        f = torch.compile(lambda a: torch.softmax(a, -1) @ a.t(), dynamic=False)
        got = f(x.to("spyre")).cpu()
        torch.testing.assert_close(got, torch.softmax(x, -1) @ x.t(), atol=1e-4, rtol=1e-4)
        print(stats()["kernels_compiled"], stats()["kernels_loaded"], torch.spyre.report().kernels_generated)
    """)
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "cache")}
    runs = [subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env) for _ in range(2)]
    for r in runs:
        assert r.returncode == 0, r.stdout + r.stderr
    first = list(map(int, runs[0].stdout.split()))
    second = list(map(int, runs[1].stdout.split()))
    assert first[0] > 0 and first[1] == first[0]
    assert second[0] == 0 and second[1] == first[1]  # cache hit: loaded, not compiled
    assert second[2] == first[2] > 0  # the graph was announced from the cached code
