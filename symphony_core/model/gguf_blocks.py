"""Read a GGUF's Q4_1 blocks as 4-bit weights, under the Hugging Face tensor names (and a Q8_0 LM head).

A Q4_1 block is 32 weights along a row: an fp16 scale d, an fp16 minimum m and 16 bytes of
nibbles (weights 0-15 in the low nibbles, 16-31 in the high ones); w = q * d + m. That is
exactly what `Int4Linear` runs, so the shipped file's quantised weights are used as they are,
with no second rounding. For the Llama architecture llama.cpp stores the Q and K projections' rows
permuted for its RoPE layout; they are put back in Hugging Face order here (as transformers does when
it converts).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

# The parts each of the model's fused projections is made of, by GGUF tensor name, in order: split
# (Llama, Mistral, Qwen, Gemma) or stored fused (Phi-3's attn_qkv, and its ffn_up holding gate then up).
FUSED_PARTS = {
    "wqkv": (("attn_q", "attn_k", "attn_v"), ("attn_qkv",)),
    "wo": (("attn_output",),),
    "w_gate_up": (("ffn_gate", "ffn_up"), ("ffn_up",)),
    "w_down": (("ffn_down",),),
}
# llama.cpp's converter permutes the Q and K rows for its RoPE layout in these architectures only
# (transformers' GGUF loader undoes it for the same ones).
PERMUTED_QK = ("llama",)
Q4_1_BLOCK_BYTES = 20
Q8_0_BLOCK_BYTES = 34  # an fp16 scale d, then 32 int8: w = q * d


def _unpermute_rows(n_rows: int, n_head: int) -> np.ndarray:
    """Index of the GGUF row holding each Hugging Face row of a Q/K projection."""
    dim = n_rows // n_head // 2
    return np.arange(n_rows).reshape(n_head, dim, 2).swapaxes(1, 2).reshape(-1)


def decode_q4_1(raw: np.ndarray) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """raw uint8 [rows, blocks * 20] -> (nibbles uint8 [rows, blocks * 32], scale, minimum fp32 [rows, blocks])."""
    rows = raw.shape[0]
    blocks = raw.reshape(rows, -1, Q4_1_BLOCK_BYTES)
    d = blocks[..., 0:2].copy().view(np.float16)[..., 0].astype(np.float32)
    m = blocks[..., 2:4].copy().view(np.float16)[..., 0].astype(np.float32)
    qs = blocks[..., 4:]
    q = np.concatenate([qs & 0x0F, qs >> 4], axis=-1).reshape(rows, -1)
    return torch.from_numpy(np.ascontiguousarray(q)), torch.from_numpy(d), torch.from_numpy(m)


def read_q4_1(
    path: Path, n_heads: int, n_kv_heads: int
) -> dict[tuple[int, str], tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """The file's Q4_1 projections as the model's fused ones: (layer, "wqkv" | "wo" | "w_gate_up" | "w_down") ->
    (nibbles, scale, minimum), where every part of that projection is Q4_1. Other types are left out."""
    from gguf import GGMLQuantizationType, GGUFReader

    reader = GGUFReader(str(path))
    arch_field = reader.fields.get("general.architecture")
    arch = bytes(arch_field.parts[arch_field.data[0]]).decode() if arch_field is not None else "llama"
    found: dict[tuple[int, str], tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = {}
    for t in reader.tensors:
        parts = t.name.split(".")
        if t.tensor_type != GGMLQuantizationType.Q4_1 or parts[0] != "blk" or parts[-1] != "weight":
            continue
        raw = np.asarray(t.data)
        if arch in PERMUTED_QK and parts[2] in ("attn_q", "attn_k"):
            raw = raw[_unpermute_rows(raw.shape[0], n_heads if parts[2] == "attn_q" else n_kv_heads)]
        found[int(parts[1]), parts[2]] = decode_q4_1(raw)
    out = {}
    for layer in sorted({i for i, _ in found}):
        for attr, layouts in FUSED_PARTS.items():
            for names in layouts:
                if all((layer, n) in found for n in names):
                    blocks = [found[layer, n] for n in names]
                    out[layer, attr] = tuple(torch.cat([b[i] for b in blocks]) for i in range(3))
                    break
    return out  # type: ignore[return-value]


def read_q8_0(path: Path, names: tuple[str, ...]) -> tuple[torch.Tensor, torch.Tensor] | None:
    """The first of `names` the file has, if it is Q8_0: (q int8 [rows, cols], d fp32 [rows, cols / 32]); else None."""
    from gguf import GGMLQuantizationType, GGUFReader

    tensors = {t.name: t for t in GGUFReader(str(path)).tensors}
    t = next((tensors[n] for n in names if n in tensors), None)
    if t is None or t.tensor_type != GGMLQuantizationType.Q8_0:
        return None
    raw = np.asarray(t.data)
    blocks = raw.reshape(raw.shape[0], -1, Q8_0_BLOCK_BYTES)
    d = blocks[..., 0:2].copy().view(np.float16)[..., 0].astype(np.float32)
    q = np.ascontiguousarray(blocks[..., 2:]).view(np.int8).reshape(raw.shape[0], -1)
    return torch.from_numpy(q), torch.from_numpy(d)


def dequantize(blocks: tuple[torch.Tensor, torch.Tensor, torch.Tensor]) -> torch.Tensor:
    q, d, m = blocks
    rows, cols = q.shape
    g = q.float().view(rows, -1, 32) * d[..., None] + m[..., None]
    return g.view(rows, cols)
