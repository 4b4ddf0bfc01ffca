"""Attention over paged K/V: one call per layer covers every group of the batch.

A backend has two steps: `plan(groups)` runs once per forward pass (index work shared by all
layers) and `backend(q, k_cache, v_cache, plan)` runs per layer and returns [T, H, D].

`TorchSDPA` (CPU, and CUDA without flash-attn): gather each group's context slots out of the
pool and call `scaled_dot_product_attention` (its fused CPU kernel; grouped-query heads
handled by SDPA itself). On CPU a long chunk runs in blocks of queries, each over only the keys it
may see (`QUERY_BLOCK`). Measured on 2 CPU threads with SmolLM2-135M shapes, the alternatives
lose: a manual matmul/softmax decode is 1.5-4x slower; folding the query groups into the query
length or gathering whole pages instead of slots gains nothing measurable; flex attention
(torch.compile'd) takes 4-14 s to compile per shape — and decode shapes change every step —
and then runs no faster (0.41 vs 0.42 ms for 32 decodes over 160 slots; 5.5 vs 4.5 ms for a
512-token causal prefill).

Shared-prefix ("cascade") decode groups (CPU, torch SDPA backend): when several single-token
decodes start with the same slots — forks of one file share its pages — forward_batch.py makes
them a group of their own that carries the shared prefix's slots once and each sequence's suffix.
The prefix K/V is gathered once per layer instead of once per fork, and all queries meet it in one
matmul per KV head. Measured with 16 forks of a 1,024-token file at ~1,050 context, per layer: 5.0
ms for the padded SDPA path (gather 16 copies + SDPA) vs 0.8 ms (2 CPU threads, idle machine). The
compiled decode kernel, which gathers nothing, beats it at every size measured (µs a layer, kernel /
cascade, 10-slot suffixes: 4 sequences over 64 / 1,024 shared slots 43 / 673 and 331 / 5,299; 16
over 256 and 1,024: 224 / 849 and 1,276 / 3,147; 64 over 1,024: 7,658 / 18,602), so a backend with
it does not ask for cascade groups (`shares_prefixes`): forks decode in the one plain group, which
the fused decode step can also take whole.

`CompiledDecode` (CPU with Symphony's compiled kernels, fp32): single-token decode groups read K/V
from the pool in place (cpu_kernels/decode_ops.cpp: one call a layer, no gather; an fp16 pool is
widened as it is read); shared-prefix groups and chunks take SDPA's path as above, whose gather
converts an fp16 pool's rows to fp32.

`TritonPaged` (CUDA, the default; triton_backend.py): a Triton kernel reads K/V from the pool in place
through a page table at any page size, for decodes and chunks alike (triton_attention.py).

`FlashPaged` (CUDA with flash-attn installed): `flash_attn_with_kvcache` reads K/V straight
from the pool through a block table, no gather. flash-attn 2's paged KV needs blocks of a
multiple of 256 tokens, so the pool is read as 256-slot blocks, and a group goes there only
when every context lies in whole, aligned 256-slot runs — true when the pool's page size is a
multiple of 256. With smaller pages (the default is 16 tokens) it falls back to SDPA, so it is
chosen only for such pools (`for_pool`) or when asked for (`SYMPHONY_CUDA_ATTENTION=flash`).
"""

from __future__ import annotations

import contextlib
import functools
import os

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from .forward_batch import AttentionGroup


