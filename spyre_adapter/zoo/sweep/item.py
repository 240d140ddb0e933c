"""One item of the family sweep: a family at one shape mode, built small,
greedy decode on the device against CPU eager, as one record."""

from __future__ import annotations

import dataclasses
import functools
import re
import subprocess
import time
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from spyre_adapter.zoo.sweep.families import small_config

__all__ = ["Item", "SHAPES", "PROMPT", "NEW_TOKENS", "run_item", "sweep_items", "classify_build_error", "code_version"]

#: Shape modes: the static KV cache and torch.compile's default, or dynamic=True and the dynamic cache.
SHAPES = ("static", "dynamic")
#: Prompt and generated tokens per run.
PROMPT, NEW_TOKENS = 6, 4

#: Messages of a missing optional dependency or a custom kernel the environment lacks.
_NEEDS = re.compile(r"requires the (\S+) librar|No module named '([\w.]+)'|pip install (\S+)|kernels? (?:hub|from the hub)",
                    re.I)


@dataclasses.dataclass(frozen=True)
class Item:
    """A family at one shape mode."""

    family: str
    shapes: str

    @property
    def key(self) -> str:
        return f"{self.family}:{self.shapes}"


def sweep_items(families: list[str], shapes: Sequence[str] = SHAPES) -> list[Item]:
    """Every family at every shape mode, the modes alternating from one family to
    the next (workers take every n-th item: each gets a mix of static and the
    slower dynamic runs)."""
    out = []
    for k, f in enumerate(families):
        order = list(shapes) if k % 2 == 0 else list(reversed(shapes))
        out += [Item(f, s) for s in order]
    return out


def classify_build_error(model_type: str, exc: BaseException) -> tuple[str, str]:
    """``(status, reason)`` of a family that did not build: ``needs`` (an
    optional dependency or custom kernel the environment lacks), ``no
    default`` (its config class's own defaults do not build a model:
    transformers'), or ``not built`` (the sweep's small sizes do not fit it)."""
    text = f"{type(exc).__name__}: {exc}"
    m = _NEEDS.search(text)
    if isinstance(exc, ImportError) or m:
        what = next((g for g in (m.groups() if m else ()) if g), None) or text.splitlines()[0][:80]
        return "needs", f"needs {what.strip('`.')}"
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    try:
        with torch.device("meta"):
            AutoModelForCausalLM.from_config(AutoConfig.for_model(model_type))
    except Exception as default_exc:  # noqa: BLE001 - any failure of transformers' own defaults
        return "no default", f"its config class's defaults do not build either: {_line(default_exc)}"
    return "not built", f"does not build at the sweep's sizes: {_line(exc)}"


