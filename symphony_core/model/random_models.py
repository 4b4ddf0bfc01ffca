"""Random-weight models of each supported family, made with transformers' own config and model classes.

As vLLM's and transformers' tests do: a tiny model of each family with the family's quirks switched on
(QUIRKS names them), saved as a Hugging Face directory (config.json, safetensors, generation_config.json,
tokenizer.json, tokenizer_config.json with the family's chat template). size="0.5b" and "1b" give real
models' shapes (Qwen2.5-0.5B, Llama-3.2-1B) for benches and GPU checks.

    python -m symphony_core.model.random_models FAMILY OUT_DIR [--size tiny|0.5b|1b] [--gguf QTYPE]

The weights are drawn wide (initializer_range 0.08) so that greedy picks are far from ties, and every norm
weight and bias is drawn too (transformers starts them at ones / zeros, which would hide a wrong norm
convention or a dropped bias).
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

import torch

from symphony_core.model.random_tokenizer import save_tokenizer, special_ids, train_tokenizer

FAMILIES: tuple[str, ...] = ("llama", "qwen2", "qwen3", "mistral", "gemma3", "phi3")

SIZES: tuple[str, ...] = ("tiny", "0.5b", "1b")

SLIDING_WINDOW = 24  # tokens, for Mistral and Gemma 3's local layers: shorter than any test's context

QUIRKS: dict[str, tuple[str, ...]] = {
    "llama": (
        "llama3 rope scaling (factor 8, original context 64)",
        "GQA (4 query heads, 2 kv heads)",
        "untied head",
        "head_dim 48 (4 heads x 48 = 192 != hidden 160)",
        "several eos ids (<|end_of_text|>, <|eom_id|>, <|eot_id|>)",
    ),
    "qwen2": (
        "fused-qkv bias (q/k/v biases)",
        "tied head",
        "MQA (7 query heads, 1 kv head)",
        "padded vocab (config vocab_size 576 > tokenizer size 572; the extra rows are zero)",
    ),
    "qwen3": (
        "per-head q/k RMSNorm",
        "GQA (4 query heads, 2 kv heads)",
        "head_dim 80 != hidden/heads (128/4)",
        "tied head",
    ),
    "mistral": (
        f"sliding window {SLIDING_WINDOW} tokens < test context",
        "GQA (6 query heads, 2 kv heads)",
        "intermediate 264, not a multiple of 32 (a Q8_0/Q4_1 GGUF keeps ffn_down in F16)",
        "untied head",
    ),
    "gemma3": (
        f"alternating local/global layers (window {SLIDING_WINDOW}; the real 5:1 pattern: layers 0-4 local, 5 global)",
        "(1+w) norms",
        "scaled embeddings (sqrt(hidden))",
        "GeGLU (gelu_pytorch_tanh)",
        "q/k norm",
        "query_pre_attn_scalar 64 != head_dim 48 (and 4 heads x 48 != hidden 96)",
        "final-logit soft-capping",
        "linear rope scaling on global layers (factor 8, theta 1e6)",
        "local rope base (10000 on sliding layers)",
        "sandwich norms (pre/post attention and feed-forward)",
        "tied head",
    ),
    "phi3": (
        "fused qkv/gate_up checkpoints (qkv_proj, gate_up_proj)",
        "longrope (short/long factors; attention factor from max/original context; long factors past 4096 tokens)",
        "partial rotary 0.75 (60 of head_dim 80)",
        "GQA (2 query heads, 1 kv head)",
        "untied head",
    ),
}

_FINAL_NORM_GAIN = 2.0

_GEMMA3_LAYERS = ("sliding_attention",) * 5 + ("full_attention",)  # llama.cpp assumes this 5:1 pattern


def _longrope_factors(n: int, top: float) -> list[float]:
    return [round(1.0 + (top - 1.0) * (i / max(n - 1, 1)) ** 2, 4) for i in range(n)]


def _tiny_config(family: str, vocab: int) -> dict[str, Any]:
    """The family's tiny config: 2-3 layers (Gemma 3: 6, its real 5:1 local/global pattern), hidden <= 256, odd head
    and intermediate sizes (multiples of 32, so that Q8_0/Q4_1 blocks fit, except Mistral's intermediate 264)."""
    common: dict[str, Any] = {"initializer_range": 0.08, "rms_norm_eps": 1e-6, "max_position_embeddings": 4096}
    if family == "llama":
        return common | {
            "model_type": "llama",
            "architectures": ["LlamaForCausalLM"],
            "vocab_size": vocab,
            "hidden_size": 160,
            "intermediate_size": 352,
            "num_hidden_layers": 3,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "head_dim": 48,
            "tie_word_embeddings": False,
            "rms_norm_eps": 1e-5,
            "max_position_embeddings": 512,
            "rope_parameters": {
                "rope_type": "llama3",
                "rope_theta": 500000.0,
                "factor": 8.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 64,
            },
        }
    if family == "qwen2":
        return common | {
            "model_type": "qwen2",
            "architectures": ["Qwen2ForCausalLM"],
            "vocab_size": -(-vocab // 64) * 64,
            "hidden_size": 224,
            "intermediate_size": 288,
            "num_hidden_layers": 2,
            "num_attention_heads": 7,
            "num_key_value_heads": 1,
            "tie_word_embeddings": True,
            "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0},
            "use_sliding_window": False,
            "sliding_window": None,
        }
    if family == "qwen3":
        return common | {
            "model_type": "qwen3",
            "architectures": ["Qwen3ForCausalLM"],
            "vocab_size": vocab,
            "hidden_size": 128,
            "intermediate_size": 352,
            "num_hidden_layers": 3,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "head_dim": 80,
            "tie_word_embeddings": True,
            "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0},
            "use_sliding_window": False,
            "sliding_window": None,
        }
    if family == "mistral":
        return common | {
            "model_type": "mistral",
            "architectures": ["MistralForCausalLM"],
            "vocab_size": vocab,
            "hidden_size": 192,
            "intermediate_size": 264,
            "num_hidden_layers": 3,
            "num_attention_heads": 6,
            "num_key_value_heads": 2,
            "head_dim": 32,
            "tie_word_embeddings": False,
            "rms_norm_eps": 1e-5,
            "sliding_window": SLIDING_WINDOW,
            "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0},
        }
    if family == "gemma3":
        return common | {
            "model_type": "gemma3_text",
            "architectures": ["Gemma3ForCausalLM"],
            "vocab_size": vocab,
            "hidden_size": 96,
            "intermediate_size": 224,
            "num_hidden_layers": 6,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "head_dim": 48,
            "tie_word_embeddings": True,
            "hidden_activation": "gelu_pytorch_tanh",
            "query_pre_attn_scalar": 64,
            "sliding_window": SLIDING_WINDOW,
            "layer_types": list(_GEMMA3_LAYERS),
            "final_logit_softcapping": 12.0,
            "attn_logit_softcapping": None,
            "rope_parameters": {
                "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1000000.0},
                "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
            },
        }
    if family == "phi3":
        head_dim, rotary = 80, 60
        return common | {
            "model_type": "phi3",
            "architectures": ["Phi3ForCausalLM"],
            "vocab_size": vocab,
            "hidden_size": 160,
            "intermediate_size": 288,
            "num_hidden_layers": 3,
            "num_attention_heads": 2,
            "num_key_value_heads": 1,
            "tie_word_embeddings": False,
            "rms_norm_eps": 1e-5,
            "max_position_embeddings": 16384,
            "original_max_position_embeddings": 4096,
            "sliding_window": None,
            "rope_parameters": {
                "rope_type": "longrope",
                "rope_theta": 10000.0,
                "partial_rotary_factor": rotary / head_dim,
                "original_max_position_embeddings": 4096,
                "short_factor": _longrope_factors(rotary // 2, 1.6),
                "long_factor": _longrope_factors(rotary // 2, 9.0),
            },
        }
    raise ValueError(f"unknown family {family!r}; supported: {', '.join(FAMILIES)}")


def _real_config(family: str, size: str, vocab: int) -> dict[str, Any]:
    """Real models' shapes with the real vocab size; the tokenizer stays small (~570 ids), so every id past it is a
    zero padding row (logit 0) that the tokenizer never produces."""
    common: dict[str, Any] = {"initializer_range": 0.02}
    if size == "0.5b":  # Qwen2.5-0.5B
        if family != "qwen2":
            raise ValueError(f"size '0.5b' is Qwen2.5-0.5B's shape: family must be 'qwen2', not {family!r}")
        return common | {
            "model_type": "qwen2",
            "architectures": ["Qwen2ForCausalLM"],
            "vocab_size": 151936,
            "hidden_size": 896,
            "intermediate_size": 4864,
            "num_hidden_layers": 24,
            "num_attention_heads": 14,
            "num_key_value_heads": 2,
            "tie_word_embeddings": True,
            "rms_norm_eps": 1e-6,
            "max_position_embeddings": 32768,
            "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0},
            "use_sliding_window": False,
            "sliding_window": None,
        }
    if size == "1b":  # Llama-3.2-1B
        if family != "llama":
            raise ValueError(f"size '1b' is Llama-3.2-1B's shape: family must be 'llama', not {family!r}")
        return common | {
            "model_type": "llama",
            "architectures": ["LlamaForCausalLM"],
            "vocab_size": 128256,
            "hidden_size": 2048,
            "intermediate_size": 8192,
            "num_hidden_layers": 16,
            "num_attention_heads": 32,
            "num_key_value_heads": 8,
            "head_dim": 64,
            "tie_word_embeddings": True,
            "rms_norm_eps": 1e-5,
            "max_position_embeddings": 131072,
            "rope_parameters": {
                "rope_type": "llama3",
                "rope_theta": 500000.0,
                "factor": 32.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 8192,
            },
        }
    raise ValueError(f"unknown size {size!r}; supported: {', '.join(SIZES)}")


def build_config(family: str, size: str = "tiny") -> tuple[Any, Any]:
    """(transformers config, the family's trained `tokenizers.Tokenizer`)."""
    from transformers import AutoConfig

    if family not in FAMILIES:
        raise ValueError(f"unknown family {family!r}; supported: {', '.join(FAMILIES)}")
    tok = train_tokenizer(family)
    vocab = tok.get_vocab_size()
    raw = _tiny_config(family, vocab) if size == "tiny" else _real_config(family, size, vocab)
    ids = special_ids(family, tok)
    raw |= ids
    model_type = raw.pop("model_type")
    cfg = AutoConfig.for_model(model_type, **raw)
    return cfg, tok


def _randomize_norms_and_biases(model: torch.nn.Module, family: str, gen: torch.Generator) -> None:
    """Norm weights around their neutral value (0 for Gemma's (1+w) norms, 1 elsewhere) and biases drawn."""
    neutral = 0.0 if family == "gemma3" else 1.0
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(".bias"):
                p.copy_(torch.randn(p.shape, generator=gen) * 0.1)
            elif "norm" in name and p.dim() == 1:
                # the final norm is drawn large: it spreads the logits so greedy picks are far from ties; Gemma's
                # post-norms too: its scaled, tied embedding otherwise dominates and greedy decoding loops at once
                centre = neutral + (_FINAL_NORM_GAIN if name in ("model.norm.weight", "norm.weight") else 0.0)
                centre += 1.0 if family == "gemma3" and ".post_" in name else 0.0
                p.copy_(centre + torch.randn(p.shape, generator=gen) * 0.15)


def build_model(family: str, size: str = "tiny", seed: int = 0, dtype: torch.dtype = torch.float32) -> tuple[Any, Any]:
    """(transformers model with random weights, tokenizer) — deterministic in (family, size, seed)."""
    from transformers import AutoModelForCausalLM

    cfg, tok = build_config(family, size)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    _randomize_norms_and_biases(model, family, torch.Generator().manual_seed(seed + 1))
    with torch.no_grad():  # ids past the tokenizer are padding: zero rows, logit 0, never picked over real tokens
        for emb in {id(e): e for e in (model.get_input_embeddings(), model.get_output_embeddings())}.values():
            emb.weight[tok.get_vocab_size() :] = 0.0
    return model.to(dtype).eval(), tok


def _shard_size(model: torch.nn.Module) -> int:
    total = sum(p.numel() * p.element_size() for p in model.parameters())
    return math.ceil(total * 0.55)  # two files: the larger tensors split across the half-way mark


def make_random_model(
    family: str,
    out_dir: str | Path,
    *,
    size: str = "tiny",
    seed: int = 0,
    dtype: torch.dtype = torch.float32,
    shard: bool = False,
) -> Path:
    """Write a random-weight model of `family` as a Hugging Face directory; returns the directory.

    shard=True writes the weights as two safetensors files with model.safetensors.index.json."""
    from transformers import GenerationConfig

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model, tok = build_model(family, size, seed, dtype)
    cfg = model.config
    model.generation_config = GenerationConfig(
        bos_token_id=cfg.bos_token_id, eos_token_id=cfg.eos_token_id, pad_token_id=cfg.pad_token_id
    )
    kw: dict[str, Any] = {"max_shard_size": _shard_size(model)} if shard else {}
    model.save_pretrained(str(out), **kw)
    save_tokenizer(family, tok, out, max_len=int(cfg.max_position_embeddings))
    if shard:
        index = json.loads((out / "model.safetensors.index.json").read_text())
        n_files = len(set(index["weight_map"].values()))
        assert n_files == 2, f"expected 2 shards, got {n_files}"
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m symphony_core.model.random_models", description=__doc__.split("\n")[0])
    ap.add_argument("family", choices=FAMILIES)
    ap.add_argument("out_dir")
    ap.add_argument("--size", choices=SIZES, default="tiny")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--shard", action="store_true", help="two safetensors files with an index")
    ap.add_argument(
        "--gguf", type=str.upper, choices=("F32", "F16", "Q8_0", "Q4_1"), help="also write OUT_DIR/model-QTYPE.gguf"
    )
    a = ap.parse_args(argv)
    try:
        out = make_random_model(a.family, a.out_dir, size=a.size, seed=a.seed, shard=a.shard)
    except ValueError as e:  # a size that is another family's shape
        ap.error(str(e))
    print(out)
    if a.gguf:
        from symphony_core.model.gguf_writer import write_gguf

        print(write_gguf(out, out / f"model-{a.gguf}.gguf", qtype=a.gguf))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
