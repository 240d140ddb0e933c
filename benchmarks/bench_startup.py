"""Start-up cost the package adds: ``import torch`` and the ``spyre-adapter`` command.

Each measurement is a fresh subprocess; the variants are interleaved (A, B, A, B...)
so that load on a shared machine hits them alike, and the median is reported.

  * ``import torch`` with the package's ``torch.backends`` entry point against the
    baseline ``TORCH_DEVICE_BACKEND_AUTOLOAD=0`` (same interpreter, same run); the
    target is a difference of at most 0.3 s. One ``-X importtime`` run of each lists
    the modules the entry point adds and checks that no heavy ones (Dynamo,
    Inductor, sympy) are among them.
  * ``spyre-adapter --help`` and an argument error (``run --hidden x``) against a
    bare interpreter start (``python -c pass``); the target is under 1.5 s.

    python benchmarks/bench_startup.py --json results/startup/bench.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from spyre_adapter.cli.argcheck import ArgumentParser, int_range, output_file

#: Targets from issue 14 (seconds).
IMPORT_OVERHEAD_TARGET_S = 0.3
CLI_START_TARGET_S = 1.5
#: Modules the entry point must not import during ``import torch``.
HEAVY = ("torch._dynamo", "torch._inductor", "sympy", "spyre_shims.backend", "spyre_adapter.backend.spyre")

NO_AUTOLOAD = {"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}


def _env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "TORCH_DEVICE_BACKEND_AUTOLOAD"}
    return {**env, **(extra or {})}


def _wall(argv: Sequence[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    proc = subprocess.run(list(argv), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    seconds = time.perf_counter() - start
    if proc.returncode not in (0, 2):
        raise SystemExit(f"{' '.join(argv)} failed ({proc.returncode}):\n{proc.stderr}")
    return seconds


def interleaved(variants: dict[str, tuple[Sequence[str], dict[str, str]]], runs: int) -> dict[str, list[float]]:
    """Wall seconds of each variant, ``runs`` times, interleaved; one unmeasured warm-up each."""
    for argv, env in variants.values():
        _wall(argv, env)
    times: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(runs):
        for name, (argv, env) in variants.items():
            times[name].append(_wall(argv, env))
    return times


def imported_modules(env: dict[str, str]) -> dict[str, tuple[int, int]]:
    """Module -> (self, cumulative) import microseconds, from one ``-X importtime`` run."""
    proc = subprocess.run([sys.executable, "-X", "importtime", "-c", "import torch"], env=env,
                          capture_output=True, text=True, check=True)
    out: dict[str, tuple[int, int]] = {}
    for line in proc.stderr.splitlines():
        parts = line.split("|")
        if not line.startswith("import time:") or len(parts) != 3 or not parts[1].strip().isdigit():
            continue
        out[parts[2].strip()] = (int(parts[0].split(":")[1]), int(parts[1]))
    return out


def _stats(xs: list[float]) -> dict[str, float | list[float]]:
    return {"median_s": statistics.median(xs), "min_s": min(xs), "max_s": max(xs), "runs_s": xs}


def bench_import(runs: int) -> dict[str, object]:
    py = [sys.executable, "-c", "import torch"]
    times = interleaved({"autoload": (py, _env()), "no_autoload": (py, _env(NO_AUTOLOAD))}, runs)
    with_mods, without_mods = imported_modules(_env()), imported_modules(_env(NO_AUTOLOAD))
    added = {m: us for m, us in with_mods.items() if m not in without_mods}
    heavy = {h: sum(1 for m in added if m == h or m.startswith(h + ".")) for h in HEAVY}
    overhead = statistics.median(times["autoload"]) - statistics.median(times["no_autoload"])
    return {
        "autoload": _stats(times["autoload"]), "no_autoload": _stats(times["no_autoload"]),
        "overhead_s": overhead, "ratio": statistics.median(times["autoload"]) / statistics.median(times["no_autoload"]),
        "target_overhead_s": IMPORT_OVERHEAD_TARGET_S, "meets_target": overhead <= IMPORT_OVERHEAD_TARGET_S,
        "importtime_modules_added": len(added),
        "importtime_added_s": sum(own for own, _ in added.values()) / 1e6,
        "importtime_top_added": [(m, cum) for m, (_, cum) in sorted(added.items(), key=lambda kv: -kv[1][1])[:12]],
        "heavy_modules_added": {h: n for h, n in heavy.items() if n},
    }


def _cli() -> list[str]:
    script = Path(sys.executable).with_name("spyre-adapter")
    return [str(script)] if script.exists() else [sys.executable, "-m", "spyre_adapter.cli"]


def bench_cli(runs: int) -> dict[str, object]:
    cli = _cli()
    variants = {
        "python -c pass": ([sys.executable, "-c", "pass"], _env()),
        "spyre-adapter --help": ([*cli, "--help"], _env()),
        "spyre-adapter run --hidden x": ([*cli, "run", "--hidden", "x"], _env()),
        "spyre-adapter upgrade --help": ([*cli, "upgrade", "--help"], _env()),
    }
    times = interleaved(variants, runs)
    base = statistics.median(times["python -c pass"])
    out: dict[str, object] = {}
    for name, xs in times.items():
        med = statistics.median(xs)
        out[name] = {**_stats(xs), "ratio_to_bare_python": med / base,
                     **({} if name.startswith("python") else {"meets_target": med < CLI_START_TARGET_S})}
    return {"commands": out, "target_s": CLI_START_TARGET_S}


def main(argv: Sequence[str] | None = None) -> int:
    p = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int_range(1), default=7, help="measured runs of each variant (default 7)")
    p.add_argument("--json", type=output_file, metavar="PATH",
                   help="write the figures as JSON to PATH (its folder must exist)")
    args = p.parse_args(argv)
    imp = bench_import(args.runs)
    cli = bench_cli(args.runs)
    a, b = imp["autoload"], imp["no_autoload"]
    print(f"import torch ({args.runs} runs, median): {a['median_s']:.2f} s with the entry point, "  # type: ignore[index]
          f"{b['median_s']:.2f} s with TORCH_DEVICE_BACKEND_AUTOLOAD=0: {imp['overhead_s']:+.2f} s "  # type: ignore[index]
          f"({imp['ratio']:.2f}x; target +{IMPORT_OVERHEAD_TARGET_S} s: "
          f"{'met' if imp['meets_target'] else 'MISSED'})")
    print(f"  -X importtime: {imp['importtime_modules_added']} modules added, "
          f"{imp['importtime_added_s']:.2f} s of their own; heavy: "
          + (", ".join(f"{h} ({n} modules)" for h, n in imp["heavy_modules_added"].items()) or "none"))  # type: ignore[attr-defined]
    for name, c in cli["commands"].items():  # type: ignore[attr-defined]
        target = "" if "meets_target" not in c else f" (target < {CLI_START_TARGET_S} s: " \
                                                     f"{'met' if c['meets_target'] else 'MISSED'})"
        print(f"{name}: {c['median_s']:.2f} s median, {c['ratio_to_bare_python']:.1f}x bare python{target}")
    doc = {"python": platform.python_version(), "machine": platform.machine(), "cpus": os.cpu_count(),
           "torch": _torch_version(), "runs": args.runs, "import_torch": imp, "cli": cli}
    if args.json:
        Path(args.json).write_text(json.dumps(doc, indent=1) + "\n")
    return 0


def _torch_version() -> str:
    proc = subprocess.run([sys.executable, "-c", "import torch; print(torch.__version__)"], env=_env(NO_AUTOLOAD),
                          capture_output=True, text=True)
    return proc.stdout.strip()


if __name__ == "__main__":
    sys.exit(main())