def _line(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {' '.join(str(exc).split())}"[:240]


def no_zero_matrices(model: Any, std: float = 0.02, seed: int = 0) -> list[str]:
    """Give every all-zero weight matrix of ``model`` small random values;
    returns their names. Some architectures initialise a router's gate to
    zero: every expert then scores alike, and which of the exactly tied
    experts top-k picks is unspecified (torch's CPU kernel orders ties by its
    partial sort, the device by index), so the two runs route differently for
    no numerical reason - and routing itself is never exercised."""
    import torch

    g = torch.Generator().manual_seed(seed)
    out = []
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() >= 2 and p.is_floating_point() and p.device.type != "meta" and not bool(p.any()):
                p.copy_(torch.randn(p.shape, generator=g) * std)
                out.append(name)
    return out


def _eager_decodes(config: Any) -> bool:
    """Whether the model decodes on CPU eager with transformers' dynamic cache."""
    import torch

    from spyre_adapter.zoo.hf import HFOptions, build_model, greedy

    try:
        model = build_model(config)
        no_zero_matrices(model)
        ids = torch.arange(3, 3 + PROMPT).view(1, -1) % config.get_text_config().vocab_size
        greedy(model, ids, HFOptions(family=None, shapes="dynamic", prompt=PROMPT, new_tokens=NEW_TOKENS))
    except Exception:  # noqa: BLE001 - any failure: the model does not decode at all
        return False
    return True


def _fallback_names(messages: list[str]) -> list[str]:
    from spyre_adapter.workloads.differential import fallback_name

    return sorted({fallback_name(m) for m in messages})


@functools.cache
def code_version() -> str:
    """The code an item ran: the checkout's commit (``+`` when it has changes
    not committed), or the package's version outside a git checkout."""
    root = Path(__file__).resolve().parents[3]
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, timeout=30, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=30, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        from importlib.metadata import PackageNotFoundError, version
        try:
            return f"spyre-adapter {version('spyre-adapter')}"
        except PackageNotFoundError:
            return "unknown"
    return head + ("+" if dirty else "")


def run_item(item: Item) -> dict[str, Any]:
    """The record of one item (never raises: a crash is a record)."""
    from spyre_adapter.zoo.hf import EagerReferenceError, HFOptions, build_model, run_hf

    rec: dict[str, Any] = {"key": item.key, "family": item.family, "shapes": item.shapes, "code": code_version()}
    t0 = time.perf_counter()
    try:
        config = small_config(item.family)
        build_model(config, device="meta")
    except Exception as exc:  # noqa: BLE001 - a family that does not build is a record
        status, reason = classify_build_error(item.family, exc)
        rec.update(status=status, error=reason, seconds=round(time.perf_counter() - t0, 1))
        return rec
    try:
        randomised: list[str] = []
        r = run_hf(HFOptions(family=None, shapes=item.shapes, prompt=PROMPT, new_tokens=NEW_TOKENS), config=config,
                   prepare=lambda model: randomised.extend(no_zero_matrices(model)))
    except EagerReferenceError as exc:  # the model itself fails at these sizes: not a device crash
        cause = exc.__cause__ or exc
        if item.shapes == "static" and _eager_decodes(config):
            status, reason = "no static cache", f"its eager run fails with transformers' static KV cache: {_line(cause)}"
        else:
            status, reason = classify_build_error(item.family, cause)
        rec.update(status=status, error=reason, seconds=round(time.perf_counter() - t0, 1))
        return rec
    except Exception as exc:  # noqa: BLE001 - a crash is what the sweep looks for
        tb = traceback.extract_tb(exc.__traceback__)
        ours = [f"{f.filename.rsplit('/', 2)[-2]}/{f.filename.rsplit('/', 1)[-1]}:{f.lineno}" for f in tb
                if "/spyre_adapter/" in f.filename or "/shims/" in f.filename or "spyre_shims" in f.filename]
        rec.update(status="crash", error=_line(exc), where=ours[-3:], seconds=round(time.perf_counter() - t0, 1))
        return rec
    if r.get("status") == "does not fit":
        rec.update(status="not built", error=r["detail"], seconds=round(time.perf_counter() - t0, 1))
        return rec
    c = r["compile"]
    fallbacks = _fallback_names(r["fallbacks"])
    identical = bool(r["tokens_identical"])
    status = "fallback" if fallbacks else "pass" if identical else "tokens differ"
    rec.update(status=status, tokens_identical=identical, first_differing_token=r["first_differing_token"],
               max_abs_logit_error=r["max_abs_logit_error"], steps_compared=r["steps_compared"],
               fallbacks=fallbacks, compiles=c["compiles"], recompiles=c["recompiles"],
               graph_breaks=c["graph_breaks"], break_reasons=sorted(c["break_reasons"])[:5],
               host_ops_in_compiled_steps=r["decode"].get("host_ops_in_compiled_steps", 0),
               model_class=type(config).__name__.removesuffix("Config"), seconds=round(time.perf_counter() - t0, 1))
    if randomised:
        rec["zero_matrices_randomised"] = sorted({n.split(".")[-2] if "." in n else n for n in randomised})
    return rec