def gather_slots(cache: torch.Tensor, slots: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The cache's rows at `slots`, in the activations' dtype (an fp16 cache under fp32 ones)."""
    return cache.index_select(0, slots).to(dtype)


def _cascade_group(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, g: AttentionGroup) -> torch.Tensor:
    """Single-token decodes whose contexts share a prefix: the prefix K/V is gathered once and
    scored against all B queries in one matmul per KV head ([B*G, D] x [D, P], G query heads per
    KV head); each sequence's suffix is scored on its own. Both score blocks go through one
    softmax (over prefix + suffix, so the merge is exact, as a log-sum-exp merge of the two
    partial results would be) and are multiplied by their own V. Returns [B, H, D]."""
    h, d = q.shape[1], q.shape[2]
    kvh = k_cache.shape[1]
    grp = h // kvh
    b, p, s = g.n_seqs, g.prefix_len, g.context_len
    qg = (q if g.all_rows else q.index_select(0, g.rows)).view(b, kvh, grp, d)
    qp = qg.transpose(0, 1).reshape(kvh, b * grp, d)  # [KVH, B*G, D]
    assert g.prefix_slots is not None  # only shared-prefix groups come here
    kp = gather_slots(k_cache, g.prefix_slots, q.dtype)  # [P, KVH, D]
    vp = gather_slots(v_cache, g.prefix_slots, q.dtype)
    ks = gather_slots(k_cache, g.context_slots, q.dtype).view(b, s, kvh, d)
    vs = gather_slots(v_cache, g.context_slots, q.dtype).view(b, s, kvh, d)
    scores = torch.empty(kvh, b * grp, p + s, dtype=q.dtype, device=q.device)
    torch.bmm(qp, kp.permute(1, 2, 0), out=scores[:, :, :p])
    suffix = torch.matmul(qg, ks.permute(0, 2, 3, 1))  # [B, KVH, G, S]
    if g.mask is not None:  # [B, 1, 1, S]: padding past a sequence's own suffix
        suffix.masked_fill_(~g.mask, float("-inf"))
    scores[:, :, p:].view(kvh, b, grp, s).copy_(suffix.transpose(0, 1))
    probs = torch.softmax(scores.mul_(d**-0.5), dim=-1, dtype=torch.float32).to(q.dtype)
    out = torch.bmm(probs[:, :, :p], vp.transpose(0, 1))  # [KVH, B*G, D]
    out = out.view(kvh, b, grp, d).transpose(0, 1)
    out = out + torch.matmul(probs[:, :, p:].reshape(kvh, b, grp, s).transpose(0, 1), vs.transpose(1, 2))
    return out.reshape(b, h, d)


def _sdpa_group(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, g: AttentionGroup) -> torch.Tensor:
    """Attention for one group; returns [B*Q, H, D] in the group's row order."""
    if g.prefix_slots is not None:
        return _cascade_group(q, k_cache, v_cache, g)
    h, d = q.shape[1], q.shape[2]
    kvh = k_cache.shape[1]
    b, nq, length = g.n_seqs, g.n_query, g.context_len
    qg = (q if g.all_rows else q.index_select(0, g.rows)).view(b, nq, h, d).transpose(1, 2)
    kg = gather_slots(k_cache, g.context_slots, q.dtype).view(b, length, kvh, d).transpose(1, 2)
    vg = gather_slots(v_cache, g.context_slots, q.dtype).view(b, length, kvh, d).transpose(1, 2)
    if b == 1 and nq > QUERY_BLOCK and q.device.type == "cpu":
        return _causal_in_blocks(qg, kg, vg, length - nq)
    with sdpa_kernel(CUDA_SDPA_BACKENDS) if q.device.type == "cuda" else contextlib.nullcontext():
        o = F.scaled_dot_product_attention(qg, kg, vg, attn_mask=g.mask, is_causal=g.causal, enable_gqa=kvh != h)
    return o.transpose(1, 2).reshape(b * nq, h, d)


# SDPA's backends a CUDA engine lets torch choose from: not cuDNN's, torch's first choice for bf16 on Hopper,
# which builds an execution plan for each new shape (~45 ms on an H200) — and a decode's context length is new
# at every step (bf16, 32 programs decoding: 145 tok/s with it, 1,946 without; fp32 never takes it).
CUDA_SDPA_BACKENDS = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]


# A long chunk's causal attention on CPU runs in blocks of this many queries, each over only the keys
# it may see: SDPA's CPU kernel takes as long for a causal square as for an unmasked one, so a
# 512-token prefill in 8 blocks skips ~7/16 of the products (SmolLM2-135M's shapes, 2 threads: 11.6
# -> 8.1 ms a layer; 4 blocks 8.4, 2 blocks 9.2).
QUERY_BLOCK = 64


