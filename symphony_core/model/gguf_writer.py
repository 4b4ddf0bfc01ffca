"""Write a Hugging Face model directory of a supported family as a GGUF file, the way llama.cpp lays one out.

For the random test models (random_models.py) and any directory of the same families: llama.cpp's
architecture names (Mistral is "llama" with "mistral" in general.name), its metadata keys and tensor names
(gguf's own name map), the Q/K row permutation llama.cpp's converter applies to the "llama" architecture
(its rope pairs interleaved rows; Qwen, Gemma and Phi-3 use the NeoX layout and keep HF's order), Gemma's
norms stored as 1 + w, Phi-3's fused qkv / gate_up tensors and its longrope factor tensors, Llama 3's
rope_freqs tensor, and the tokenizer as byte-level BPE tokens + merges with the chat template.

qtype: "F32", "F16", "Q8_0" or "Q4_1" for the 2-D weights (embeddings and head included; in a Q4_1 file the output
projection, or the tied embedding, is Q8_0 as llama.cpp keeps it); norms, biases and rope factor tensors stay F32. A weight whose rows are not a whole number of 32-value blocks is written F16,
as llama.cpp's converter falls back.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import gguf
import numpy as np
import torch
from gguf import GGMLQuantizationType as QT

# transformers model_type -> (family, llama.cpp architecture)
_ARCH: dict[str, tuple[str, gguf.MODEL_ARCH]] = {
    "llama": ("llama", gguf.MODEL_ARCH.LLAMA),
    "mistral": ("mistral", gguf.MODEL_ARCH.LLAMA),
    "qwen2": ("qwen2", gguf.MODEL_ARCH.QWEN2),
    "qwen3": ("qwen3", gguf.MODEL_ARCH.QWEN3),
    "gemma3_text": ("gemma3", gguf.MODEL_ARCH.GEMMA3),
    "phi3": ("phi3", gguf.MODEL_ARCH.PHI3),
}

QTYPES: dict[str, tuple[QT, gguf.LlamaFileType]] = {
    "F32": (QT.F32, gguf.LlamaFileType.ALL_F32),
    "F16": (QT.F16, gguf.LlamaFileType.MOSTLY_F16),
    "Q8_0": (QT.Q8_0, gguf.LlamaFileType.MOSTLY_Q8_0),
    "Q4_1": (QT.Q4_1, gguf.LlamaFileType.MOSTLY_Q4_1),
}

# turn-end tokens llama.cpp also stops at (it finds them by text); written as eot / eom ids
_EOT = ("<|eot_id|>", "<|im_end|>", "<end_of_turn>", "<|end|>")
_EOM = ("<|eom_id|>",)


def _load_state_dict(hf_dir: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    index = hf_dir / "model.safetensors.index.json"
    files = (
        sorted(set(json.loads(index.read_text())["weight_map"].values())) if index.exists() else ["model.safetensors"]
    )
    out: dict[str, torch.Tensor] = {}
    for f in files:
        out.update(load_file(str(hf_dir / f)))
    return out


def _permute_rope_rows(w: torch.Tensor, n_head: int) -> torch.Tensor:
    """HF's half-split rope layout -> the interleaved pairs llama.cpp's "llama" architecture rotates."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def _llama3_rope_factors(rope: dict[str, Any], head_dim: int) -> torch.Tensor:
    """Llama 3's frequency divisors per rotary pair (llama.cpp's rope_freqs tensor)."""
    base, factor = float(rope["rope_theta"]), float(rope["factor"])
    lo, hi = float(rope.get("low_freq_factor", 1.0)), float(rope.get("high_freq_factor", 4.0))
    old = float(rope["original_max_position_embeddings"])
    freqs = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
    out = []
    for f in freqs.tolist():
        wavelen = 2 * math.pi / f
        if wavelen < old / hi:
            out.append(1.0)
        elif wavelen > old / lo:
            out.append(factor)
        else:
            smooth = (old / wavelen - lo) / (hi - lo)
            out.append(1.0 / ((1.0 - smooth) / factor + smooth))
    return torch.tensor(out, dtype=torch.float32)


