"""The numbers and switches of a supported config that the forward pass needs (families.py lists them)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ..errors import ModelError
from .families import FAMILIES, text_config
from .rope import RopeTable, rope_kind, rope_table, rotary_dim

GELU_TANH = ("gelu_pytorch_tanh", "gelu_tanh", "gelu_new")


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
    family: str = "llama"  # a model_type of families.FAMILIES
    # RoPE: one table per name in `layer_rope` (Gemma 3's local and global layers differ); `rotary_dim` < head_dim
    # rotates only the first dims of each head (partial rotary).
    rope: dict[str, RopeTable] = field(default_factory=dict)
    layer_rope: list[str] = field(default_factory=list)
    rotary_dim: int = 0
    layer_windows: list[int | None] = field(default_factory=list)  # a layer's sliding window (keys it sees), or None
    hidden_act: str = "silu"  # or "gelu_tanh" (Gemma's GeGLU)
    gemma_norms: bool = False  # (1 + w) norms, norms after each sublayer, embeddings scaled by sqrt(hidden)
    query_scale: float = 0.0  # the softmax's scale; 0: head_dim ** -0.5
    final_softcap: float | None = None  # logits = cap * tanh(logits / cap)

    def __post_init__(self) -> None:
        if not self.layer_rope:
            self.layer_rope = ["default"] * self.n_layers
        if not self.layer_windows:
            self.layer_windows = [None] * self.n_layers
        if not self.rotary_dim:
            self.rotary_dim = self.head_dim
        if not self.query_scale:
            self.query_scale = self.head_dim**-0.5

    @property
    def plain(self) -> bool:
        """Llama's own layer: what the fused compiled decode stack computes (fused_decode.py)."""
        return (
            not self.gemma_norms
            and self.hidden_act == "silu"
            and self.final_softcap is None
            and self.rotary_dim == self.head_dim
            and all(w is None for w in self.layer_windows)
            and len(set(self.layer_rope)) == 1
            and math.isclose(self.query_scale, self.head_dim**-0.5, rel_tol=1e-12)
        )

    @property
    def windows(self) -> set[int]:
        return {w for w in self.layer_windows if w is not None}

    @classmethod
    def from_hf(cls, config: dict) -> ModelConfig:
        d, family = text_config(config)
        eos = d.get("eos_token_id")
        heads = d["num_attention_heads"]
        head_dim = d.get("head_dim") or d["hidden_size"] // heads
        n_layers = d["num_hidden_layers"]
        layer_types = _layer_types(d, family, n_layers)
        per_type = family == "gemma3_text"  # Gemma 3's rope parameters are given per layer type
        names = layer_types if per_type else ["default"] * n_layers
        rope = {name: rope_table(d, head_dim, name if per_type else None) for name in set(names)}
        act = d.get("hidden_activation") or d.get("hidden_act") or "silu"
        if act not in ("silu", *GELU_TANH):
            raise ModelError(f"hidden activation {act!r} is not supported (silu, gelu_pytorch_tanh)")
        window = d.get("sliding_window")
        if d.get("attn_logit_softcapping"):
            raise ModelError("attention logit soft-capping (Gemma 2) is not supported")
        gemma = FAMILIES[family].gemma_norms
        scalar = d.get("query_pre_attn_scalar") if gemma else None
        return cls(
            vocab_size=d["vocab_size"],
            hidden_size=d["hidden_size"],
            n_layers=n_layers,
            n_heads=heads,
            n_kv_heads=d.get("num_key_value_heads") or heads,
            head_dim=head_dim,
            intermediate_size=d["intermediate_size"],
            rms_eps=d.get("rms_norm_eps", 1e-6),
            max_positions=d.get("max_position_embeddings", 2048),
            tie_embeddings=bool(d.get("tie_word_embeddings", gemma)),
            bos_token_id=d.get("bos_token_id"),
            eos_token_ids=[] if eos is None else ([eos] if isinstance(eos, int) else list(eos)),
            family=family,
            rope=rope,
            layer_rope=names,
            rotary_dim=rotary_dim(d, head_dim),
            layer_windows=[window if t == "sliding_attention" and window else None for t in layer_types],
            hidden_act="silu" if act == "silu" else "gelu_tanh",
            gemma_norms=gemma,
            query_scale=scalar**-0.5 if scalar else head_dim**-0.5,
            final_softcap=d.get("final_logit_softcapping") or None,
        )


def _layer_types(d: dict, family: str, n_layers: int) -> list[str]:
    """Each layer's "sliding_attention" or "full_attention", as transformers decides it for the family."""
    if d.get("layer_types"):
        return list(d["layer_types"])[:n_layers]
    window = d.get("sliding_window")
    if family in ("mistral", "phi3"):  # a window, where the config sets one, applies to every layer
        kind = "sliding_attention" if window else "full_attention"
        return [kind] * n_layers
    if family in ("qwen2", "qwen3"):
        start = d.get("max_window_layers", n_layers)
        use = bool(d.get("use_sliding_window")) and window
        return ["sliding_attention" if use and i >= start else "full_attention" for i in range(n_layers)]
    if family == "gemma3_text":
        pattern = d.get("sliding_window_pattern", 6)
        return ["full_attention" if (i + 1) % pattern == 0 else "sliding_attention" for i in range(n_layers)]
    return ["full_attention"] * n_layers


__all__ = ["ModelConfig", "RopeTable", "rope_kind"]
