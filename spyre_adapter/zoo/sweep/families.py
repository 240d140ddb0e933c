"""Which families the sweep runs and the small config each is built from.

The families are transformers' own auto mapping for causal LMs. A family's
config is its config class's defaults with every size the class has shrunk
to the sweep's small sizes (:data:`SMALL`), by attribute name across the
naming schemes transformers' configs use; :data:`OVERRIDES` adds what a few
architectures need to build at those sizes (consistent head or expert
dimensions), never something that changes what the model computes.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

__all__ = ["SMALL", "OVERRIDES", "causal_lm_families", "small_config", "Family"]

#: The sweep's sizes: 2 layers, small widths and vocabulary.
SMALL = {"hidden": 64, "heads": 4, "kv_heads": 2, "layers": 2, "intermediate": 128, "vocab": 256, "positions": 128,
         "experts": 4, "experts_per_token": 2, "expert_intermediate": 64}

#: size -> the config attributes that carry it, across transformers' naming schemes.
ATTRIBUTES: dict[str, tuple[str, ...]] = {
    "hidden": ("hidden_size", "n_embd", "n_embed", "d_model", "model_dim", "dim"),
    "heads": ("num_attention_heads", "n_head", "n_heads", "num_heads", "decoder_attention_heads",
              "encoder_attention_heads", "swa_num_attention_heads"),
    "kv_heads": ("num_key_value_heads", "num_kv_heads", "n_head_kv", "multi_query_group_num", "num_kv_groups",
                 "swa_num_key_value_heads"),
    "layers": ("num_hidden_layers", "n_layer", "n_layers", "num_layers", "decoder_layers", "encoder_layers"),
    "intermediate": ("intermediate_size", "n_inner", "ffn_dim", "decoder_ffn_dim", "encoder_ffn_dim", "d_ff",
                     "ffn_hidden_size", "dense_intermediate_size"),
    "vocab": ("vocab_size", "unpadded_vocab_size"),
    "positions": ("max_position_embeddings", "n_positions", "n_ctx", "max_seq_len", "max_sequence_length",
                  "max_target_positions", "max_source_positions"),
    "experts": ("num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts"),
    "experts_per_token": ("num_experts_per_tok", "moe_topk", "top_k_experts", "num_selected_experts"),
    "expert_intermediate": ("moe_intermediate_size", "shared_expert_intermediate_size", "expert_intermediate_size"),
}
#: Token ids the configs carry, kept inside the small vocabulary.
TOKEN_IDS = ("bos_token_id", "eos_token_id", "pad_token_id", "decoder_start_token_id", "sep_token_id",
             "cls_token_id", "mask_token_id", "unk_token_id")
#: Per-layer lists cut to the number of layers.
LAYER_LISTS = ("layer_types", "mlp_layer_types", "attn_layer_indices", "block_types")

#: A value of :data:`OVERRIDES` that removes a size the generic rules set.
DROP = object()

#: model_type -> extra config values a family needs to build at the small sizes.
OVERRIDES: dict[str, dict[str, Any]] = {
    "gpt_neo": {"attention_types": [[["global", "local"], 1]]},
    "jamba": {"attn_layer_period": 2, "attn_layer_offset": 1, "expert_layer_period": 2, "expert_layer_offset": 1},
    "reformer": {"axial_pos_embds_dim": [32, 32], "axial_pos_shape": [8, 16], "attn_layers": ["local", "lsh"]},
    "prophetnet": {"num_encoder_layers": 2, "num_decoder_layers": 2, "num_hidden_layers": DROP},
    "bamba": {"attn_layer_indices": [1]},
    "falcon_h1": {"mamba_d_ssm": 64, "mamba_n_heads": 4, "mamba_d_state": 16, "mamba_chunk_size": 16},
    "recurrent_gemma": {"block_types": ["recurrent", "attention"], "lru_width": 64},
    "lfm2_moe": {"layer_types": ["conv", "full_attention"]},
    "granitemoehybrid": {"layer_types": ["mamba", "attention"], "mamba_n_heads": 4, "mamba_d_state": 16,
                         "mamba_chunk_size": 16},
    "mamba2": {"head_dim": 32, "n_groups": 1, "state_size": 16, "chunk_size": 16},
    "xlnet": {"max_position_embeddings": DROP},
    "xmod": {"default_language": "en_XX"},
    "gemma3n_text": {"num_kv_shared_layers": 0, "vocab_size_per_layer_input": 256, "hidden_size_per_layer_input": 16},
    "zamba": {"layers_block_type": ["linear_attention", "hybrid", "hybrid"], "num_hidden_layers": 3},
    # at 4 heads of 16, a query/key half as wide as the value breaks xLSTM's chunked cell (matC shape)
    "xlstm": {"qk_dim_factor": 1.0},
    "kolibri1_1": {"index_layers": [1]},
    "zaya": {"num_experts_per_tok": 1},
    "blt": {"encoder_hash_byte_group_vocab": 256},  # the hash n-gram tables (500002 rows by default)
}


@dataclasses.dataclass(frozen=True)
class Family:
    """A causal-LM family: its model type and the class the auto mapping names."""

    model_type: str
    model_class: str


def causal_lm_families() -> list[Family]:
    """Every family in transformers' causal-LM auto mapping, in its order."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    return [Family(t, c) for t, c in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.items()]


