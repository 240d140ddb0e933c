"""Hugging Face transformers models on the emulated Spyre device, the way their
users run them: a causal LM built from a config with random weights (no
downloads), its ``forward`` compiled for "spyre", greedy ``generate`` with
transformers' dynamic or static KV cache, compared token by token with the
same model run eagerly on the CPU.

Families (``--model hf:<family>``) are small configs of real architectures;
``--hf-config PATH`` takes any local ``config.json`` (e.g. Llama-3.1-8B's) with
``--layers`` and size overrides. The report splits prefill from decode:
kernels, modeled device time per token, DRAM bytes per token against the bytes
of weights a token must read, and time per token against the bandwidth
roofline (those weights / DRAM bandwidth: decode is bandwidth-bound).

Shapes: ``static`` uses transformers' static KV cache (every tensor shape is
fixed after prefill) and ``torch.compile``'s default specialisation (a Python
value that changes between calls - Gemma-3's sliding-window layers count
tokens in an int - becomes symbolic after one recompile instead of
recompiling every token, as ``dynamic=False`` would); ``dynamic`` compiles with
``dynamic=True`` and the dynamic cache (the KV length grows every token and
must not recompile). Recompiles and graph breaks are counted per run.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

from spyre_shims.compilation import CompileCounts, count_compiles
from spyre_shims.device import eager_op_counts
from spyre_shims.runtime import reset_compiled

from spyre_adapter.backend.session import current
from spyre_adapter.backend.spyre import current_machine
from spyre_adapter.harness.memory import available_bytes
from spyre_adapter.harness.on_device import announced_fallbacks
from spyre_adapter.zoo.routing import TieRecorder, recording_ties, resolve_ties

__all__ = ["FAMILIES", "HFOptions", "make_config", "build_model", "run_hf", "weight_bytes", "EagerReferenceError"]


@dataclasses.dataclass(frozen=True)
class Family:
    """A transformers architecture and the small config the runs default to."""

    model_type: str
    defaults: dict[str, Any]
    #: Model keyword arguments that keep every op on the device.
    model_kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)
    note: str = ""


_SMALL = {"hidden_size": 256, "intermediate_size": 704, "num_attention_heads": 8, "num_key_value_heads": 2,
          "num_hidden_layers": 2, "vocab_size": 1024, "max_position_embeddings": 512}

FAMILIES: dict[str, Family] = {
    "llama": Family("llama", dict(_SMALL)),
    "qwen2": Family("qwen2", dict(_SMALL)),
    "granite": Family("granite", {**_SMALL, "attention_multiplier": 0.0078125, "residual_multiplier": 0.22,
                                  "embedding_multiplier": 12.0, "logits_scaling": 8.0}),
    "mistral": Family("mistral", {**_SMALL, "sliding_window": None}),
    "gemma3": Family("gemma3_text", {**_SMALL, "head_dim": 32, "query_pre_attn_scalar": 32,
                                     "sliding_window": 512, "sliding_window_pattern": 2}),
    "mixtral": Family("mixtral", {**_SMALL, "intermediate_size": 352, "num_local_experts": 4,
                                  "num_experts_per_tok": 2},
                      model_kwargs={"experts_implementation": "batched_mm"},
                      note="experts run as gathered weights + bmm (transformers' batched_mm): the default "
                           "grouped_mm path sorts and counts tokens with ops that have no device kernel"),
}

#: Size options -> config attributes.
SIZE_KEYS = {"hidden": "hidden_size", "heads": "num_attention_heads", "kv_heads": "num_key_value_heads",
             "intermediate": "intermediate_size", "layers": "num_hidden_layers", "vocab": "vocab_size",
             "experts": "num_local_experts"}

DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}
#: Max abs logit error allowed vs CPU eager, by compute dtype.
LOGIT_ATOL = {"fp32": 1e-3, "fp16": 5e-2, "bf16": 2.5e-1}


@dataclasses.dataclass
class HFOptions:
    """One ``spyre-adapter run --model hf:...`` invocation."""

    family: str | None = "llama"
    config_path: str | None = None
    dtype: str = "fp32"
    autocast: str | None = None  # "fp16" | "bf16": torch.autocast("spyre") around generate
    shapes: str = "dynamic"  # "static" | "dynamic"
    cache: str | None = None  # "static" | "dynamic" (default: follows shapes)
    prompt: int = 8
    new_tokens: int = 8
    batch: int = 1
    sizes: dict[str, int] = dataclasses.field(default_factory=dict)
    seed: int = 0
    atol: float | None = None

    @property
    def cache_kind(self) -> str:
        return self.cache or self.shapes

    @property
    def name(self) -> str:
        return f"hf:{self.family}" if self.config_path is None else f"hf-config:{Path(self.config_path).name}"


# ------------------------------------------------------------------ building

def _transformers() -> Any:
    try:
        import transformers
    except ImportError as exc:  # pragma: no cover - the extra is part of the install command
        raise RuntimeError("Hugging Face models need transformers: pip install -e '.[hf]'") from exc
    return transformers


def make_config(family: str | None = None, config_path: str | None = None, sizes: dict[str, int] | None = None) -> Any:
    """A transformers config: a family's small config, or a local config.json,
    with size overrides (``hidden``, ``heads``, ``kv_heads``, ``intermediate``,
    ``layers``, ``vocab``, ``experts``). A changed width or head count keeps
    ``head_dim = hidden / heads``."""
    tf = _transformers()
    sizes = dict(sizes or {})
    if config_path is not None:
        raw = json.loads(Path(config_path).read_text())
        model_type = raw.pop("model_type", None)
        if model_type is None:
            raise ValueError(f"{config_path}: no model_type in the config")
        if "text_config" in raw and model_type in ("gemma3",):  # a multimodal wrapper: take the text model
            raw, model_type = dict(raw["text_config"]), "gemma3_text"
        values = raw
    else:
        fam = FAMILIES[family or "llama"]
        model_type, values = fam.model_type, dict(fam.defaults)
    for key, attr in SIZE_KEYS.items():
        if key in sizes:
            values[attr] = sizes[key]
    if ("hidden" in sizes or "heads" in sizes) and values.get("head_dim") is not None:
        values["head_dim"] = values["hidden_size"] // values["num_attention_heads"]
        if "query_pre_attn_scalar" in values:
            values["query_pre_attn_scalar"] = values["head_dim"]
    if "layer_types" in values and "layers" in sizes:
        values["layer_types"] = (list(values["layer_types"]) * sizes["layers"])[: sizes["layers"]]
    for key in ("torch_dtype", "dtype", "architectures", "transformers_version", "auto_map", "quantization_config"):
        values.pop(key, None)
    return tf.AutoConfig.for_model(model_type, **values)


def _model_kwargs(family: str | None, config: Any) -> dict[str, Any]:
    if family is not None:
        return dict(FAMILIES[family].model_kwargs)
    return {"experts_implementation": "batched_mm"} if _is_moe(config) else {}


#: Config attributes of a mixture of experts (expert count) across transformers' naming schemes.
MOE_KEYS = ("num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts")


def _is_moe(config: Any) -> bool:
    text = getattr(config, "text_config", None)
    return any(isinstance(getattr(c, k, None), int) and getattr(c, k) > 1 for c in (config, text) if c is not None
               for k in MOE_KEYS)


def build_model(config: Any, dtype: torch.dtype = torch.float32, seed: int = 0, family: str | None = None,
                device: str | torch.device = "cpu") -> Any:
    """The causal LM of ``config`` with deterministic random weights (the
    architecture's own initialisation), in eval mode."""
    tf = _transformers()
    torch.manual_seed(seed)
    with torch.device(device):
        try:
            model = tf.AutoModelForCausalLM.from_config(config, dtype=dtype, attn_implementation="sdpa")
        except ValueError as exc:  # an architecture without an SDPA path runs its own attention
            if "scaled_dot_product_attention" not in str(exc) and "sdpa" not in str(exc).lower():
                raise
            torch.manual_seed(seed)
            model = tf.AutoModelForCausalLM.from_config(config, dtype=dtype, attn_implementation="eager")
    impl = _model_kwargs(family, config).get("experts_implementation")
    if impl is not None and hasattr(model, "set_experts_implementation"):
        try:
            model.set_experts_implementation(impl)
        except (ValueError, NotImplementedError):
            pass  # experts written out by the architecture itself: nothing to choose
    model.generation_config.pad_token_id = model.generation_config.pad_token_id or 0
    return model.eval()


def weight_bytes(model: torch.nn.Module) -> dict[str, int]:
    """``total``: every distinct weight; ``per_token``: those one decode token
    must read - an untied input embedding contributes one row, not the table,
    and a mixture of experts only its routed share (``k`` of ``E`` experts)."""
    seen: set[int] = set()
    total = experts = 0
    for name, p in model.named_parameters():
        ptr = p.untyped_storage().data_ptr()
        if ptr in seen and p.device.type != "meta":
            continue
        seen.add(ptr)
        total += p.numel() * p.element_size()
        if ".experts." in f".{name}.":
            experts += p.numel() * p.element_size()
    emb = model.get_input_embeddings().weight
    out = model.get_output_embeddings()
    tied = out is not None and out.weight is emb
    per_token = total if tied else total - emb.numel() * emb.element_size() + emb.shape[1] * emb.element_size()
    cfg = model.config
    routed = getattr(cfg, "num_experts_per_tok", None)
    n_experts = getattr(cfg, "num_local_experts", None) or getattr(cfg, "num_experts", None)
    if experts and routed and n_experts:
        per_token -= experts - experts * min(routed, n_experts) // n_experts
    return {"total": total, "per_token": per_token, "experts": experts}


def estimate_bytes(config: Any, dtype: torch.dtype, family: str | None = None) -> int:
    """Bytes of the model's weights, from a model built on the meta device."""
    return weight_bytes(build_model(config, dtype, family=family, device="meta"))["total"]


# ------------------------------------------------------------------ stepping

@dataclasses.dataclass
class Step:
    """One forward call of generate."""

    tokens: int
    wall_s: float
    modeled_ns: float = 0.0
    launches: int = 0
    dram_bytes: int = 0
    kernels: int = 0
    compiles: int = 0
    host_ops: int = 0
    #: programs planned during the step, programs bound from size templates, and the
    #: backend's host seconds for run-time sizes it met: planning (or binding) their
    #: programs, then their checked first launches
    plans: int = 0
    plan_s: float = 0.0
    first_launch_s: float = 0.0
    binds: int = 0


class StepRecorder:
    """Wraps a model's forward: measures every call (device figures come from
    the device report's running totals)."""

    def __init__(self, forward: Callable[..., Any], device: bool) -> None:
        self.forward = forward
        self.device = device
        self.steps: list[Step] = []
        # generate checks its keyword arguments against the forward's signature
        # (a model whose input preparation forwards **kwargs): keep the model's.
        try:
            self.__signature__ = inspect.signature(forward)
        except (TypeError, ValueError):
            pass

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        ids = kwargs.get("input_ids", args[0] if args else None)
        tokens = int(ids.numel()) if isinstance(ids, torch.Tensor) else 0
        if not self.device:
            t0 = time.perf_counter()
            out = self.forward(*args, **kwargs)
            self.steps.append(Step(tokens, time.perf_counter() - t0))
            return out
        session = current()
        before = (session.report.clock_ns, session.report.launch_count, _dram_total(), eager_op_counts())
        host_before = dict(session.report.host_s)
        planned_before, bound_before = session.programs.planned, session.programs.bound
        names_before = {r["name"]: r["launches"] for r in session.report.per_kernel()}
        with count_compiles() as c:
            t0 = time.perf_counter()
            out = self.forward(*args, **kwargs)
            wall = time.perf_counter() - t0
        launched = sum(1 for r in session.report.per_kernel() if r["launches"] > names_before.get(r["name"], 0))
        host = sum((eager_op_counts() - before[3]).values())
        spent = {k: v - host_before.get(k, 0.0) for k, v in session.report.host_s.items()}
        self.steps.append(Step(tokens, wall, session.report.clock_ns - before[0], session.report.launch_count - before[1],
                               _dram_total() - before[2], launched, c.compiles, host,
                               session.programs.planned - planned_before, spent["plan_at_launch"],
                               spent["first_launch"], session.programs.bound - bound_before))
        return out


def _dram_total() -> int:
    return sum(r["dram_bytes"] for r in current().report.per_kernel())


@contextmanager
def _recording(model: Any, recorder: StepRecorder) -> Iterator[None]:
    model.forward = recorder
    try:
        yield
    finally:
        del model.forward


def greedy(model: Any, ids: torch.Tensor, opts: HFOptions) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """Greedy ``generate``: the sequences and every step's logits (on the CPU)."""
    kwargs: dict[str, Any] = {"max_new_tokens": opts.new_tokens, "do_sample": False, "disable_compile": True,
                              "return_dict_in_generate": True, "output_logits": True}
    if opts.cache_kind == "static":
        kwargs["cache_implementation"] = "static"
    with torch.no_grad(), warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*generation flags are not valid.*")
        out = model.generate(ids, attention_mask=torch.ones_like(ids), **kwargs)
    return out.sequences.cpu(), [lg.float().cpu() for lg in out.logits]


# ------------------------------------------------------------------ the run

class EagerReferenceError(RuntimeError):
    """The model failed in its CPU eager reference run, before anything ran on
    the device (its config does not make a working model)."""


def _phase(steps: list[Step], weights_per_token: int, machine: Any, device: bool, first: bool) -> dict[str, Any]:
    chosen = steps[:1] if first else steps[1:]
    tokens = sum(s.tokens for s in chosen)
    out: dict[str, Any] = {"steps": len(chosen), "tokens": tokens,
                           "wall_s_per_token": sum(s.wall_s for s in chosen) / max(tokens, 1)}
    if not device or not chosen:
        return out
    # Steady-state figures: decode steps after those that compiled.
    steady = [s for s in chosen if s.compiles == 0] or chosen
    st_tokens = sum(s.tokens for s in steady)
    modeled = sum(s.modeled_ns for s in steady) / max(st_tokens, 1)
    dram = sum(s.dram_bytes for s in steady) / max(st_tokens, 1)
    # Every step streams the weights once, whatever number of tokens it carries.
    per_token = len(steady) / max(st_tokens, 1)
    roof_ns = weights_per_token / machine.dram_nominal_gbps * per_token
    roof_sustained_ns = weights_per_token / machine.dram_read_gbps * per_token
    out.update({
        "launches_per_step": sum(s.launches for s in steady) / len(steady),
        "kernels_per_step": max(s.kernels for s in steady),
        "modeled_us_per_token": modeled / 1e3,
        "dram_bytes_per_token": dram,
        "dram_over_weights": dram / (weights_per_token * per_token) if weights_per_token else 0.0,
        "roofline_us_per_token": roof_ns / 1e3,
        "roofline_sustained_us_per_token": roof_sustained_ns / 1e3,
        "modeled_over_roofline": modeled / roof_ns if roof_ns else 0.0,
        "steady_wall_s_per_token": sum(s.wall_s for s in steady) / max(st_tokens, 1),
        "host_ops_in_compiled_steps": sum(s.host_ops for s in steady if s.compiles == 0),
        # what new run-time sizes cost each steady step (a dynamic KV length is new every token)
        "plans_per_step": sum(s.plans for s in steady) / len(steady),
        "binds_per_step": sum(s.binds for s in steady) / len(steady),
        "plan_ms_per_token": sum(s.plan_s for s in steady) * 1e3 / max(st_tokens, 1),
        "first_launch_ms_per_token": sum(s.first_launch_s for s in steady) * 1e3 / max(st_tokens, 1),
    })
    return out


def _step_errors(ref_seq: torch.Tensor, ref_logits: list[torch.Tensor], seq: torch.Tensor,
                 logits: list[torch.Tensor]) -> list[float]:
    """Max abs logit error of each step both runs reached with the same prefix
    (up to and including the first step whose tokens differ)."""
    prompt = ref_seq.shape[1] - len(ref_logits)
    errors = []
    for k in range(min(len(ref_logits), len(logits))):
        errors.append(float((ref_logits[k] - logits[k]).abs().max()))
        if not torch.equal(ref_seq[:, prompt + k], seq[:, prompt + k]):
            break
    return errors


def _compare(ref_seq: torch.Tensor, ref_logits: list[torch.Tensor], seq: torch.Tensor,
             logits: list[torch.Tensor]) -> dict[str, Any]:
    """Tokens identical? Logit error over the steps both runs saw the same prefix."""
    same = bool(torch.equal(ref_seq, seq))
    prompt = ref_seq.shape[1] - len(ref_logits)
    errors = _step_errors(ref_seq, ref_logits, seq, logits)
    agree, err = len(errors), max(errors, default=0.0)
    first_diff = next((k for k in range(len(ref_logits)) if not torch.equal(ref_seq[:, prompt + k], seq[:, prompt + k])),
                      None)
    return {"tokens_identical": same, "first_differing_token": first_diff, "max_abs_logit_error": err,
            "steps_compared": agree}


def run_hf(opts: HFOptions, machine: Any = None, config: Any = None,
           prepare: Callable[[Any], None] | None = None) -> dict[str, Any]:
    """CPU eager reference, then the same model compiled on spyre; the result
    check and the device report with prefill and decode separated. ``config``:
    a transformers config to build instead of the options' family or file;
    ``prepare``: called with the built model before anything runs."""
    machine = machine or current_machine()
    if config is None:
        config = make_config(opts.family, opts.config_path, opts.sizes)
    dtype = DTYPES[opts.dtype]
    need = estimate_bytes(config, dtype, opts.family)
    have = available_bytes()
    if need * 1.3 > have:
        return {"model": opts.name, "status": "does not fit", "passed": False,
                "detail": f"weights {need / 2**30:.1f} GiB (x1.3 working set) > {have / 2**30:.1f} GiB available: "
                          "use --layers / --hidden / --vocab to shrink the model"}
    model = build_model(config, dtype, opts.seed, opts.family)
    if prepare is not None:
        prepare(model)
    weights = weight_bytes(model)
    g = torch.Generator().manual_seed(opts.seed + 1)
    ids = torch.randint(0, config.get_text_config().vocab_size, (opts.batch, opts.prompt), generator=g)

    ref = StepRecorder(model.forward, device=False)
    precision = opts.autocast or opts.dtype
    ref_opts = dataclasses.replace(opts, autocast=None)
    try:
        with _recording(model, ref), recording_ties(model, DTYPES[precision]) as ties:
            ref_seq, ref_logits = greedy(model, ids, ref_opts)
    except Exception as exc:
        raise EagerReferenceError(f"the model fails on CPU eager: {type(exc).__name__}: {exc}") from exc

    current().report.reset()
    reset_compiled()  # this run's compiles only (transformers' wrappers share code objects across models)
    model.to("spyre")  # in place: the CPU weights are released, never held twice
    compiled = torch.compile(model.forward, dynamic=True if opts.shapes == "dynamic" else None)
    dev = StepRecorder(compiled, device=True)
    amp = (torch.autocast("spyre", dtype=DTYPES[opts.autocast]) if opts.autocast
           else torch.autocast("spyre", enabled=False))
    with announced_fallbacks() as announced, count_compiles() as counts, _recording(model, dev), amp:
        t0 = time.perf_counter()
        seq, logits = greedy(model, ids.to("spyre"), opts)
        wall = time.perf_counter() - t0
    fallbacks = sorted(set(announced))
    check = _compare(ref_seq, ref_logits, seq, logits)
    atol = opts.atol if opts.atol is not None else LOGIT_ATOL[precision]
    routing = _routing(model, ids, ref_opts, ties, (ref_seq, ref_logits), (seq, logits), atol, DTYPES[precision])
    if routing.get("flipped"):
        check = routing.pop("check")
    exact = precision == "fp32"
    passed = (check["max_abs_logit_error"] <= atol and not fallbacks
              and (check["tokens_identical"] or not exact) and check["steps_compared"] > 0)
    summary = current().report.to_dict()
    result = {
        "model": opts.name, "model_type": config.model_type, "dtype": opts.dtype, "autocast": opts.autocast,
        "shapes": opts.shapes, "cache": opts.cache_kind, "prompt_tokens": opts.prompt, "new_tokens": opts.new_tokens,
        "batch": opts.batch, "config": _config_summary(config), "machine": machine.to_dict(),
        "status": "pass" if passed else "fail", "passed": passed, "atol": atol, **check,
        "generated": seq[0, opts.prompt:].tolist(), "reference": ref_seq[0, opts.prompt:].tolist(),
        "weight_bytes": weights["total"], "weight_bytes_read_per_token": weights["per_token"],
        "compile": _counts(counts), "fallbacks": fallbacks,
        "prefill": _phase(dev.steps, weights["per_token"], machine, True, True),
        "decode": _phase(dev.steps, weights["per_token"], machine, True, False),
        "eager": {"prefill": _phase(ref.steps, weights["per_token"], machine, False, True),
                  "decode": _phase(ref.steps, weights["per_token"], machine, False, False)},
        "steps": [dataclasses.asdict(s) for s in dev.steps],
        "wall_s": {"device_generate": wall, "eager_generate": sum(s.wall_s for s in ref.steps)},
        "device": {k: summary[k] for k in ("graphs", "kernels_generated", "launches", "modeled_device_ns",
                                           "dram_bytes", "lx_residency")},
    }
    if routing:
        result["routing"] = routing
    note = FAMILIES[opts.family].note if opts.family else ""
    if note:
        result["note"] = note
    del model, compiled
    return result


def _routing(model: Any, ids: torch.Tensor, ref_opts: HFOptions, ties: TieRecorder,
             ref: tuple[torch.Tensor, list[torch.Tensor]], dev: tuple[torch.Tensor, list[torch.Tensor]],
             atol: float, dtype: torch.dtype) -> dict[str, Any]:
    """A mixture of experts' routing near-ties: when the device's logits fail
    the check against the reference, the reference re-run with near-ties
    resolved the other way (see :mod:`.routing`); ``check`` is the comparison
    with the run that matched, if one did."""
    if not ties.found:
        return {}
    out: dict[str, Any] = {"routers": len(ties.found), "near_ties": len(ties.ties)}
    errors = _step_errors(*ref, *dev)
    if all(e <= atol for e in errors) or not ties.ties or not ties.flippable:
        return out
    model.to("cpu")  # the device run is over: the weights return for the re-runs
    found = resolve_ties(model, ties.ties, errors, atol, lambda: greedy(model, ids, ref_opts),
                         lambda r: _step_errors(r[0], r[1], *dev), dtype)
    out["error_as_first_routed"] = max(errors)
    if found is not None:
        (alt_seq, alt_logits), flipped = found
        out["flipped"] = [t.describe() for t in flipped]
        out["check"] = _compare(alt_seq, alt_logits, *dev)
    return out


def _counts(c: CompileCounts) -> dict[str, Any]:
    return {"compiles": c.compiles, "recompiles": c.recompiles, "graph_breaks": c.graph_breaks, "graphs": c.graphs,
            "break_reasons": c.break_reasons, "seconds": c.seconds}


def _config_summary(config: Any) -> dict[str, Any]:
    keys = ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
            "head_dim", "vocab_size", "num_local_experts", "num_experts_per_tok", "sliding_window")
    out = {k: _config_value(config, k) for k in keys}
    return {k: v for k, v in out.items() if v is not None}


def _config_value(config: Any, key: str) -> Any:
    """``config.key``; of a heterogeneous config (per-layer sizes, where reading
    the whole config's raises), the value of each layer when they differ."""
    try:
        return getattr(config, key, None)
    except RuntimeError:  # transformers' AmbiguousGlobalPerLayerAttributeError
        values = [getattr(layer, key, None) for layer in config.per_layer_config]
        return values[0] if len(set(values)) == 1 else values

