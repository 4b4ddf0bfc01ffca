"""The CUDA attention backend over the Triton paged kernel (triton_attention.py).

`plan` turns each attention group of a forward pass into the index tensors of one launch, once for
all layers: a decode group's page table is its padded context slots read a page apart (slot
`page * page_size`, divided by the page size: KVFS lays a file's context out page by page), and
each chunk its own launch with 16 query tokens a program. A plan that a CUDA graph built (a
`LaunchPlan` already) passes through unchanged, so a captured forward reads the graph's static
buffers. Shared-prefix groups are never asked for (`shares_prefixes`; only a CPU batch builds them).

The backend is made knowing no page size (`page_size` 1: the table holds every slot, correct for
any layout); the engine tells it the pool's (`use_page_size`), and the tables shrink page_size times.
"""

from __future__ import annotations

import torch

from .forward_batch import AttentionGroup
from .triton_attention import CHUNK_BLOCK_Q, LaunchPlan, paged_attention


def page_table(context_slots: torch.Tensor, n_seqs: int, length: int, page_size: int) -> torch.Tensor:
    """[B, ceil(L / page_size)] int32 page ids of a group's [B * L] padded context slots."""
    ctx = context_slots.view(n_seqs, length)
    if page_size > 1:
        ctx = ctx[:, ::page_size].div(page_size, rounding_mode="floor")
    return ctx.to(torch.int32)


def launch_plan(g: AttentionGroup, page_size: int) -> LaunchPlan:
    dev = g.context_slots.device
    b = g.n_seqs
    table = page_table(g.context_slots, b, g.context_len, page_size)
    seq_lens = torch.tensor(g.lengths, dtype=torch.int32).to(dev, non_blocking=True)
    if g.n_query == 1:
        progs = torch.arange(b, dtype=torch.int32, device=dev)
        ones = torch.ones(b, dtype=torch.int32, device=dev)
        return LaunchPlan(table, seq_lens, ones, g.rows, progs, torch.zeros_like(progs), page_size, 1)
    assert b == 1, "a multi-token group is one chunk"
    q = g.n_query
    q0 = torch.arange(0, q, CHUNK_BLOCK_Q, dtype=torch.int32, device=dev)
    q_lens = torch.full((1,), q, dtype=torch.int32, device=dev)
    return LaunchPlan(table, seq_lens, q_lens, g.rows[:1], torch.zeros_like(q0), q0, page_size, CHUNK_BLOCK_Q)


class TritonPaged:
    name = "triton_paged"
    shares_prefixes = False  # cascade groups are a CPU path

    takes_window = True  # a layer's sliding window is applied in the kernel (llama.py passes it)

    def __init__(self, page_size: int = 1) -> None:
        self.page_size = page_size

    def use_page_size(self, page_size: int) -> None:
        self.page_size = page_size

    def plan(self, groups: list) -> list:
        out: list = []
        for g in groups:
            assert isinstance(g, LaunchPlan) or g.prefix_slots is None, "shared-prefix groups are a CPU path"
            out.append(g if isinstance(g, LaunchPlan) else launch_plan(g, self.page_size))
        return out

    def __call__(self, q, k_cache, v_cache, plan: list, scale: float | None = None, window: int = 0) -> torch.Tensor:
        """[T, H, D]: every row belongs to one group (a batch's decodes and chunks cover it)."""
        out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
        for p in plan:
            paged_attention(q, k_cache, v_cache, p, out, scale, window)
        return out
