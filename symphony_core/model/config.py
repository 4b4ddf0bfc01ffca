"""The few numbers of a Llama-family config that the forward pass needs, plus its RoPE table."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class ModelConfig:
    vocab_size: int
    hidden_size: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    intermediate_size: int
    rms_eps: float
    max_positions: int
    tie_embeddings: bool
    bos_token_id: int | None
    eos_token_ids: list[int]
    inv_freq: torch.Tensor
    rope_scaling: float

    @classmethod
    def from_hf(cls, d: dict) -> ModelConfig:
        eos = d.get("eos_token_id")
        heads = d["num_attention_heads"]
        head_dim = d.get("head_dim") or d["hidden_size"] // heads
        inv_freq, scaling = _rope_tables(d, head_dim)
        return cls(
            vocab_size=d["vocab_size"],
            hidden_size=d["hidden_size"],
            n_layers=d["num_hidden_layers"],
            n_heads=heads,
            n_kv_heads=d.get("num_key_value_heads") or heads,
            head_dim=head_dim,
            intermediate_size=d["intermediate_size"],
            rms_eps=d.get("rms_norm_eps", 1e-6),
            max_positions=d.get("max_position_embeddings", 2048),
            tie_embeddings=bool(d.get("tie_word_embeddings", False)),
            bos_token_id=d.get("bos_token_id"),
            eos_token_ids=[] if eos is None else ([eos] if isinstance(eos, int) else list(eos)),
            inv_freq=inv_freq,
            rope_scaling=scaling,
        )


def _rope_tables(d: dict, head_dim: int) -> tuple[torch.Tensor, float]:
    """Inverse frequencies and the cos/sin scale for this config's RoPE."""
    params = d.get("rope_parameters") or d.get("rope_scaling") or {}
    kind = params.get("rope_type", params.get("type", "default"))
    theta = params.get("rope_theta", d.get("rope_theta", 10000.0))
    if kind == "default":
        return 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)), 1.0
    # Scaled variants (llama3, yarn, linear, dynamic, longrope): transformers knows them all.
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    rope = LlamaRotaryEmbedding(LlamaConfig(**{k: v for k, v in d.items() if k not in ("architectures", "model_type")}))
    return rope.inv_freq.detach().float().clone(), float(rope.attention_scaling)