def _add_hparams(w: gguf.GGUFWriter, family: str, cfg: Any, rope_dim: int) -> list[tuple[str, torch.Tensor]]:
    """The architecture's metadata; returns the extra tensors llama.cpp generates (rope factors)."""
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    w.add_context_length(int(cfg.max_position_embeddings))
    w.add_embedding_length(cfg.hidden_size)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_block_count(cfg.num_hidden_layers)
    w.add_head_count(cfg.num_attention_heads)
    w.add_head_count_kv(cfg.num_key_value_heads)
    w.add_layer_norm_rms_eps(float(cfg.rms_norm_eps))
    w.add_key_length(head_dim)
    w.add_value_length(head_dim)
    w.add_rope_dimension_count(rope_dim)
    w.add_vocab_size(cfg.vocab_size)
    rope = cfg.rope_parameters
    extra: list[tuple[str, torch.Tensor]] = []
    if family == "gemma3":
        glob, local = rope["full_attention"], rope["sliding_attention"]
        w.add_rope_freq_base(float(glob["rope_theta"]))
        w.add_rope_freq_base_swa(float(local["rope_theta"]))
        if glob.get("rope_type") == "linear":
            w.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
            w.add_rope_scaling_factor(float(glob["factor"]))
        w.add_sliding_window(int(cfg.sliding_window))
        w.add_sliding_window_pattern([t == "sliding_attention" for t in cfg.layer_types])
        if cfg.final_logit_softcapping:
            w.add_final_logit_softcapping(float(cfg.final_logit_softcapping))
        # llama.cpp's gemma3 scales by head_dim**-0.5 (27B: by hidden/heads); the file states what the config says
        w.add_attention_scale(float(cfg.query_pre_attn_scalar) ** -0.5)
        return extra
    w.add_rope_freq_base(float(rope["rope_theta"]))
    rope_type = rope.get("rope_type", "default")
    if family == "mistral" and getattr(cfg, "sliding_window", None):
        w.add_sliding_window(int(cfg.sliding_window))
    if rope_type == "llama3":
        extra.append(("rope_freqs.weight", _llama3_rope_factors(rope, rope_dim)))
    elif rope_type == "linear":
        w.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        w.add_rope_scaling_factor(float(rope["factor"]))
    elif rope_type == "yarn":
        w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
        w.add_rope_scaling_factor(float(rope["factor"]))
        w.add_rope_scaling_orig_ctx_len(int(rope["original_max_position_embeddings"]))
    elif rope_type == "longrope":
        orig = int(rope.get("original_max_position_embeddings") or cfg.original_max_position_embeddings)
        scale = cfg.max_position_embeddings / orig
        attn = rope.get("attention_factor") or (math.sqrt(1 + math.log(scale) / math.log(orig)) if scale > 1 else 1.0)
        w.add_rope_scaling_orig_ctx_len(orig)
        w.add_rope_scaling_attn_factors(float(attn))
        extra.append(("rope_factors_long.weight", torch.tensor(rope["long_factor"], dtype=torch.float32)))
        extra.append(("rope_factors_short.weight", torch.tensor(rope["short_factor"], dtype=torch.float32)))
    if family == "phi3":
        w.add_sliding_window(int(getattr(cfg, "sliding_window", None) or 0))  # 0: none (llama.cpp's Phi-4 marker)
    return extra


def _add_tokenizer(w: gguf.GGUFWriter, hf_dir: Path, vocab_size: int) -> None:
    """Byte-level BPE as llama.cpp stores it: tokens by id (ids the tokenizer lacks are [PADn], UNUSED), token
    types (special added tokens CONTROL, other added ones USER_DEFINED), merges, special ids, template."""
    tj = json.loads((hf_dir / "tokenizer.json").read_text())
    tc = json.loads((hf_dir / "tokenizer_config.json").read_text())
    pre = _pre_tokenizer_name(tj)
    by_id: dict[int, tuple[str, int]] = {i: (t, gguf.TokenType.NORMAL) for t, i in tj["model"]["vocab"].items()}
    for a in tj["added_tokens"]:
        by_id[a["id"]] = (a["content"], gguf.TokenType.CONTROL if a["special"] else gguf.TokenType.USER_DEFINED)
    n = max(vocab_size, max(by_id) + 1)
    tokens = [by_id.get(i, (f"[PAD{i}]", gguf.TokenType.UNUSED)) for i in range(n)]
    ids = {t: i for i, (t, _) in enumerate(tokens)}
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(pre)
    w.add_token_list([t for t, _ in tokens])
    w.add_token_types([int(k) for _, k in tokens])
    w.add_token_merges([m if isinstance(m, str) else " ".join(m) for m in tj["model"]["merges"]])
    for key, add in (("bos_token", w.add_bos_token_id), ("eos_token", w.add_eos_token_id),
                     ("pad_token", w.add_pad_token_id), ("unk_token", w.add_unk_token_id)):  # fmt: skip
        if tc.get(key) in ids:
            add(ids[tc[key]])
    for names, add in ((_EOT, w.add_eot_token_id), (_EOM, w.add_eom_token_id)):
        if found := [ids[t] for t in names if t in ids]:
            add(found[0])
    w.add_add_bos_token(bool(tc.get("add_bos_token", False)))
    w.add_add_eos_token(bool(tc.get("add_eos_token", False)))
    if tc.get("chat_template"):
        w.add_chat_template(tc["chat_template"])