@functools.lru_cache(maxsize=16)  # 16 of 64 x 8,192 slots: 32 MB at most
def _block_mask(rows: int, offset: int, dtype: torch.dtype) -> torch.Tensor:
    """[rows, offset + rows] additive mask: row i sees keys 0..offset + i. Every layer of a prefill asks for
    the same few, so they are made once; additive (0 / -inf) because SDPA turns a bool mask into one per call
    (a 512-token prefill spent ~4% of its time building and converting masks)."""
    seen = torch.ones(rows, offset + rows, dtype=torch.bool).tril_(offset)
    return torch.zeros(seen.shape, dtype=dtype).masked_fill_(~seen, float("-inf"))


def _causal_in_blocks(qg: torch.Tensor, kg: torch.Tensor, vg: torch.Tensor, before: int) -> torch.Tensor:
    """qg [1, H, Q, D] at cache indices before..before+Q-1 over kg, vg [1, KVH, before+Q, D]; query i
    sees keys 0..before+i. Returns [Q, H, D] (token-major, as SDPA's CPU kernel lays out each block's result)."""
    b, h, nq, d = qg.shape
    out = torch.empty(b, nq, h, d, dtype=qg.dtype, device=qg.device)
    blocks = out.transpose(1, 2)
    for s in range(0, nq, QUERY_BLOCK):
        e = min(s + QUERY_BLOCK, nq)
        seen = before + e
        blocks[:, :, s:e] = F.scaled_dot_product_attention(
            qg[:, :, s:e],
            kg[:, :, :seen],
            vg[:, :, :seen],
            attn_mask=_block_mask(e - s, before + s, qg.dtype),
            enable_gqa=kg.shape[1] != qg.shape[1],
        )
    return out.view(b * nq, h, d)


def scatter_rows(q: torch.Tensor, parts: list[tuple[AttentionGroup, torch.Tensor]]) -> torch.Tensor:
    if len(parts) == 1 and parts[0][0].all_rows:
        return parts[0][1]
    out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    for g, o in parts:
        out.index_copy_(0, g.rows, o)
    return out


class TorchSDPA:
    name = "torch_sdpa"
    shares_prefixes = True  # cascade groups for forks' decodes (the module docstring)

    def plan(self, groups: list[AttentionGroup]) -> list[AttentionGroup]:
        return groups

    def __call__(self, q, k_cache, v_cache, plan: list[AttentionGroup]) -> torch.Tensor:
        return scatter_rows(q, [(g, _sdpa_group(q, k_cache, v_cache, g)) for g in plan])


class CompiledDecode:
    name = "compiled_decode"
    shares_prefixes = False  # the in-place kernel beats cascade groups (the module docstring)

    def __init__(self, ops) -> None:
        self.ops = ops  # the compiled kernels' module

    def plan(self, groups: list[AttentionGroup]) -> list[tuple[AttentionGroup, torch.Tensor | None]]:
        """Each group with its lengths tensor where the in-place decode kernel takes it, else None."""
        return [(g, torch.tensor(g.lengths) if g.n_query == 1 and g.prefix_slots is None else None) for g in groups]

    def __call__(self, q, k_cache, v_cache, plan) -> torch.Tensor:
        parts = []
        for g, lengths in plan:
            if lengths is None:
                parts.append((g, _sdpa_group(q, k_cache, v_cache, g)))
                continue
            qg = q if g.all_rows else q.index_select(0, g.rows)
            slots = g.context_slots.view(g.n_seqs, g.context_len)
            parts.append((g, self.ops.decode_attention(qg, k_cache, v_cache, slots, lengths, q.shape[-1] ** -0.5)))
        return scatter_rows(q, parts)


# --- CUDA: flash-attn's paged kernel ---------------------------------------------------------

FLASH_BLOCK = 256  # flash-attn 2's paged KV needs blocks of a multiple of 256 tokens


