"""Codemod throughput on a large real tree (default: the installed ``torch/_inductor``).

Runs, in the same process and on the same files (read-only):
  * baseline: plain libcst parse + print of every file (also checks the round trip is
    byte-identical), at -j1 and -j2;
  * the upgrade codemod with every rule selected for ``--from``/``--to`` (``--check``
    mode: nothing is written), at -j1 and -j2.
Prints files/s, lines/s and the ratio to the baseline at the same -j; ``--json PATH``
writes the figures. On a tree that is already current the codemod must change nothing.

    python benchmarks/bench_codemods.py --json results/codemods.json
"""

from __future__ import annotations

import argparse
import multiprocessing
import platform
import sys
import time
from pathlib import Path

import libcst as cst

from spyre_codemods.driver import Job, run
from spyre_codemods.fileio import iter_python_files
from spyre_codemods.releases import parse_release
from spyre_codemods.report import write_json
from spyre_codemods.rules import select_rules
from spyre_codemods.rule_table import RULES


def _default_tree() -> tuple[Path, str]:
    import importlib.util

    spec = importlib.util.find_spec("torch")  # locate the install without importing torch
    if spec is None or spec.origin is None:
        raise SystemExit("torch is not installed; pass --tree")
    root = Path(spec.origin).parent
    version = "unknown"
    for line in (root / "version.py").read_text(encoding="utf-8").splitlines():
        if line.startswith("__version__"):
            version = line.split("=", 1)[1].strip().strip("'\"")
    return root / "_inductor", version


def _round_trip(path: str) -> tuple[int, bool]:
    data = Path(path).read_bytes()
    return data.count(b"\n"), cst.parse_module(data).bytes == data


def baseline(files: list[str], jobs: int) -> dict[str, float]:
    """libcst parse + print of every file; counts files whose round trip differs."""
    start = time.perf_counter()
    if jobs <= 1:
        results = [_round_trip(f) for f in files]
    else:
        with multiprocessing.get_context("fork").Pool(jobs) as pool:
            results = pool.map(_round_trip, files, chunksize=4)
    seconds = time.perf_counter() - start
    lines = sum(n for n, _ in results)
    return {"seconds": seconds, "files": len(files), "lines": lines,
            "files_per_s": len(files) / seconds, "lines_per_s": lines / seconds,
            "round_trip_mismatches": sum(1 for _, same in results if not same)}


def codemod(tree: Path, source: str, target: str, jobs: int) -> dict[str, float]:
    """The upgrade codemod with every selected rule, in --check mode."""
    report = run([tree], Job("upgrade", source, target, mode="check"), jobs=jobs)
    s = report.summary()
    parsed = sum(1 for f in report.files if not f.prefiltered)
    return {"seconds": report.seconds, "files": s["files"], "lines": s["lines"],
            "files_per_s": s["files"] / report.seconds, "lines_per_s": s["lines"] / report.seconds,
            "parsed_after_prefilter": parsed, "changed": s["changed"], "errors": s["errors"],
            "findings": s["findings"]}


def main(argv: list[str] | None = None) -> int:
    default_tree, version = _default_tree()
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tree", type=Path, default=default_tree, help="tree to run over (read-only)")
    parser.add_argument("--from", dest="source", default="2.4")
    parser.add_argument("--to", dest="target", default=str(parse_release(version)) if version != "unknown" else "2.15")
    parser.add_argument("--jobs", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--json", metavar="PATH")
    args = parser.parse_args(argv)

    files = [str(p) for p in iter_python_files([args.tree])]
    for f in files:  # warm the page cache so neither side pays for disk reads
        Path(f).read_bytes()
    rules = select_rules(RULES, args.source, args.target).rules
    print(f"tree: {args.tree} ({len(files)} files), torch {version}, rules {args.source} -> {args.target}: "
          f"{len(rules)}", file=sys.stderr)

    rows = []
    for jobs in args.jobs:
        base = baseline(files, jobs)
        mod = codemod(args.tree, args.source, args.target, jobs)
        rows.append({"jobs": jobs, "baseline": base, "codemod": mod,
                     "ratio_files_per_s": mod["files_per_s"] / base["files_per_s"],
                     "ratio_lines_per_s": mod["lines_per_s"] / base["lines_per_s"]})

    print(f"{'':>4} {'baseline parse+print':>32} {'upgrade (all rules)':>32} {'ratio':>7}")
    print(f"{'-j':>4} {'files/s':>10} {'lines/s':>10} {'s':>10} {'files/s':>10} {'lines/s':>10} {'s':>10} {'x':>7}")
    for r in rows:
        b, m = r["baseline"], r["codemod"]
        print(f"{r['jobs']:>4} {b['files_per_s']:>10.1f} {b['lines_per_s']:>10.0f} {b['seconds']:>10.2f} "
              f"{m['files_per_s']:>10.1f} {m['lines_per_s']:>10.0f} {m['seconds']:>10.2f} "
              f"{r['ratio_lines_per_s']:>7.2f}")
    last = rows[-1]
    print(f"round trip byte-identical: {len(files) - last['baseline']['round_trip_mismatches']}/{len(files)} files; "
          f"codemod parsed {last['codemod']['parsed_after_prefilter']} files after the pre-filter, "
          f"changed {last['codemod']['changed']}, errors {last['codemod']['errors']}")

    if args.json:
        write_json(args.json, {
            "tree": str(args.tree), "torch": version, "from": args.source, "to": args.target,
            "rules": len(rules), "python": platform.python_version(), "machine": platform.machine(),
            "cpus": multiprocessing.cpu_count(), "runs": rows,
        })
    ok = all(r["baseline"]["round_trip_mismatches"] == 0 and r["codemod"]["errors"] == 0 for r in rows)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
