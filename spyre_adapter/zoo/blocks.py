"""Models for the main job, built from torch.nn modules with random weights.

``llama-block``: one Llama-3-style decoder layer (RMSNorm, grouped-query
attention with rotary embeddings and a causal mask, SwiGLU MLP, residuals).
``granite-block``: the Granite-3.3 variant (attention, residual and embedding
multipliers). ``llama-tiny``: embedding, two decoder layers, final norm and LM
head. Sizes are scaled down from the 8B models (same structure, smaller widths)
so the emulated run takes seconds; ``--hidden`` etc. scale them up.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from spyre_adapter.zoo.config import ModelConfig

__all__ = ["ModelConfig", "build", "MODELS", "example_inputs"]


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x32.to(dtype)


def rope_tables(cfg: ModelConfig, device: torch.device | str = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
    """cos/sin tables of shape (seq, head_dim)."""
    inv = 1.0 / (cfg.rope_theta ** (torch.arange(0, cfg.head_dim, 2, dtype=torch.float32) / cfg.head_dim))
    t = torch.arange(cfg.seq, dtype=torch.float32)
    freqs = torch.outer(t, inv)
    emb = torch.cat([freqs, freqs], -1)
    return emb.cos().to(device), emb.sin().to(device)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    h = x.shape[-1] // 2
    return torch.cat([-x[..., h:], x[..., :h]], -1)


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.cfg = cfg
        d, hd = cfg.hidden, cfg.head_dim
        self.q_proj = nn.Linear(d, cfg.heads * hd, bias=False)
        self.k_proj = nn.Linear(d, cfg.kv_heads * hd, bias=False)
        self.v_proj = nn.Linear(d, cfg.kv_heads * hd, bias=False)
        self.o_proj = nn.Linear(cfg.heads * hd, d, bias=False)
        self.scale = cfg.attention_multiplier if cfg.attention_multiplier is not None else 1.0 / math.sqrt(hd)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        cfg = self.cfg
        b, s, _ = x.shape
        q = self.q_proj(x).view(b, s, cfg.heads, cfg.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(b, s, cfg.kv_heads, cfg.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, s, cfg.kv_heads, cfg.head_dim).transpose(1, 2)
        cos, sin = cos.to(q.dtype), sin.to(q.dtype)
        q = q * cos + _rotate_half(q) * sin
        k = k * cos + _rotate_half(k) * sin
        rep = cfg.heads // cfg.kv_heads
        k = k.repeat_interleave(rep, dim=1)
        v = v.repeat_interleave(rep, dim=1)
        # Causal attention as Hugging Face's "sdpa" implementation calls it.
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=self.scale)
        out = out.transpose(1, 2).reshape(b, s, cfg.heads * cfg.head_dim)
        return self.o_proj(out)


class MLP(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(cfg.hidden, cfg.intermediate, bias=False)
        self.up_proj = nn.Linear(cfg.hidden, cfg.intermediate, bias=False)
        self.down_proj = nn.Linear(cfg.intermediate, cfg.hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(nn.functional.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderBlock(nn.Module):
    """One Llama/Granite decoder layer."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.input_layernorm = RMSNorm(cfg.hidden, cfg.eps)
        self.self_attn = Attention(cfg)
        self.post_attention_layernorm = RMSNorm(cfg.hidden, cfg.eps)
        self.mlp = MLP(cfg)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        r = self.cfg.residual_multiplier
        x = x + self.self_attn(self.input_layernorm(x), cos, sin) * r
        return x + self.mlp(self.post_attention_layernorm(x)) * r


#: torch.compiler.nested_compile_region (PyTorch's hierarchical compilation), where the release has it.
_nested_compile_region = getattr(torch.compiler, "nested_compile_region", None)


class RegionDecoderBlock(DecoderBlock):
    """A decoder layer marked as a nested compile region: under a whole-graph
    ``torch.compile`` Dynamo traces the first call, Inductor lowers it once, and
    every layer calls that subgraph (the mark is on the class, so all layers
    share one region; their weights are the region's inputs)."""

    if _nested_compile_region is not None:
        forward = _nested_compile_region(DecoderBlock.forward)


class BlockModel(nn.Module):
    """A decoder block with its rotary tables as buffers (input: hidden states)."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.block = DecoderBlock(cfg)
        cos, sin = rope_tables(cfg)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.block(x, self.cos, self.sin)


class TinyLM(nn.Module):
    """Embedding, decoder layers, final norm, LM head (input: token ids)."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.embed_tokens = nn.Embedding(cfg.vocab, cfg.hidden)
        if cfg.nested_regions and _nested_compile_region is None:
            raise ValueError(f"nested_regions: torch {torch.__version__} has no torch.compiler.nested_compile_region")
        layer = RegionDecoderBlock if cfg.nested_regions else DecoderBlock
        self.layers = nn.ModuleList(layer(cfg) for _ in range(cfg.layers))
        self.norm = RMSNorm(cfg.hidden, cfg.eps)
        self.lm_head = nn.Linear(cfg.hidden, cfg.vocab, bias=False)
        cos, sin = rope_tables(cfg)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.embed_tokens(ids) * self.cfg.embedding_multiplier
        for layer in self.layers:
            x = layer(x, self.cos, self.sin)
        return self.lm_head(self.norm(x))


def _granite(cfg: ModelConfig) -> ModelConfig:
    # granite-3.3-8b-instruct: attention_multiplier 0.0078125, residual 0.22, embedding 12.0
    return dataclasses.replace(cfg, attention_multiplier=0.0078125, residual_multiplier=0.22,
                               embedding_multiplier=12.0, rope_theta=10000000.0)


MODELS: dict[str, Callable[[ModelConfig], nn.Module]] = {
    "llama-block": BlockModel,
    "granite-block": lambda cfg: BlockModel(_granite(cfg)),
    "llama-tiny": TinyLM,
    "granite-tiny": lambda cfg: TinyLM(_granite(cfg)),
    "mlp": lambda cfg: MLP(cfg),
}


def build(name: str, cfg: ModelConfig, dtype: torch.dtype = torch.float16, seed: int = 0) -> nn.Module:
    """A model by name with deterministic random weights, in eval mode."""
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r}; choose from {', '.join(MODELS)}")
    torch.manual_seed(seed)
    model = MODELS[name](cfg)
    for p in model.parameters():
        with torch.no_grad():
            if p.dim() >= 2:
                p.normal_(0.0, 0.02)
    return model.to(dtype).eval()


def example_inputs(name: str, cfg: ModelConfig, dtype: torch.dtype = torch.float16, seed: int = 1) -> torch.Tensor:
    """The input a model takes: token ids for ``*-tiny``, hidden states otherwise."""
    g = torch.Generator().manual_seed(seed)
    if name.endswith("-tiny"):
        return torch.randint(0, cfg.vocab, (cfg.batch, cfg.seq), generator=g)
    return torch.randn(cfg.batch, cfg.seq, cfg.hidden, generator=g).to(dtype)