def _split_regexes() -> dict[str, str]:
    from symphony_core.model.random_tokenizer import SPLIT_REGEX

    return SPLIT_REGEX


def _pre_tokenizer_name(tj: dict[str, Any]) -> str:
    """llama.cpp's tokenizer.ggml.pre for a byte-level BPE whose split regex it knows; anything else (a
    SentencePiece-style BPE, an unknown split) is refused rather than written as a tokenizer that differs."""
    pre = tj.get("pre_tokenizer") or {}
    steps = pre.get("pretokenizers", [pre])
    regex = next((p["pattern"].get("Regex") for p in steps if p.get("type") == "Split"), None)
    byte_level = any(p.get("type") == "ByteLevel" for p in steps)
    name = next((n for n, rx in _split_regexes().items() if rx == regex), None)
    if tj["model"]["type"] != "BPE" or not byte_level or name is None:
        raise ValueError(
            "only byte-level BPE tokenizers with llama.cpp's qwen2 or llama-bpe split are written; this one has "
            f"model {tj['model']['type']} and pre-tokenizer {[p.get('type') for p in steps]}"
        )
    return name


def _encode(name: str, t: torch.Tensor, qt: QT, head: bool) -> tuple[np.ndarray, QT]:
    arr = t.detach().to(torch.float32).numpy()
    if arr.ndim < 2 or name.startswith("rope_") or qt == QT.F32:
        return arr, QT.F32
    if head and qt == QT.Q4_1:
        qt = QT.Q8_0  # llama.cpp keeps the output projection above 4 bits (the shipped SmolLM2 Q4_1 has it Q8_0)
    if qt == QT.F16:
        return arr.astype(np.float16), QT.F16
    try:
        return gguf.quants.quantize(arr, qt), qt
    except gguf.quants.QuantError:  # rows not a whole number of blocks
        return arr.astype(np.float16), QT.F16


def write_gguf(hf_dir: str | Path, out_path: str | Path, *, qtype: str = "F32") -> Path:
    """Write the model in `hf_dir` (a supported family) as a GGUF at `out_path`; returns out_path."""
    from transformers import AutoConfig

    hf_dir, out = Path(hf_dir), Path(out_path)
    if qtype not in QTYPES:
        raise ValueError(f"qtype {qtype!r} not supported; choose one of {', '.join(QTYPES)}")
    cfg = AutoConfig.from_pretrained(str(hf_dir))
    if cfg.model_type not in _ARCH:
        raise ValueError(f"model_type {cfg.model_type!r} not supported; supported: {', '.join(_ARCH)}")
    family, arch = _ARCH[cfg.model_type]
    qt, ftype = QTYPES[qtype]
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    rope = cfg.rope_parameters.get("full_attention", cfg.rope_parameters)
    rope_dim = int(head_dim * rope.get("partial_rotary_factor", 1.0))

    w = gguf.GGUFWriter(str(out), gguf.MODEL_ARCH_NAMES[arch])
    w.add_name(f"{family}-random-{hf_dir.name}")  # transformers reads "mistral" in the name as Mistral
    w.add_file_type(int(ftype))
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)
    extra = _add_hparams(w, family, cfg, rope_dim)
    _add_tokenizer(w, hf_dir, cfg.vocab_size)

    names = gguf.get_tensor_name_map(arch, cfg.num_hidden_layers)
    sd = _load_state_dict(hf_dir)
    if getattr(cfg, "tie_word_embeddings", False):
        sd.pop("lm_head.weight", None)
    for hf_name, t in sd.items():
        gname = names.get_name(hf_name, try_suffixes=(".weight", ".bias"))
        if gname is None:
            raise ValueError(f"no GGUF name for tensor {hf_name!r} of a {family} model")
        t = t.to(torch.float32)
        if arch == gguf.MODEL_ARCH.LLAMA and (".attn_q." in gname or ".attn_k." in gname):
            heads = cfg.num_attention_heads if ".attn_q." in gname else cfg.num_key_value_heads
            t = _permute_rope_rows(t, heads)
        if family == "gemma3" and gname.endswith("norm.weight"):
            t = t + 1.0  # llama.cpp multiplies by the stored weight; Gemma's norm multiplies by (1 + w)
        head = gname == ("token_embd.weight" if "lm_head.weight" not in sd else "output.weight")
        data, dtype = _encode(gname, t, qt, head)
        w.add_tensor(gname, data, raw_dtype=dtype if dtype not in (QT.F32, QT.F16) else None)
    for gname, t in extra:
        w.add_tensor(gname, t.numpy())

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return out
