"""Attention for layers with a sliding window (Mistral's, Gemma 3's local layers, Phi-3's).

A query at cache index i sees keys i - W + 1 .. i (transformers' `kv_idx > q_idx - sliding_window`, on
top of causality). Index, not RoPE position: the window counts the file's slots, as transformers counts
its cache. While no context in the batch is longer than W nothing falls outside, and a windowed layer
runs the model's usual attention backend (the compiled in-place decode included); once one is, that
layer's attention gathers each group's context and runs SDPA under a window mask, built once per
forward pass and shared by every layer of that window.

What stays in the KV file: every token's K/V, for every layer. The window is applied when reading, not
by freeing pages, so a truncate or a fork back into the past stays exact (a freed page would have to
be recomputed) and Gemma 3's global layers, which see the whole context, share the same pages — a
page holds all layers' K/V. docs/architecture.md ("Sliding windows") gives the pages a file could
give back if it dropped them for a model whose every layer is windowed.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .attention import gather_slots, scatter_rows
from .forward_batch import AttentionGroup

WindowPlan = list[tuple[AttentionGroup, torch.Tensor]]


def window_plan(groups: list[AttentionGroup], window: int) -> WindowPlan | None:
    """Each group with its [B, 1, Q, L] window mask, or None when every key is inside every query's window."""
    if all(max(g.lengths) <= window for g in groups):
        return None
    return [(g, _window_mask(g, window)) for g in groups]


def _window_mask(g: AttentionGroup, window: int) -> torch.Tensor:
    if g.prefix_slots is not None:
        raise ValueError("shared-prefix groups are not built for windowed models")
    device = g.context_slots.device
    lengths = torch.tensor(g.lengths, device=device)
    # Query i of sequence b sits at cache index lengths[b] - n_query + i (a sequence's new tokens are its last).
    qi = lengths[:, None] - g.n_query + torch.arange(g.n_query, device=device)[None, :]  # [B, Q]
    keys = torch.arange(g.context_len, device=device)[None, None, :]
    seen = (keys <= qi[..., None]) & (keys > qi[..., None] - window)  # [B, Q, L]
    return seen[:, None]


def windowed_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, plan: WindowPlan) -> torch.Tensor:
    """q [T, H, D] -> [T, H, D] under each group's window mask."""
    h, d = q.shape[1], q.shape[2]
    kvh = k_cache.shape[1]
    parts = []
    for g, mask in plan:
        b, nq, length = g.n_seqs, g.n_query, g.context_len
        qg = (q if g.all_rows else q.index_select(0, g.rows)).view(b, nq, h, d).transpose(1, 2)
        kg = gather_slots(k_cache, g.context_slots, q.dtype).view(b, length, kvh, d).transpose(1, 2)
        vg = gather_slots(v_cache, g.context_slots, q.dtype).view(b, length, kvh, d).transpose(1, 2)
        o = F.scaled_dot_product_attention(qg, kg, vg, attn_mask=mask, enable_gqa=kvh != h)
        parts.append((g, o.transpose(1, 2).reshape(b * nq, h, d)))
    return scatter_rows(q, parts)
