"""``spyre-adapter bench``, ``calibrate``, ``reference`` and ``speed``: their
arguments and checks (no torch here; each command's implementation is in
:mod:`spyre_adapter.bench`, imported once they pass)."""

from __future__ import annotations

import os
from typing import Any

from spyre_adapter.cli.argcheck import existing_dir, int_range, output_file
from spyre_adapter.cli.run import machine_argument
from spyre_adapter.cli.workloads import workload_file
from spyre_adapter.harness.usage import ArgError

#: The benchmark's sections in the order they run (``spyre_adapter.bench.suite.SECTIONS``).
SECTIONS = ("gemms", "chains", "workloads", "attention", "block", "calibration", "reference", "mutants", "speed")


def register(subparsers: Any) -> None:
    """Add ``bench`` to an ``add_subparsers()`` object."""
    p = subparsers.add_parser(
        "bench", help="scheduler/emulator benchmark against the physical limits",
        description="Plan and emulate GEMMs, loop-kernel chains, the real-model workload cases, hand-written vs "
                    "generic attention and a decoder block; report roofline efficiency (datasheet and sustained roofs), "
                    "DRAM traffic against the compulsory bytes, single-core, LX-even-split and torch-spyre-rules "
                    "baselines from the same run, calibration errors on held-out measurements of the real card, "
                    "our modeled times against torch-spyre's cost model, mutants of real kernels' programs the "
                    "emulator must catch, compile time against Inductor's CPU backend and the emulator's "
                    "end-to-end speed against eager (fresh processes, one at a time). Progress goes to stderr, a "
                    "line per section.")
    p.add_argument("--json", type=output_file, metavar="PATH",
                   help="write the full benchmark document to PATH (its folder must exist; default: none)")
    p.add_argument("--quick", action="store_true",
                   help="small shapes only, no workload files, a small sample of the torch-spyre comparison "
                        "(CI smoke run)")
    p.add_argument("--machine", type=machine_argument, metavar="SPEC",
                   help="machine overrides, e.g. cores=8,lx_kib=1024, or a .json/.yaml file (default: the Spyre card)")
    p.add_argument("--workloads", nargs="*", type=workload_file, default=[], metavar="FILE",
                   help="workload YAML files whose cases are benchmarked too (default: none; `nox -s bench` "
                        "passes the real-model files)")
    p.add_argument("--sections", nargs="+", choices=SECTIONS, default=list(SECTIONS), metavar="NAME",
                   help=f"sections to run, of: {', '.join(SECTIONS)} (default: all)")
    p.add_argument("--max-numel", type=int_range(1), metavar="N",
                   help="skip workload cases with an input larger than N elements (default: no limit)")
    _reference_argument(p)
    p.set_defaults(func="spyre_adapter.bench.suite:command")

    c = subparsers.add_parser(
        "calibrate", help="re-run the fit of the fitted machine constants and report the held-out errors",
        description="Fit the machine constants marked [fit] on their named fit points (torch-spyre's published "
                    "measurements of the real card) and print every held-out prediction's error, with how far the "
                    "predictions move when an assumed constant is halved or doubled.")
    c.add_argument("--json", type=output_file, default="results/calibration/calibration.json", metavar="PATH",
                   help="where to write the results (its folder must exist)")
    c.add_argument("--no-sensitivity", action="store_true", help="skip the sensitivity to the assumed constants")
    c.set_defaults(func="spyre_adapter.bench.calibration:command")

    r = subparsers.add_parser(
        "reference", help="our modeled time against IBM torch-spyre's cost model over its sweep plan",
        description="Plan and simulate the configurations of torch-spyre's sweep plan our device can express and "
                    "compare the modeled device time with torch-spyre's fitted cost model, per category (MAPE, "
                    "Spearman when there are at least 8 points).")
    r.add_argument("--sample", type=int_range(1), metavar="N", help="run N configurations spread evenly over the plan")
    r.add_argument("--per-category", type=int_range(1), metavar="N",
                   help="instead of --sample, run N expressible configurations of each category")
    r.add_argument("--max-operand-mib", type=int_range(1), metavar="M",
                   help="skip configurations with an operand larger than M MiB (run-time limit; default: none)")
    r.add_argument("--json", type=output_file, default="results/reference/vs_torch_spyre_cost_model.json",
                   metavar="PATH", help="where to write the results (its folder must exist)")
    _reference_argument(r)
    r.set_defaults(func="spyre_adapter.bench.torch_spyre:command", checks=[_check_reference_named])

    s = subparsers.add_parser(
        "speed", help="compile time and the emulator's speed against eager, in fresh processes",
        description="Compile time of the spyre backend against Inductor's CPU backend, and the emulated decoder "
                    "block's wall time against CPU eager, each row measured in fresh processes one at a time "
                    "(run it alone on the machine). Prints JSON.")
    s.add_argument("--quick", action="store_true", help="one size, fewer layer counts")
    s.set_defaults(func="spyre_adapter.bench.speed:command")


def _reference_argument(p: Any) -> None:
    p.add_argument("--reference", type=existing_dir, metavar="DIR",
                   help="the torch-spyre-cost-model folder (cost_model.py and sweep_plan.json; it is code and runs "
                        "from there only when named) (default: $SPYRE_REFERENCE_DIR; in a checkout "
                        "../shared/reference/torch-spyre-cost-model)")


def _check_reference_named(args: Any) -> None:
    """``reference`` compares with nothing else: its folder must be named."""
    if args.reference is None and not os.environ.get("SPYRE_REFERENCE_DIR"):
        raise ArgError("--reference", None, "expected the torch-spyre-cost-model folder (or $SPYRE_REFERENCE_DIR "
                                            "naming it)")
