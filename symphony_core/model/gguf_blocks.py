"""Read a GGUF's Q4_1 blocks as 4-bit weights, under the Hugging Face tensor names.

A Q4_1 block is 32 weights along a row: an fp16 scale d, an fp16 minimum m and 16 bytes of
nibbles (weights 0-15 in the low nibbles, 16-31 in the high ones); w = q * d + m. That is
exactly what `Int4Linear` runs, so the shipped file's quantised weights are used as they are,
with no second rounding. llama.cpp stores the Q and K projections' rows permuted for its RoPE
layout; they are put back in Hugging Face order here (as transformers does when it converts).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

GGUF_TO_HF = {
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}
Q4_1_BLOCK_BYTES = 20


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


def read_q4_1(path: Path, n_heads: int, n_kv_heads: int) -> dict[str, tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """Every Q4_1 projection of the file: HF name -> (nibbles, scale, minimum). Other types are left out."""
    from gguf import GGMLQuantizationType, GGUFReader

    out = {}
    for t in GGUFReader(str(path)).tensors:
        parts = t.name.split(".")
        if t.tensor_type != GGMLQuantizationType.Q4_1 or parts[0] != "blk" or parts[2] not in GGUF_TO_HF:
            continue
        raw = np.asarray(t.data)
        if parts[2] in ("attn_q", "attn_k"):
            raw = raw[_unpermute_rows(raw.shape[0], n_heads if parts[2] == "attn_q" else n_kv_heads)]
        out[f"model.layers.{parts[1]}.{GGUF_TO_HF[parts[2]]}.weight"] = decode_q4_1(raw)
    return out


def dequantize(blocks: tuple[torch.Tensor, torch.Tensor, torch.Tensor]) -> torch.Tensor:
    q, d, m = blocks
    rows, cols = q.shape
    g = q.float().view(rows, -1, 32) * d[..., None] + m[..., None]
    return g.view(rows, cols)