def _heterogeneous(config: Any) -> bool:
    """A config whose layers differ in some sizes (transformers' per-layer
    configs: reading such a size from the whole config raises)."""
    return config.__dict__.get("_heterogeneity_spec") is not None


def _get(config: Any, name: str) -> Any:
    """``config.name``, or Ellipsis when it has none (some configs raise on
    reading a size they do not have, e.g. XLNet's maximum length). A
    heterogeneous config's per-layer size is read as its global value."""
    try:
        if _heterogeneous(config):
            return config._getattr_without_heterogeneous_validation(name)
        return getattr(config, name)
    except (AttributeError, NotImplementedError, ValueError):
        return Ellipsis


def _small_per_layer(config: Any, small: dict[str, Any], layers: int) -> dict[int, dict[str, Any]] | None:
    """The per-layer sizes of a heterogeneous config, kept heterogeneous at the
    small sizes: one layer (after layer 0, which keeps the global sizes) per
    distinct kind of layer the config describes, each size scaled with its
    global one (a global head dim of 256 and a layer's 512 become 16 and 32)."""
    if not _heterogeneous(config):
        return None
    per_layer = config.to_dict().get("per_layer_config") or {}
    kinds = list(dict.fromkeys(json.dumps(v, sort_keys=True) for v in per_layer.values()))[:max(layers - 1, 0)]
    out: dict[int, dict[str, Any]] = {}
    for n, kind in enumerate(kinds, start=1):
        scaled = {}
        for name, value in json.loads(kind).items():
            whole, mine = _get(config, name), small.get(name)
            if isinstance(value, int) and isinstance(whole, int) and whole and isinstance(mine, int):
                scaled[name] = max(1, round(mine * value / whole))
            elif not isinstance(value, int):
                scaled[name] = value
        out[n] = scaled
    return out


def _settable(config: Any, name: str) -> bool:
    """An attribute the config has that is a field of its own (not a derived,
    read-only property, nor an alias of one)."""
    name = getattr(type(config), "attribute_map", {}).get(name, name)
    prop = getattr(type(config), name, None)
    return _get(config, name) is not Ellipsis and not (isinstance(prop, property) and prop.fset is None)


def _canonical(config: Any, name: str) -> str:
    """The field an attribute name stands for (configs alias old names)."""
    return getattr(type(config), "attribute_map", {}).get(name, name)


def _put(out: dict[str, Any], config: Any, name: str, value: Any, when_none: bool = True) -> None:
    """``out[name] = value`` when ``config`` has ``name`` as an int (or unset);
    written under the field's own name, which the class derives others from."""
    if not _settable(config, name):
        return
    current = _get(config, name)
    name = _canonical(config, name)
    if isinstance(current, bool) or (current is None and not when_none):
        return
    if current is None or isinstance(current, int):
        out[name] = value


def _layer_list(values: list[Any], layers: int) -> list[Any]:
    """``layers`` entries holding every distinct entry of ``values`` (a hybrid
    model keeps one layer of each kind), more when there are more kinds."""
    kinds = list(dict.fromkeys(values))
    return (kinds + values)[:max(layers, len(kinds))]


