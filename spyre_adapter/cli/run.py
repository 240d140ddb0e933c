"""``spyre-adapter run``: its arguments and their checks (no torch here; the
run itself is :func:`spyre_adapter.zoo.command.command`, imported once they pass).

The checks are tables: :data:`SIZE_OPTIONS` (one row per size option) and
:data:`SHAPE_RULES` (constraints between sizes); which sizes a model uses comes
from :data:`spyre_adapter.zoo.config.MODEL_SIZES`. A new model or option is a
new row.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

from spyre_adapter.cli.argcheck import ArgError, existing_file, float_range, int_range, one_of, output_file
from spyre_adapter.model.machine import Machine, MachineSpecError
from spyre_adapter.zoo.config import (HF_FAMILIES, HF_SIZES, MODEL_SIZES, SIZE_LIMITS, TP_FAMILIES, TP_SIZES,
                                      ModelConfig, is_hf, sizes_of)

__all__ = ["register", "SIZE_OPTIONS", "SHAPE_RULES", "DTYPES", "check_run", "machine_argument"]

#: --dtype choices (torch dtypes in spyre_adapter.zoo.command).
DTYPES = ("fp16", "bf16", "fp32")
_DEFAULTS = ModelConfig()


class SizeOption(NamedTuple):
    option: str
    field: str
    help: str


#: Size options: the ModelConfig field each sets, with its range from SIZE_LIMITS.
SIZE_OPTIONS: tuple[SizeOption, ...] = (
    SizeOption("--hidden", "hidden", "hidden size"),
    SizeOption("--heads", "heads", "attention heads (must divide --hidden)"),
    SizeOption("--kv-heads", "kv_heads", "key/value heads of grouped-query attention (must divide --heads)"),
    SizeOption("--intermediate", "intermediate", "MLP intermediate size"),
    SizeOption("--seq", "seq", "tokens per sequence"),
    SizeOption("--batch", "batch", "sequences"),
    SizeOption("--layers", "layers", "decoder layers (the *-tiny and hf: models)"),
    SizeOption("--vocab", "vocab", "vocabulary size (hf: models)"),
    SizeOption("--experts", "experts", "experts per MoE layer (hf:mixtral)"),
)
_OPTION = {s.field: s.option for s in SIZE_OPTIONS}


class ShapeRule(NamedTuple):
    """A constraint between sizes: ``ok(sizes)``; the error names ``blame`` (the
    first of these the user gave) and says ``accepted(sizes)``."""

    fields: tuple[str, ...]
    ok: Callable[[dict[str, int]], bool]
    blame: tuple[str, ...]
    accepted: Callable[[dict[str, int]], str]


SHAPE_RULES: tuple[ShapeRule, ...] = (
    ShapeRule(("hidden", "heads"), lambda s: s["hidden"] % s["heads"] == 0, ("hidden", "heads"),
              lambda s: f"--hidden a multiple of --heads (hidden {s['hidden']}, heads {s['heads']})"),
    ShapeRule(("hidden", "heads"), lambda s: (s["hidden"] // s["heads"]) % 2 == 0, ("hidden", "heads"),
              lambda s: f"an even head size --hidden / --heads for rotary embeddings "
                        f"({s['hidden']} / {s['heads']} = {s['hidden'] // s['heads']})"),
    ShapeRule(("heads", "kv_heads"), lambda s: s["heads"] % s["kv_heads"] == 0, ("kv_heads", "heads"),
              lambda s: f"--kv-heads a divisor of --heads (heads {s['heads']}, kv-heads {s['kv_heads']})"),
)


def machine_argument(text: str) -> str:
    """argparse type of ``--machine``: the spec, checked (the command parses it again)."""
    try:
        Machine.from_spec(text)
    except MachineSpecError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def register(subparsers: Any) -> None:
    """Add ``run`` to an ``add_subparsers()`` object."""
    p = subparsers.add_parser(
        "run", help="compile and run a model on the emulated Spyre device",
        description="Build a Llama/Granite-style model with random weights, run it eagerly on the CPU, compile it "
                    "for the 'spyre' device, run it on the emulator, and report the result check, the kernels, "
                    "modeled device time, DRAM traffic and LX residency. Progress goes to stderr.")
    p.add_argument("--model", default="llama-block", type=one_of(MODEL_SIZES, "a model:"), metavar="MODEL",
                   help=f"the model: {', '.join(m for m in MODEL_SIZES if not m.startswith('hf:'))}, or "
                        f"hf:<family> for a transformers causal LM with random weights, decoded greedily "
                        f"({', '.join(HF_FAMILIES)})")
    p.add_argument("--dtype", choices=DTYPES, help="element type (default: fp16; hf: models fp32)")
    for s in SIZE_OPTIONS:
        low, high = SIZE_LIMITS[s.field]
        p.add_argument(s.option, type=int_range(low, high), metavar="N",
                       help=f"{s.help}, {low} to {high} (default: {getattr(_DEFAULTS, s.field, 'the config')})")
    p.add_argument("--machine", type=machine_argument, metavar="SPEC",
                   help="machine overrides: name=value pairs (e.g. cores=8,lx_kib=1024) or a .json/.yaml file "
                        "holding an object of them (default: the Spyre card, see spyre_adapter/machine.py)")
    p.add_argument("--trace", type=output_file, metavar="PATH",
                   help="write a Chrome/Perfetto trace of device time to PATH (its folder must exist; "
                        "default: no trace)")
    p.add_argument("--json", type=output_file, metavar="PATH",
                   help="write the run report as JSON to PATH (its folder must exist; default: none)")
    p.add_argument("--listing", type=output_file, metavar="PATH",
                   help="write every kernel's Spyre program as an assembly-style listing to PATH: per core, each "
                        "instruction with the LX and DRAM ranges it reads and writes (its folder must exist; "
                        "default: none)")
    p.add_argument("--top", type=int_range(0), default=12, metavar="N", help="kernels shown in the table")
    p.add_argument("--nested-regions", action="store_true",
                   help="llama-tiny / granite-tiny: mark the decoder layer as a nested compile region "
                        "(torch.compiler.nested_compile_region): one whole graph, the layer traced, lowered "
                        "and planned once and called per layer (compile time no longer grows with --layers)")
    p.add_argument("--max-autotune", action="store_true",
                   help="built-in models: compile with torch.compile(mode=\"max-autotune\"): the planner also "
                        "simulates the stationary one-dimensional matmul divisions (faster programs; longer "
                        "compile, more memory)")
    p.add_argument("--atol", type=float_range(0.0), metavar="X",
                   help="max abs error allowed vs CPU eager (default by dtype: fp16 0.05, bf16 0.25, fp32 0.001)")
    hf = p.add_argument_group("transformers models (--model hf:<family> or --hf-config)")
    hf.add_argument("--hf-config", type=existing_file, metavar="PATH",
                    help="a local config.json of any transformers causal LM (sizes given here override it; "
                         "default: none)")
    hf.add_argument("--shapes", choices=("static", "dynamic"), default="dynamic",
                    help="dynamic: torch.compile(dynamic=True) and the dynamic KV cache; static: the static KV "
                         "cache and torch.compile's default specialisation")
    hf.add_argument("--cache", choices=("static", "dynamic"), help="KV cache (default: follows --shapes)")
    hf.add_argument("--prompt", type=int_range(1, 4096), default=8, metavar="N", help="prompt tokens")
    hf.add_argument("--new-tokens", type=int_range(1, 4096), default=8, metavar="N", help="tokens to generate")
    hf.add_argument("--autocast", choices=("fp16", "bf16"),
                    help='run under torch.autocast("spyre", dtype) (default: off)')
    hf.add_argument("--tp", type=int_range(1, 64), default=1, metavar="N",
                    help="tensor parallelism over N emulated cards, one process each, launched with torchrun "
                         f"({', '.join(TP_FAMILIES)}; default: 1, no processes)")
    p.set_defaults(func="spyre_adapter.zoo.command:command", checks=[check_run])


def check_run(args: argparse.Namespace) -> None:
    """Checks across arguments: sizes the model does not use, shape rules, one
    file written twice."""
    given = sizes_of(args)
    hf = is_hf(args)
    if args.hf_config is not None:
        if args.model.startswith("hf:"):
            raise ArgError("--hf-config", args.hf_config, f"expected either --model {args.model} or a config, not both")
        _check_hf_config(args.hf_config)
    used = HF_SIZES if hf else MODEL_SIZES[args.model]
    if not hf:
        for opt in ("--shapes", "--cache", "--prompt", "--new-tokens", "--autocast"):
            value = getattr(args, opt[2:].replace("-", "_"))
            default = {"--shapes": "dynamic", "--prompt": 8, "--new-tokens": 8}.get(opt)
            if value is not None and value != default:
                raise ArgError(opt, value, "applies to transformers models only (--model hf:<family> or --hf-config)")
    else:
        for opt in ("--trace", "--listing"):
            if getattr(args, opt[2:]) is not None:
                raise ArgError(opt, getattr(args, opt[2:]), "not available for transformers models (use a built-in "
                                                            "--model)")
    for field in given:
        if field not in used:
            users = [m for m, f in MODEL_SIZES.items() if field in f]
            raise ArgError(_OPTION[field], given[field],
                           f"--model {args.model} has no such size; it applies to {', '.join(users)}")
    sizes = {**dataclasses.asdict(_DEFAULTS), **given}
    for rule in SHAPE_RULES:
        if hf and not set(rule.fields) <= set(given):
            continue  # the config supplies the other sizes
        if set(rule.fields) <= used and not rule.ok(sizes):
            field = next((f for f in rule.blame if f in given), rule.blame[0])
            raise ArgError(_OPTION[field], sizes[field], f"expected {rule.accepted(sizes)}")
    if args.nested_regions and (hf or "layers" not in MODEL_SIZES[args.model]):
        raise ArgError("--nested-regions", args.model, "applies to the built-in models with decoder layers: "
                       + ", ".join(m for m, f in MODEL_SIZES.items() if "layers" in f and not m.startswith("hf:")))
    if args.max_autotune and hf:
        raise ArgError("--max-autotune", args.model, "applies to the built-in models (not hf:<family>)")
    if args.nested_regions:
        import torch  # only asked when the option is given: parsing stays torch-free
        if not hasattr(torch.compiler, "nested_compile_region"):
            raise ArgError("--nested-regions", torch.__version__,
                           "a torch with torch.compiler.nested_compile_region (releases 2.8 and later)")
    if args.tp > 1:
        _check_tp(args, given)
    outputs = [(opt, getattr(args, opt.lstrip("-"), None)) for opt in ("--trace", "--json", "--listing")]
    seen: dict[str, str] = {}
    for opt, path in outputs:
        if path is not None:
            if path in seen:
                raise ArgError(opt, path, f"expected a different file than {seen[path]}")
            seen[path] = opt


def _check_tp(args: argparse.Namespace, given: dict[str, int]) -> None:
    """``--tp N``: a family the plan knows, and only the options its runner takes."""
    if args.model.removeprefix("hf:") not in TP_FAMILIES or args.hf_config is not None:
        raise ArgError("--tp", args.tp, f"expected 1 for this model: tensor parallelism runs --model "
                                        f"{', '.join('hf:' + f for f in TP_FAMILIES)}")
    for opt in ("--autocast", "--cache", "--atol"):
        if getattr(args, opt[2:]) is not None:
            raise ArgError(opt, getattr(args, opt[2:]), f"not available with --tp {args.tp}")
    if args.shapes != "dynamic":
        raise ArgError("--shapes", args.shapes, f"not available with --tp {args.tp} (it runs dynamic shapes)")
    for field in given:
        if field not in TP_SIZES:
            raise ArgError(_OPTION[field], given[field], f"not available with --tp {args.tp}")


def _check_hf_config(path: str) -> None:
    """A readable JSON object with a ``model_type`` (a transformers config)."""
    try:
        raw = json.loads(Path(path).read_text())
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ArgError("--hf-config", path, f"expected a readable config.json ({type(exc).__name__})") from None
    if not isinstance(raw, dict) or "model_type" not in raw:
        raise ArgError("--hf-config", path, "expected a transformers config.json (an object with a model_type)")
