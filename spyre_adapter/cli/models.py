"""``spyre-adapter models``: the transformers causal-LM families, and with
``--sweep`` the family sweep (arguments and their checks; no torch here). The
sweep is :func:`spyre_adapter.zoo.sweep.command.run_command`, imported once
they pass."""

from __future__ import annotations

import argparse
import ast
import importlib.util
from pathlib import Path
from typing import Any

from spyre_adapter.cli.argcheck import ArgError, add_pool_arguments, existing_dir, one_of

DESCRIPTION = ("List the causal-LM families transformers ships (its auto mapping), or with --sweep build each "
               "from its config class with small sizes and run greedy decode compiled on the spyre device, static "
               "and dynamic shapes, against CPU eager, in worker processes; write sweep.json and SWEEP.md. "
               "Progress goes to stderr (a line a minute when it is not a terminal). Exit status 1 if a family "
               "crashed or an item was not run.")
SHAPES = ("static", "dynamic")


def register(subparsers: Any) -> None:
    """Add ``models`` to the main CLI."""
    p = subparsers.add_parser("models", help="the transformers causal-LM families; --sweep runs them all on spyre",
                              description=DESCRIPTION)
    p.add_argument("--sweep", action="store_true", help="run the sweep (without it: list the families)")
    p.add_argument("--families", nargs="*", default=[], metavar="TYPE",
                   help="model types to run (a trailing * matches a prefix; default: all)")
    p.add_argument("--shapes", nargs="*", default=list(SHAPES), type=one_of(SHAPES), metavar="MODE",
                   help=f"shape modes to run: {' '.join(SHAPES)} (default: both)")
    add_pool_arguments(p, timeout=900.0, failure="crash")
    p.add_argument("--out", type=existing_dir, default=Path("results/models"), metavar="DIR",
                   help="existing folder for sweep.json and SWEEP.md")
    p.set_defaults(func="spyre_adapter.zoo.sweep.command:run_command", checks=[check_models])


def families_of_installed_transformers() -> dict[str, str]:
    """model type -> class of transformers' causal-LM auto mapping, read from
    its source without importing it (transformers imports torch)."""
    spec = importlib.util.find_spec("transformers")
    if spec is None or not spec.submodule_search_locations:
        raise ArgError("--families", None, "transformers is not installed (the hf extra: pip install -e '.[hf]')")
    path = Path(next(iter(spec.submodule_search_locations))) / "models" / "auto" / "modeling_auto.py"
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES"
                                                for t in node.targets):
            pairs = ast.literal_eval(node.value.args[0])  # OrderedDict([(type, class), ...])
            return dict(pairs)
    raise ArgError("--families", None, f"no causal-LM mapping found in {path}")


def check_models(args: argparse.Namespace) -> None:
    """--summarize-only reads --workdir; sweep options need --sweep; every
    --families pattern names a family."""
    if args.summarize_only and args.workdir is None:
        raise ArgError("--summarize-only", None, "expected --workdir DIR too (the journals to summarize)")
    if args.summarize_only and not args.sweep:
        raise ArgError("--summarize-only", None, "expected --sweep too")
    if not args.shapes:
        raise ArgError("--shapes", None, f"expected at least one of {', '.join(SHAPES)}")
    if args.families:
        known = families_of_installed_transformers()
        for p in args.families:
            if not any((t.startswith(p[:-1]) if p.endswith("*") else t == p) for t in known):
                raise ArgError("--families", p, "a model type of transformers' causal-LM auto mapping "
                                                "(`spyre-adapter models` lists them)")
