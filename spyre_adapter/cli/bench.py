"""``spyre-adapter bench``: its arguments and their checks (no torch here; the
benchmark is :func:`spyre_adapter.bench.suite.command`, imported once they pass)."""

from __future__ import annotations

from typing import Any

from spyre_adapter.cli.argcheck import int_range, output_file
from spyre_adapter.cli.run import machine_argument
from spyre_adapter.cli.workloads import workload_file

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
    p.set_defaults(func="spyre_adapter.bench.suite:command")