def _block_table(g: AttentionGroup, block: int) -> torch.Tensor | None:
    """[B, blocks] int32 ids of 256-slot pool blocks, or None if a context is not block-aligned."""
    if g.prefix_slots is not None:  # a shared-prefix group (built on CPU only) takes SDPA's path
        return None
    ctx = g.context_slots.view(g.n_seqs, g.context_len)
    n_blocks = -(-g.context_len // block)
    width = n_blocks * block
    if width > g.context_len:
        ctx = F.pad(ctx, (0, width - g.context_len), value=0)
    start = ctx[:, ::block]
    expect = start.repeat_interleave(block, dim=1) + torch.arange(block, device=ctx.device).repeat(n_blocks)
    lengths = torch.tensor(g.lengths, device=ctx.device)
    live = torch.arange(width, device=ctx.device)[None, :] < lengths[:, None]
    aligned = ((ctx == expect) | ~live).all() & ((start % block == 0) | ~live[:, ::block]).all()
    if not bool(aligned):
        return None
    return (start // block).to(torch.int32)


class FlashPaged:
    name = "flash_paged"
    shares_prefixes = False  # cascade groups are a CPU path

    def __init__(self) -> None:
        from flash_attn import flash_attn_with_kvcache

        self.kernel = flash_attn_with_kvcache

    def plan(self, groups: list[AttentionGroup]) -> list[tuple[AttentionGroup, torch.Tensor | None, torch.Tensor]]:
        out = []
        for g in groups:
            seqlens = torch.tensor(g.lengths, dtype=torch.int32, device=g.context_slots.device)
            out.append((g, _block_table(g, FLASH_BLOCK), seqlens))
        return out

    def __call__(self, q, k_cache, v_cache, plan) -> torch.Tensor:
        h, d = q.shape[1], q.shape[2]
        kvh = k_cache.shape[1]
        parts = []
        for g, table, seqlens in plan:
            if table is None or k_cache.shape[0] % FLASH_BLOCK or q.dtype not in (torch.float16, torch.bfloat16):
                parts.append((g, _sdpa_group(q, k_cache, v_cache, g)))
                continue
            qg = (q if g.all_rows else q.index_select(0, g.rows)).reshape(g.n_seqs, g.n_query, h, d)
            o = self.kernel(
                qg,
                k_cache.view(-1, FLASH_BLOCK, kvh, d),
                v_cache.view(-1, FLASH_BLOCK, kvh, d),
                cache_seqlens=seqlens,
                block_table=table,
                causal=True,  # bottom-right aligned: query i sees the context up to its own slot
            )
            parts.append((g, o.reshape(g.n_seqs * g.n_query, h, d)))
        return scatter_rows(q, parts)


# On CUDA: "triton" (the default: triton_backend.py, any page size), "flash" (flash-attn's paged kernel at
# 256-slot pages, SDPA otherwise) or "sdpa" (gather + SDPA), where installed; for comparisons.
CUDA_ATTENTION_ENV = "SYMPHONY_CUDA_ATTENTION"


def choose_backend(device: torch.device, cpu_ops=None):
    """On CUDA the Triton paged kernel (flash-attn's where it is installed and asked for: `for_pool`);
    on CPU the compiled decode kernel when `cpu_ops` (the compiled kernels, given for fp32 with a
    head size they take) is set; else torch SDPA."""
    if cpu_ops is not None and device.type == "cpu":
        return CompiledDecode(cpu_ops)
    if device.type == "cuda":
        choice = os.environ.get(CUDA_ATTENTION_ENV, "triton")
        if choice == "triton":
            try:
                from .triton_backend import TritonPaged
            except ImportError:  # a torch build without Triton
                choice = "flash"
            else:
                return TritonPaged()
        if choice == "flash":
            try:
                return FlashPaged()
            except ImportError:
                pass
    return TorchSDPA()


def for_pool(backend, page_size: int):
    """The backend once the pool's page size is known: the Triton kernel's tables then name pages, and
    where the pages are whole 256-slot blocks flash-attn's kernel (if installed) takes its place."""
    if getattr(backend, "name", None) != "triton_paged":
        return backend
    if page_size % FLASH_BLOCK == 0:
        try:
            return FlashPaged()
        except ImportError:
            pass
    backend.use_page_size(page_size)
    return backend
