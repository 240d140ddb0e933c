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
    from .hf_models import FAMILIES
    from .models import MODELS

    p.add_argument("--model", default="llama-block", choices=sorted(MODELS) + [f"hf:{f}" for f in FAMILIES],
                   help="a built-in model, or hf:<family> (a transformers causal LM, greedy decode)")
    p.add_argument("--dtype", choices=["fp16", "bf16", "fp32"], help="default fp16 (hf: models fp32)")
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
    hf = p.add_argument_group("transformers models (--model hf:<family> or --hf-config)")
    hf.add_argument("--hf-config", help="a local config.json (any transformers causal LM); sizes override it")
    hf.add_argument("--vocab", type=int, help="vocabulary size")
    hf.add_argument("--experts", type=int, help="experts per MoE layer")
    hf.add_argument("--shapes", choices=["static", "dynamic"], default="dynamic",
                    help="static: transformers' static KV cache, torch.compile's default specialisation; "
                         "dynamic (default): dynamic=True and the dynamic KV cache")
    hf.add_argument("--cache", choices=["static", "dynamic"], help="KV cache (default: follows --shapes)")
    hf.add_argument("--prompt", type=int, default=8, help="prompt tokens (default 8)")
    hf.add_argument("--new-tokens", type=int, default=8, help="tokens to generate (default 8)")
    hf.add_argument("--autocast", choices=["fp16", "bf16"], help='run under torch.autocast("spyre", dtype)')
    p.set_defaults(func=_run_cmd)


def _run_cmd(args: argparse.Namespace) -> int:
    if args.model.startswith("hf:") or args.hf_config:
        return _run_hf(args)
    from .run import RunOptions, main_run

    opts = RunOptions(
        model=args.model, dtype=args.dtype or "fp16", machine=args.machine, trace=args.trace, json_path=args.json,
        top=args.top, atol=args.atol,
        sizes={k: getattr(args, k) for k in ("hidden", "heads", "kv_heads", "intermediate", "seq", "batch", "layers")
               if getattr(args, k) is not None},
    )
    return main_run(opts)


def _hf_argument_error(args: argparse.Namespace) -> str | None:
    """The first invalid transformers-run argument, as one line (None: all valid)."""
    import json
    from pathlib import Path

    if args.hf_config and args.model.startswith("hf:"):
        return "give --model hf:<family> or --hf-config PATH, not both"
    if args.trace:
        return "--trace: not available for transformers models (use a built-in --model)"
    if args.seq is not None:
        return "--seq: transformers models take --prompt and --new-tokens"
    for name in ("prompt", "new_tokens", "hidden", "heads", "kv_heads", "intermediate", "layers", "vocab",
                 "experts", "batch"):
        value = getattr(args, name, None)
        if value is not None and value < 1:
            return f"--{name.replace('_', '-')}: expected a positive integer, got {value}"
    if args.hf_config:
        path = Path(args.hf_config)
        try:
            raw = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            return f"--hf-config: expected a readable config.json, got {path} ({type(exc).__name__})"
        if not isinstance(raw, dict) or "model_type" not in raw:
            return f"--hf-config: {path} has no model_type (not a transformers config)"
    return None


def _run_hf(args: argparse.Namespace) -> int:
    from .backend import set_machine
    from .hf_models import HFOptions
    from .hf_report import main_hf
    from .machine import Machine

    problem = _hf_argument_error(args)
    if problem is not None:
        print(f"spyre-adapter run: error: {problem}", file=sys.stderr)
        return 2
    set_machine(Machine.from_spec(args.machine))
    sizes = {k: getattr(args, k) for k in ("hidden", "heads", "kv_heads", "intermediate", "layers", "vocab", "experts")
             if getattr(args, k) is not None}
    opts = HFOptions(family=None if args.hf_config else args.model.removeprefix("hf:"), config_path=args.hf_config,
                     dtype=args.dtype or "fp32", autocast=args.autocast, shapes=args.shapes, cache=args.cache,
                     prompt=args.prompt, new_tokens=args.new_tokens, batch=args.batch or 1, sizes=sizes,
                     atol=args.atol)
    return main_hf(opts, args.json)


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