def _small_kwargs(config: Any, depth: int = 0) -> dict[str, Any]:
    """The constructor arguments that make ``config`` (a default instance) small:
    every size attribute it has, at the small sizes. Passed to the constructor,
    so whatever the class derives from them (a head count, an attention width,
    per-layer lists) is derived from the small sizes."""
    out: dict[str, Any] = {}
    for size, names in ATTRIBUTES.items():
        for name in names:
            _put(out, config, name, SMALL[size],
                 when_none=size in ("kv_heads", "heads", "experts", "hidden", "experts_per_token"))
    for name in ("n_group", "topk_group"):  # grouped expert routing: one group
        _put(out, config, name, 1, when_none=False)
    hidden, heads = SMALL["hidden"], SMALL["heads"]
    _put(out, config, "head_dim", hidden // heads)
    _put(out, config, "swa_head_dim", hidden // heads, when_none=False)
    if hasattr(config, "qk_rope_head_dim"):  # multi-head latent attention (DeepSeek-style)
        for name, value in (("qk_rope_head_dim", 8), ("qk_nope_head_dim", 8), ("v_head_dim", hidden // heads),
                            ("qk_head_dim", 16), ("kv_lora_rank", 32), ("head_dim", 8), ("num_key_value_heads", heads)):
            _put(out, config, name, value)
        _put(out, config, "q_lora_rank", 32, when_none=False)
    _put(out, config, "rotary_dim", hidden // heads // 2, when_none=False)
    for name, value in (("index_n_heads", 2), ("index_num_heads", 2), ("index_head_dim", 16), ("index_topk", 16)):
        _put(out, config, name, value, when_none=False)  # sparse-attention indexers
    vocab = SMALL["vocab"]
    ids = [n for n in dir(config) if n.endswith(("_token_id", "_token_index")) and not n.startswith("_")]
    for name in dict.fromkeys([*TOKEN_IDS, *ids]):
        v = _get(config, name)
        if isinstance(v, int) and not isinstance(v, bool) and not 0 <= v < vocab and _settable(config, name):
            out[name] = min(2, vocab - 1)
        elif isinstance(v, list) and _settable(config, name):
            out[name] = [x if 0 <= x < vocab else min(2, vocab - 1) for x in v]
    layers = SMALL["layers"]
    for name in LAYER_LISTS:
        v = _get(config, name)
        if isinstance(v, (list, tuple)) and v and all(isinstance(x, str) for x in v) and _settable(config, name):
            name = _canonical(config, name)
            out[name] = _layer_list(list(v), layers)
            if len(out[name]) != layers:
                for attr in ATTRIBUTES["layers"]:
                    if attr in out:
                        out[attr] = len(out[name])
    if depth < 2:
        subs = list(SUB_CONFIGS)
        if not any(_settable(config, n) for n in ATTRIBUTES["layers"]):
            # Sizes that live only in sub-configs (a byte-latent model's patcher,
            # local encoder and decoder, and global transformer): shrink them all.
            subs += [n for n in getattr(type(config), "sub_configs", None) or {} if n not in subs]
        for sub in subs:
            child = _get(config, sub)
            if child is not None and hasattr(child, "to_dict") and _settable(config, sub):
                kw = _small_kwargs(child, depth + 1)
                per_layer = _small_per_layer(child, kw, SMALL["layers"])
                out[sub] = type(child)(**kw, **({} if per_layer is None else {"per_layer_config": per_layer}))
    return out


#: Sub-configs shrunk with their parent (a multimodal model's text model...).
SUB_CONFIGS = ("text_config", "vision_config", "audio_config", "decoder", "encoder", "attn_config", "ffn_config")


def small_config(model_type: str) -> Any:
    """The family's config class at the sweep's small sizes, as a decoder with
    a KV cache."""
    from transformers import AutoConfig

    default = AutoConfig.for_model(model_type)
    kwargs = {**_small_kwargs(default), **OVERRIDES.get(model_type, {}), "use_cache": True}
    per_layer = _small_per_layer(default, kwargs, SMALL["layers"])
    if per_layer is not None:
        kwargs["per_layer_config"] = per_layer
    kwargs = {k: v for k, v in kwargs.items() if v is not DROP}
    if hasattr(default, "is_decoder"):
        kwargs["is_decoder"] = True  # encoder families' causal-LM heads run as decoders only so
    return AutoConfig.for_model(model_type, **kwargs)
