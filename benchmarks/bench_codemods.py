"""Codemod throughput on trees that need changes, against libcst's parse + print.

Trees (each read-only; a copy is made for the write pass):
  * ``torch-2.6-inductor``: torch 2.6.0's own ``torch/_inductor`` (192 files, ~128k
    lines) upgraded ``--from 2.6 --to 2.15``: every file is checked (it is inside the
    torch package), most need changes;
  * ``vendor-fixture``: the 2.6-era vendor backend of the tests
    (``tests/codemods/fixtures/vendor26``), same upgrade;
  * ``--tree PATH --from X --to Y``: any other tree.

For each tree, in the same run and on the same files: the baseline (libcst parse +
print of every file, round trip checked byte-identical) and the upgrade in ``--check``
mode, at -j1 and -j2; files/s, lines/s and the ratio to the baseline at the same -j.
CPU seconds (this process and the pool's workers) are recorded too: on a machine other
work is loading, files per CPU-second is the figure that does not depend on the load.
Then one ``--write`` pass on a copy, counting the ``torch._inductor``/``torch._dynamo``
imports that do not resolve on the target before and after (after: with or without a
TODO above them).

    python benchmarks/bench_codemods.py --torch-src /work/torch-src --json results/codemods/bench.json

torch 2.6.0's sources come from ``--torch-src`` (``<dir>/2.6.0/torch/_inductor``, the
compat matrix's layout), or with ``--fetch`` from the release wheel (downloaded, its
``torch/_inductor/*.py`` read, deleted).
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path
from typing import Any

import libcst as cst

from spyre_codemods.api_index import load_index
from spyre_codemods.driver import Job, run
from spyre_codemods.fileio import iter_python_files
from spyre_codemods.import_resolution import unresolved_imports
from spyre_codemods.report import write_json

from spyre_adapter.cli.argcheck import ArgumentParser, existing_dir, int_range, output_file

REPO = Path(__file__).resolve().parents[1]
VENDOR_FIXTURE = REPO / "tests" / "codemods" / "fixtures" / "vendor26"
INDUCTOR_RELEASE = "2.6.0"


def _round_trip(path: str) -> tuple[int, bool]:
    data = Path(path).read_bytes()
    return data.count(b"\n"), cst.parse_module(data).bytes == data


def _cpu() -> float:
    """CPU seconds of this process and of its reaped children (the pool's workers)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def baseline(files: list[str], jobs: int) -> dict[str, float]:
    """libcst parse + print of every file; counts files whose round trip differs."""
    cpu = _cpu()
    start = time.perf_counter()
    if jobs <= 1:
        results = [_round_trip(f) for f in files]
    else:
        with multiprocessing.get_context("fork").Pool(jobs) as pool:
            results = pool.map(_round_trip, files, chunksize=4)
    seconds = time.perf_counter() - start
    cpu = _cpu() - cpu
    lines = sum(n for n, _ in results)
    return {"seconds": seconds, "cpu_seconds": cpu, "files": len(files), "lines": lines,
            "files_per_s": len(files) / seconds, "lines_per_s": lines / seconds,
            "files_per_cpu_s": len(files) / cpu, "round_trip_mismatches": sum(1 for _, same in results if not same)}


def codemod(tree: Path, source: str, target: str, jobs: int) -> dict[str, Any]:
    """The upgrade (rules, index checks, advisories) in --check mode."""
    cpu = _cpu()
    report = run([tree], Job("upgrade", source, target, mode="check"), jobs=jobs)
    cpu = _cpu() - cpu
    s = report.summary()
    return {"seconds": report.seconds, "cpu_seconds": cpu, "files": s["files"], "lines": s["lines"],
            "files_per_s": s["files"] / report.seconds, "lines_per_s": s["lines"] / report.seconds,
            "files_per_cpu_s": s["files"] / cpu,
            "parsed_after_prefilter": sum(1 for f in report.files if not f.prefiltered),
            "changed": s["changed"], "errors": s["errors"], "findings": s["findings"]}


def import_audit(tree: Path, source: str, target: str) -> dict[str, Any]:
    """Unresolved indexed imports on ``target`` before and after ``upgrade --write`` (on a copy)."""
    index = load_index()
    before = unresolved_imports(list(iter_python_files([tree])), target, index)
    with tempfile.TemporaryDirectory(prefix="bench-codemods-") as tmp:
        copy = _package_copy(tree, Path(tmp))
        report = run([copy], Job("upgrade", source, target, mode="write"), jobs=2)
        after = unresolved_imports(list(iter_python_files([copy])), target, index)
        summary = report.summary()
        # idempotence: the written tree needs nothing more, and its notes are recognised
        again = run([copy], Job("upgrade", source, target, mode="check"), jobs=2)
        written = {"changed": len(report.changed), "errors": len(report.errors),
                   "advisories": report.advisories(), "findings": summary["findings"],
                   "notes": summary["notes"], "noted_sites": summary["noted_sites"],
                   "sites_per_note": round(summary["noted_sites"] / summary["notes"], 2) if summary["notes"] else 0,
                   "check_after_write": {"changed": len(again.changed), "errors": len(again.errors),
                                         "notes": again.summary()["notes"]}}
    return {"unresolved_before": len(before), "unresolved_after": len(after),
            "unresolved_after_with_todo": sum(1 for u in after if u.marked),
            "unresolved_after_without_todo": sum(1 for u in after if not u.marked),
            "write_pass": written}


def cli_wall(tree: Path, source: str, target: str, jobs: int) -> dict[str, float]:
    """``spyre-adapter upgrade --check -jN`` as a user runs it: wall time from the
    process's start (interpreter, imports, index load) to its exit."""
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "spyre_codemods", "upgrade", "--from", source, "--to", target,
                           "--check", "-j", str(jobs), "--no-progress", str(tree)], capture_output=True)
    seconds = time.perf_counter() - start
    files = sum(1 for _ in iter_python_files([tree]))
    return {"jobs": jobs, "seconds": seconds, "files": files, "files_per_s": files / seconds,
            "exit_code": done.returncode}


