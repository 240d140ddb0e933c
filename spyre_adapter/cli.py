"""``spyre-adapter``: the project's command line.

  run        compile and run a model on the emulated Spyre device
  probe      check the installed torch against the surface the shims rely on
  upgrade    codemod: upgrade vendor code across torch releases
  migrate    codemod: move direct Inductor usage onto the stable API
  report     render the compatibility-matrix report
  workloads  run real-model operator cases (YAML) on the device
  bench      scheduler/emulator benchmark against the physical limits
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence


def _add_run(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("run", help="compile and run a model on the emulated Spyre device")
    from .models import MODELS

    p.add_argument("--model", default="llama-block", choices=sorted(MODELS))
    p.add_argument("--dtype", default="fp16", choices=["fp16", "bf16", "fp32"])
    p.add_argument("--hidden", type=int, help="hidden size (default 512)")
    p.add_argument("--heads", type=int)
    p.add_argument("--kv-heads", type=int)
    p.add_argument("--intermediate", type=int)
    p.add_argument("--seq", type=int, help="tokens (default 64)")
    p.add_argument("--batch", type=int)
    p.add_argument("--layers", type=int)
    p.add_argument("--machine", help="machine overrides, e.g. cores=8,lx_kib=1024, or a JSON/YAML file")
    p.add_argument("--trace", help="write a Chrome/Perfetto trace of device time to this path")
    p.add_argument("--json", help="write the run report as JSON to this path")
    p.add_argument("--top", type=int, default=12, help="kernels shown in the table")
    p.add_argument("--atol", type=float, help="max abs error allowed (default by dtype)")
    p.set_defaults(func=_run_cmd)


def _run_cmd(args: argparse.Namespace) -> int:
    from .run import RunOptions, main_run

    opts = RunOptions(
        model=args.model, dtype=args.dtype, machine=args.machine, trace=args.trace, json_path=args.json,
        top=args.top, atol=args.atol,
        sizes={k: getattr(args, k) for k in ("hidden", "heads", "kv_heads", "intermediate", "seq", "batch", "layers")
               if getattr(args, k) is not None},
    )
    return main_run(opts)


def _add_probe(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("probe", help="check the installed torch against the shims' surface")
    p.add_argument("--json", help="write the probe result as JSON to this path")
    p.set_defaults(func=_probe_cmd)


def _probe_cmd(args: argparse.Namespace) -> int:
    from spyre_shims.probe import print_probe, run_probe

    result = run_probe()
    print_probe(result)
    if args.json:
        import json
        from pathlib import Path

        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    return 0 if result["window_ok"] else 1


def _plugins(sub: argparse._SubParsersAction) -> None:
    """Subcommands contributed by other packages (each has ``register(subparsers)``)."""
    for mod in ("spyre_codemods.cli", "spyre_compat.cli", "spyre_adapter.workloads.cli", "spyre_adapter.bench"):
        try:
            importlib.import_module(mod).register(sub)
        except ModuleNotFoundError:
            continue


def build_parser() -> argparse.ArgumentParser:
    """The full argument parser."""
    parser = argparse.ArgumentParser(prog="spyre-adapter", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    _add_run(sub)
    _add_probe(sub)
    _plugins(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Console-script entry point."""
    args = build_parser().parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
