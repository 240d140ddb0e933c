"""Model shapes and the models ``spyre-adapter run`` builds, without torch: the
command line checks sizes against this before anything is imported.

:mod:`spyre_adapter.zoo.blocks` builds the modules; ``tests/adapter/cli/test_validation.py``
checks that both list the same models.
"""

from __future__ import annotations

import argparse
import dataclasses

__all__ = ["ModelConfig", "MODEL_SIZES", "BLOCK_SIZES", "SIZE_LIMITS", "HF_FAMILIES", "HF_SIZES", "TP_FAMILIES",
           "TP_SIZES", "is_hf", "sizes_of"]


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """Shape of a decoder model (Llama-3.1-8B: hidden 4096, 32 heads, 8 KV heads,
    intermediate 14336)."""

    hidden: int = 512
    heads: int = 8
    kv_heads: int = 2
    intermediate: int = 1408
    seq: int = 64
    batch: int = 1
    vocab: int = 2048
    layers: int = 2
    rope_theta: float = 500000.0
    eps: float = 1e-5
    # Granite multipliers (1.0 = Llama)
    attention_multiplier: float | None = None
    residual_multiplier: float = 1.0
    embedding_multiplier: float = 1.0
    #: whole models: each decoder layer marked as a nested compile region
    #: (``torch.compiler.nested_compile_region``): a whole-graph compile traces and
    #: lowers one layer and calls it for every layer
    nested_regions: bool = False

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads


#: The sizes a decoder block uses (``--layers`` only applies to whole models).
BLOCK_SIZES = frozenset({"hidden", "heads", "kv_heads", "intermediate", "seq", "batch"})
#: Model name -> the ModelConfig sizes it uses; any other size option is an error.
MODEL_SIZES: dict[str, frozenset[str]] = {
    "llama-block": BLOCK_SIZES,
    "granite-block": BLOCK_SIZES,
    "llama-tiny": BLOCK_SIZES | {"layers"},
    "granite-tiny": BLOCK_SIZES | {"layers"},
    "mlp": frozenset({"hidden", "intermediate", "seq", "batch"}),
}
#: transformers families ``--model hf:<family>`` builds (spyre_adapter.zoo.hf.FAMILIES).
HF_FAMILIES = ("llama", "qwen2", "granite", "mistral", "gemma3", "mixtral")
#: The sizes a transformers model takes (over its config's).
HF_SIZES = frozenset({"hidden", "heads", "kv_heads", "intermediate", "batch", "layers", "vocab", "experts"})
#: Families whose decoder layers the tensor-parallel plan knows (spyre_adapter.zoo.tp), and the sizes it takes.
TP_FAMILIES = ("llama", "granite", "mistral", "qwen2")
TP_SIZES = ("hidden", "heads", "kv_heads", "intermediate", "layers", "vocab")
for _family in HF_FAMILIES:
    MODEL_SIZES[f"hf:{_family}"] = HF_SIZES
del _family

#: Accepted range of each size (the 8B models are inside; the emulator runs on a CPU).
SIZE_LIMITS: dict[str, tuple[int, int]] = {
    "hidden": (1, 16384), "heads": (1, 256), "kv_heads": (1, 256), "intermediate": (1, 65536),
    "seq": (1, 32768), "batch": (1, 1024), "layers": (1, 128), "vocab": (2, 1 << 20), "experts": (1, 256),
}


def is_hf(args: argparse.Namespace) -> bool:
    """A transformers run (``--model hf:<family>`` or ``--hf-config``)."""
    return bool(args.model.startswith("hf:") or args.hf_config is not None)


def sizes_of(args: argparse.Namespace) -> dict[str, int]:
    """The size options the user gave, by ModelConfig field (``args.<field>``)."""
    return {f: getattr(args, f) for f in SIZE_LIMITS if getattr(args, f, None) is not None}
