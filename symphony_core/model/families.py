"""The architectures the engine runs, and how each one's checkpoint maps onto the one paged model.

Every supported family is a decoder of the same shape — norm, attention with RoPE, norm, gated MLP — and
differs only in switches the config and the weights carry: biases on Q/K/V, per-head q/k norms, Gemma's
(1 + w) norms around both sublayers and its scaled embeddings, GeGLU, soft-capped logits, sliding windows
per layer, partial or scaled RoPE. `ModelConfig.from_hf` reads the switches; `layer_tensors` renames a
checkpoint's tensors to the names `PagedLlama` takes, fusing Q/K/V and gate/up where the checkpoint
keeps them apart. To add a family: its model_type in `FAMILIES`, its config keys in config.py if it
brings a new switch, and its tensor names here (docs/models.md walks through it).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..errors import ModelError


@dataclass(frozen=True)
class Family:
    name: str  # as docs and `symphony models` show it
    examples: str
    gemma_norms: bool = False  # (1 + w) norms, post-sublayer norms, scaled embeddings
    fused_checkpoint: bool = False  # qkv_proj / gate_up_proj stored fused (Phi-3)


FAMILIES: dict[str, Family] = {
    "llama": Family("Llama", "Llama 3.1 / 3.2 / 3.3, SmolLM2, TinyLlama"),
    "mistral": Family("Mistral", "Mistral 7B v0.1-v0.3, Ministral (sliding window where the config sets one)"),
    "qwen2": Family("Qwen2", "Qwen2, Qwen2.5 and Qwen2.5-Coder"),
    "qwen3": Family("Qwen3", "Qwen3 dense models"),
    "gemma3_text": Family("Gemma 3", "Gemma 3 1B, and the text part of the larger Gemma 3", gemma_norms=True),
    "phi3": Family("Phi-3", "Phi-3 / Phi-3.5 mini, Phi-4-mini", fused_checkpoint=True),
}
# model_types whose checkpoint wraps a supported text model: (the text family, the prefix of its tensors)
WRAPPED: dict[str, tuple[str, str]] = {"gemma3": ("gemma3_text", "model.language_model.")}


def supported_list() -> str:
    return ", ".join(sorted([*FAMILIES, *WRAPPED]))


def text_config(config: dict, source: str = "model") -> tuple[dict, str]:
    """The config of the decoder to run and its family's model_type; a clear error for any other architecture."""
    kind = config.get("model_type")
    if kind in WRAPPED:
        inner, _ = WRAPPED[kind]
        text = dict(config.get("text_config") or {})
        text.setdefault("model_type", inner)
        for key in ("eos_token_id", "bos_token_id"):
            if key not in text and key in config:
                text[key] = config[key]
        return text, inner
    if kind not in FAMILIES:
        raise ModelError(
            f"{source}: model_type {kind!r} is not supported; supported architectures: {supported_list()} "
            "(docs/models.md says how to add one)"
        )
    return config, kind


def strip_wrapper(config: dict, weights: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A wrapped checkpoint's text-model tensors under the plain names (the vision tower dropped)."""
    kind = config.get("model_type")
    if kind not in WRAPPED:
        return weights
    prefix = WRAPPED[kind][1]
    out = {"model." + k[len(prefix) :]: v for k, v in weights.items() if k.startswith(prefix)}
    if "lm_head.weight" in weights:
        out["lm_head.weight"] = weights["lm_head.weight"]
    return out


def _opt(w: dict, key: str) -> torch.Tensor | None:
    return w.get(key)


def layer_tensors(family: str, w: dict[str, torch.Tensor], i: int) -> dict[str, torch.Tensor | None]:
    """Layer i's tensors under PagedLlama's names. Fused Q/K/V ([q + k + v, hidden]) and gate/up
    ([2 * intermediate, hidden]); norms as the checkpoint stores them (Gemma's (1 + w) is applied by the caller)."""
    p = f"model.layers.{i}."
    fam = FAMILIES[family]
    try:
        if fam.fused_checkpoint:
            wqkv = w[p + "self_attn.qkv_proj.weight"]
            gate_up = w[p + "mlp.gate_up_proj.weight"]
            bqkv = _opt(w, p + "self_attn.qkv_proj.bias")
        else:
            q, k, v = (w[p + f"self_attn.{n}_proj.weight"] for n in "qkv")
            wqkv = torch.cat([q, k, v])
            gate_up = torch.cat([w[p + "mlp.gate_proj.weight"], w[p + "mlp.up_proj.weight"]])
            biases = [b for n in "qkv" if (b := _opt(w, p + f"self_attn.{n}_proj.bias")) is not None]
            bqkv = torch.cat(biases) if len(biases) == 3 else None
        out: dict[str, torch.Tensor | None] = {
            "attn_norm": w[p + "input_layernorm.weight"],
            "wqkv": wqkv.contiguous(),
            "bqkv": bqkv,
            "wo": w[p + "self_attn.o_proj.weight"].contiguous(),
            "bo": _opt(w, p + "self_attn.o_proj.bias"),
            "w_gate_up": gate_up.contiguous(),
            "w_down": w[p + "mlp.down_proj.weight"].contiguous(),
            "q_norm": _opt(w, p + "self_attn.q_norm.weight"),
            "k_norm": _opt(w, p + "self_attn.k_norm.weight"),
        }
        if fam.gemma_norms:  # Gemma's names: norms after each sublayer, and one before the MLP
            out["post_attn_norm"] = w[p + "post_attention_layernorm.weight"]
            out["mlp_norm"] = w[p + "pre_feedforward_layernorm.weight"]
            out["post_mlp_norm"] = w[p + "post_feedforward_layernorm.weight"]
        else:
            out["post_attn_norm"] = out["post_mlp_norm"] = None
            out["mlp_norm"] = w[p + "post_attention_layernorm.weight"]
    except KeyError as e:
        raise ModelError(
            f"layer {i}: the checkpoint has no tensor {e.args[0]!r} ({FAMILIES[family].name} expects it)"
        ) from None
    extra = [k for k in (p + "mlp.down_proj.bias", p + "mlp.gate_proj.bias", p + "mlp.gate_up_proj.bias") if k in w]
    if extra:
        raise ModelError(f"layer {i}: MLP biases ({extra[0]}) are not supported")
    return out