def _package_copy(tree: Path, dest: Path) -> Path:
    """Copy ``tree`` keeping the packages above it (their ``__init__.py``), so relative
    imports resolve as in the original."""
    parts = []
    current = tree
    while (current.parent / "__init__.py").is_file():
        parts.append(current.parent)
        current = current.parent
    top = dest
    for package in reversed(parts):
        top = top / package.name
        top.mkdir(exist_ok=True)
        shutil.copyfile(package / "__init__.py", top / "__init__.py")
    shutil.copytree(tree, top / tree.name)
    return top / tree.name


def inductor_tree(torch_src: Path | None, fetch: bool, workdir: Path) -> Path:
    """torch 2.6.0's torch/_inductor inside a ``torch`` package folder of ``workdir``."""
    root = workdir / "torch"
    root.mkdir(parents=True, exist_ok=True)
    (root / "__init__.py").write_bytes(b"")
    extracted = torch_src / INDUCTOR_RELEASE / "torch" / "_inductor" if torch_src else None
    if extracted is not None and extracted.is_dir():
        shutil.copytree(extracted, root / "_inductor", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        return root / "_inductor"
    if not fetch:
        raise SystemExit(f"error: argument --torch-src: no {INDUCTOR_RELEASE}/torch/_inductor under {torch_src} "
                         "(accepted: a folder of extracted release trees; or pass --fetch)")
    from spyre_matrix.sources import download_wheel

    wheel = download_wheel(INDUCTOR_RELEASE, workdir / "wheels")
    try:
        with zipfile.ZipFile(wheel) as archive:
            for member in archive.namelist():
                if member.startswith("torch/_inductor/") and member.endswith(".py"):
                    archive.extract(member, workdir)
    finally:
        wheel.unlink()
    return root / "_inductor"


def measure(name: str, tree: Path, source: str, target: str, jobs: list[int]) -> dict[str, Any]:
    files = [str(p) for p in iter_python_files([tree])]
    for f in files:  # warm the page cache so neither side pays for disk reads
        Path(f).read_bytes()
    print(f"{name}: {tree} ({len(files)} files), upgrade {source} -> {target}", file=sys.stderr)
    rows = []
    for j in jobs:
        base = baseline(files, j)
        mod = codemod(tree, source, target, j)
        rows.append({"jobs": j, "baseline": base, "codemod": mod,
                     "ratio_files_per_s": mod["files_per_s"] / base["files_per_s"],
                     "ratio_lines_per_s": mod["lines_per_s"] / base["lines_per_s"]})
    return {"name": name, "tree": str(tree), "from": source, "to": target, "files": len(files),
            "lines": rows[0]["baseline"]["lines"], "runs": rows, "imports": import_audit(tree, source, target),
            "cli_with_startup": cli_wall(tree, source, target, max(jobs))}


def _print(result: dict[str, Any]) -> None:
    print(f"\n{result['name']}: {result['files']} files, {result['lines']} lines, "
          f"upgrade {result['from']} -> {result['to']}")
    print(f"{'-j':>4} {'baseline files/s':>17} {'lines/s':>9} {'upgrade files/s':>16} {'lines/s':>9} {'ratio':>6}"
          f" {'baseline files/cpu-s':>21} {'upgrade files/cpu-s':>20}")
    for r in result["runs"]:
        b, m = r["baseline"], r["codemod"]
        print(f"{r['jobs']:>4} {b['files_per_s']:>17.1f} {b['lines_per_s']:>9.0f} {m['files_per_s']:>16.1f} "
              f"{m['lines_per_s']:>9.0f} {r['ratio_files_per_s']:>6.2f} {b['files_per_cpu_s']:>21.1f} "
              f"{m['files_per_cpu_s']:>20.1f}")
    last = result["runs"][-1]
    imports = result["imports"]
    print(f"parsed after the pre-filter: {last['codemod']['parsed_after_prefilter']}, would change "
          f"{last['codemod']['changed']}, errors {last['codemod']['errors']}; round trip mismatches "
          f"{last['baseline']['round_trip_mismatches']}")
    print(f"unresolved torch._inductor/_dynamo imports on {result['to']}: before {imports['unresolved_before']}, "
          f"after {imports['unresolved_after']} ({imports['unresolved_after_with_todo']} with a TODO, "
          f"{imports['unresolved_after_without_todo']} without)")
    written, cli = imports["write_pass"], result["cli_with_startup"]
    print(f"write pass: {written['notes']} notes for {written['noted_sites']} sites "
          f"({written['sites_per_note']} sites per note); check after write: {written['check_after_write']}")
    print(f"CLI --check -j{cli['jobs']} with start-up: {cli['seconds']:.2f}s, {cli['files_per_s']:.1f} files/s "
          f"(exit {cli['exit_code']})")


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--torch-src", type=existing_dir, help="extracted release trees, <dir>/<release>/torch/...")
    parser.add_argument("--fetch", action="store_true", help="download torch 2.6.0's wheel when not in --torch-src")
    parser.add_argument("--tree", type=existing_dir, help="measure this tree instead of the two default ones")
    parser.add_argument("--from", dest="source", default="2.6")
    parser.add_argument("--to", dest="target", default="2.15")
    parser.add_argument("--jobs", type=int_range(1), nargs="+", default=[1, 2])
    parser.add_argument("--json", type=output_file, metavar="PATH", help="write the results here (its folder must exist)")
    args = parser.parse_args(argv)

    start = time.perf_counter()
    load_index()  # once per process (the runs below reuse it): timed on its own
    index_seconds = time.perf_counter() - start
    load_before = os.getloadavg()
    results = []
    with tempfile.TemporaryDirectory(prefix="bench-codemods-src-") as tmp:
        if args.tree is not None:
            results.append(measure(args.tree.name, args.tree, args.source, args.target, args.jobs))
        else:
            tree = inductor_tree(args.torch_src, args.fetch, Path(tmp))
            results.append(measure("torch-2.6-inductor", tree, "2.6", "2.15", args.jobs))
            results.append(measure("vendor-fixture", VENDOR_FIXTURE, "2.6", "2.15", args.jobs))
    print(f"API index loaded in {index_seconds:.2f}s (once per process, not in the runs); "
          f"load average before {load_before[0]:.1f}, after {os.getloadavg()[0]:.1f} "
          f"on {multiprocessing.cpu_count()} CPUs")
    for result in results:
        _print(result)
    if args.json:
        for result in results:  # machine-independent paths in the committed file
            result["tree"] = Path(result["tree"]).name if result["name"] != "vendor-fixture" else \
                str(VENDOR_FIXTURE.relative_to(REPO))
        write_json(args.json, {"python": platform.python_version(), "machine": platform.machine(),
                               "cpus": multiprocessing.cpu_count(), "index_load_seconds": index_seconds,
                               "load_average_before": load_before, "load_average_after": os.getloadavg(),
                               "trees": results})
    ok = all(r["baseline"]["round_trip_mismatches"] == 0 and r["codemod"]["errors"] == 0
             for result in results for r in result["runs"])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
