"""A GGUF's own metadata read into the Hugging Face config of its family, every switch included.

transformers' GGUF reader (5.x) maps only part of each architecture's keys: it drops a head size other than
hidden / heads (Qwen3-0.6B's), Llama 3's RoPE scaling (llama.cpp keeps it as a `rope_freqs` tensor), Phi-3's
longrope factors and partial rotary, Gemma 3's attention scale, soft-capping and RoPE scaling, and it reads
Mistral as Llama. A conversion that lost one would compute the wrong thing silently, so the converter hands
transformers this config instead (its tensors load into it unchanged). llama.cpp's keys, by architecture:
`{arch}.attention.key_length`, `.rope.dimension_count`, `.rope.freq_base[_swa]`, `.rope.scaling.*`,
`.attention.sliding_window[_pattern]`, `.final_logit_softcapping`, `.attention.scale`.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ModelError

MODEL_TYPES = {"llama": "llama", "qwen2": "qwen2", "qwen3": "qwen3", "gemma3": "gemma3_text", "phi3": "phi3"}
ARCHITECTURES = {
    "llama": "LlamaForCausalLM",
    "mistral": "MistralForCausalLM",
    "qwen2": "Qwen2ForCausalLM",
    "qwen3": "Qwen3ForCausalLM",
    "gemma3_text": "Gemma3ForCausalLM",
    "phi3": "Phi3ForCausalLM",
}


def _value(field) -> Any:
    return field.contents()


def config_from_gguf(path: Path) -> dict:
    """The config.json a Hugging Face checkpoint of this file would carry (its family's keys)."""
    from gguf import GGUFReader

    reader = GGUFReader(str(path))
    fields = {
        k: _value(f) for k, f in reader.fields.items() if not k.startswith("tokenizer.ggml.") or k.endswith("_id")
    }
    arch = fields.get("general.architecture")
    if arch not in MODEL_TYPES:
        raise ModelError(f"{path.name}: GGUF architecture {arch!r} is not supported ({', '.join(MODEL_TYPES)})")
    tensors = {t.name: t for t in reader.tensors}

    def get(key: str, default=None):
        return fields.get(f"{arch}.{key}", default)

    hidden, heads = int(get("embedding_length")), int(get("attention.head_count"))
    head_dim = int(get("attention.key_length") or hidden // heads)
    window = int(get("attention.sliding_window") or 0) or None
    model_type = MODEL_TYPES[arch]
    if arch == "llama" and window:  # llama.cpp writes Mistral as Llama; its window says which it was
        model_type = "mistral"
    eps = float(np.float32(get("attention.layer_norm_rms_epsilon", 1e-6)))
    cfg: dict[str, Any] = {
        "model_type": model_type,
        "architectures": [ARCHITECTURES[model_type]],
        "hidden_size": hidden,
        "intermediate_size": int(get("feed_forward_length")),
        "num_hidden_layers": int(get("block_count")),
        "num_attention_heads": heads,
        "num_key_value_heads": int(get("attention.head_count_kv") or heads),
        "head_dim": head_dim,
        "rms_norm_eps": float(f"{eps:.6g}"),  # fp32 in the file: 1e-06, not 9.99999997e-07
        "max_position_embeddings": int(get("context_length", 2048)),
        "vocab_size": int(get("vocab_size") or len(reader.fields["tokenizer.ggml.tokens"].data)),
        "tie_word_embeddings": "output.weight" not in tensors,
        "bos_token_id": fields.get("tokenizer.ggml.bos_token_id"),
        "eos_token_id": fields.get("tokenizer.ggml.eos_token_id"),
        "pad_token_id": fields.get("tokenizer.ggml.padding_token_id"),
        "sliding_window": window,
        "rope_parameters": _rope(arch, get, tensors, head_dim),
    }
    if arch == "gemma3":
        pattern = get("attention.sliding_window_pattern")
        layers = cfg["num_hidden_layers"]
        cfg["layer_types"] = [
            "sliding_attention" if (pattern[i] if pattern else (i + 1) % 6) else "full_attention" for i in range(layers)
        ]
        scale = get("attention.scale")
        cfg["query_pre_attn_scalar"] = round(float(scale) ** -2) if scale else head_dim
        cfg["final_logit_softcapping"] = get("final_logit_softcapping")
        cfg["hidden_activation"] = "gelu_pytorch_tanh"
    if arch == "qwen2" and window:
        cfg["use_sliding_window"] = True
    return cfg


def _rope(arch: str, get, tensors: dict, head_dim: int) -> dict:
    theta = float(get("rope.freq_base", 10000.0))
    rot = int(get("rope.dimension_count") or head_dim)
    base: dict[str, Any] = {"rope_type": "default", "rope_theta": theta}
    if rot != head_dim:
        base["partial_rotary_factor"] = rot / head_dim
    kind = get("rope.scaling.type")
    factor = get("rope.scaling.factor")
    original = get("rope.scaling.original_context_length")
    if "rope_factors_long.weight" in tensors:  # Phi-3's longrope
        base.update(
            rope_type="longrope",
            long_factor=[float(x) for x in np.asarray(tensors["rope_factors_long.weight"].data)],
            short_factor=[float(x) for x in np.asarray(tensors["rope_factors_short.weight"].data)],
            original_max_position_embeddings=int(original),
        )
        if get("rope.scaling.attn_factor") is not None:
            base["attention_factor"] = float(get("rope.scaling.attn_factor"))
    elif "rope_freqs.weight" in tensors:  # Llama 3's scaling, kept by llama.cpp as the divisors it yields
        base.update(_llama3_params(np.asarray(tensors["rope_freqs.weight"].data, dtype=np.float64), theta, rot))
    elif kind in ("linear", "yarn"):
        base.update(rope_type=kind, factor=float(factor))
        if kind == "yarn" and original:
            base["original_max_position_embeddings"] = int(original)
    if arch != "gemma3":
        return base
    local = {"rope_type": "default", "rope_theta": float(get("rope.freq_base_swa", 10000.0))}
    return {"full_attention": base, "sliding_attention": local}


# Llama 3's (low, high) frequency factors (3.1 and 3.2 alike; their factor is the largest divisor, their original
# context is searched over powers of two).
_LLAMA3_FREQ_FACTORS = ((1.0, 4.0),)


def _llama3_params(divisors: np.ndarray, theta: float, rot: int) -> dict:
    """The llama3 rope parameters that yield these per-pair divisors (llama.cpp's `rope_freqs`), else an error."""
    factor = float(divisors.max())
    inv = 1.0 / theta ** (np.arange(0, rot, 2, dtype=np.float64) / rot)
    wavelen = 2 * math.pi / inv
    for low, high in _LLAMA3_FREQ_FACTORS:
        for exp in range(4, 21):
            original = 2**exp
            smooth = np.clip((original / wavelen - low) / (high - low), 0.0, 1.0)
            want = 1.0 / ((1 - smooth) / factor + smooth)
            if np.allclose(want, divisors, rtol=1e-5, atol=1e-6):
                return {
                    "rope_type": "llama3",
                    "factor": factor,
                    "low_freq_factor": low,
                    "high_freq_factor": high,
                    "original_max_position_embeddings": original,
                }
    raise ModelError(
        "the GGUF's rope_freqs are not a Llama 3 scaling this loader can name (low/high frequency factors 1 and 4); "
        "load the model's Hugging Face directory instead"
    )
