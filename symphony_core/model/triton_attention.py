"""Paged attention as a Triton kernel: K/V read from the pool in place, through a table of pages.

One kernel covers single-token decodes and chunks of a prefill. A program takes a block of one
sequence's queries for one KV head: `BLOCK_Q` query tokens times the `G` query heads that share the
KV head (grouped-query attention), folded into the `BLOCK_M` rows of one tile, so K and V are read
once for all of them. It walks the sequence's context `BLOCK_N` slots at a time: slot j of the
context lives at pool row `table[b, j // page_size] * page_size + j % page_size`, so any page size
works (a table of slots, page size 1, too), and nothing is gathered out of the pool. Scores go
through an online softmax in fp32.

Query i of a q-token chunk over an L-slot context sits at cache index L - q + i and sees keys
0..L - q + i (causal within the chunk; a decode is the chunk q = 1). With a sliding window W (a
per-layer setting: Mistral, Gemma 3) it sees only the keys less than W behind it.

`paged_attention` launches it; `reference_attention` is the same function written with torch's SDPA
over gathered K/V, what the tests hold the kernel to. Triton's interpreter (`TRITON_INTERPRET=1`)
runs the kernel on the CPU: it cannot multiply bf16 tiles (its numpy has no bf16), so there the
products run in fp32 whatever the pool's dtype; on a GPU a half-precision pool multiplies in its
own dtype on the tensor cores, accumulating in fp32, and an fp32 pool in full fp32 (not TF32).
"""

from __future__ import annotations

import functools
import os

import torch
import torch.nn.functional as F
import triton
import triton.language as tl


def interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def _kernel_source(
    q_ptr,
    k_ptr,
    v_ptr,
    o_ptr,
    table_ptr,
    seq_lens_ptr,
    q_lens_ptr,
    q_rows_ptr,
    prog_seq_ptr,
    prog_q0_ptr,
    scale,
    window,
    page_size,
    stride_qt,
    stride_qh,
    stride_kt,
    stride_kh,
    stride_ot,
    stride_oh,
    stride_tb,
    G: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_Q: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    DOT_DTYPE: tl.constexpr,
    IEEE: tl.constexpr,
):
    pid = tl.program_id(0)
    kvh = tl.program_id(1)
    b = tl.load(prog_seq_ptr + pid)
    q0 = tl.load(prog_q0_ptr + pid)
    q_len = tl.load(q_lens_ptr + b)
    ctx = tl.load(seq_lens_ptr + b)
    row0 = tl.load(q_rows_ptr + b).to(tl.int64)

    m_off = tl.arange(0, BLOCK_M)
    qi = q0 + m_off // G  # the query token of each row, within its chunk
    head = kvh * G + m_off % G
    row_ok = (m_off < BLOCK_Q * G) & (qi < q_len)
    d = tl.arange(0, BLOCK_D)
    d_ok = d < HEAD_DIM
    q_addr = q_ptr + (row0 + qi)[:, None] * stride_qt + head[:, None] * stride_qh + d[None, :]
    q = tl.load(q_addr, mask=row_ok[:, None] & d_ok[None, :], other=0.0).to(DOT_DTYPE)
    pos = ctx - q_len + qi  # each row's own cache index

    # Keys this block may see: up to its last query's index, from its first query's window on.
    last = tl.minimum(ctx, ctx - q_len + q0 + BLOCK_Q)
    first = tl.maximum(ctx - q_len + q0 - window + 1, 0)
    first = tl.where(window > 0, (first // BLOCK_N) * BLOCK_N, 0)

    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
    n_off = tl.arange(0, BLOCK_N)
    table_row = table_ptr + b.to(tl.int64) * stride_tb
    for start in range(first, last, BLOCK_N):
        j = start + n_off
        j_ok = j < last
        page = tl.load(table_row + j // page_size, mask=j_ok, other=0).to(tl.int64)
        slot = page * page_size + j % page_size
        kv_mask = j_ok[:, None] & d_ok[None, :]
        k = tl.load(k_ptr + slot[:, None] * stride_kt + kvh * stride_kh + d[None, :], mask=kv_mask, other=0.0)
        if IEEE:  # fp32 tiles multiplied in fp32 (Triton's default for them is TF32)
            s = tl.dot(q, tl.trans(k.to(DOT_DTYPE)), input_precision="ieee") * scale
        else:
            s = tl.dot(q, tl.trans(k.to(DOT_DTYPE))) * scale  # [BLOCK_M, BLOCK_N], fp32
        seen = (j[None, :] <= pos[:, None]) & j_ok[None, :]
        seen = seen & ((window <= 0) | (pos[:, None] - j[None, :] < window))
        s = tl.where(seen, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # a row that has seen nothing yet
        p = tl.exp(s - m_safe[:, None])
        alpha = tl.exp(m_i - m_safe)
        l_i = l_i * alpha + tl.sum(p, 1)
        v = tl.load(v_ptr + slot[:, None] * stride_kt + kvh * stride_kh + d[None, :], mask=kv_mask, other=0.0)
        if IEEE:
            acc = acc * alpha[:, None] + tl.dot(p, v.to(DOT_DTYPE), input_precision="ieee")
        else:
            acc = acc * alpha[:, None] + tl.dot(p.to(DOT_DTYPE), v.to(DOT_DTYPE))
        m_i = m_new

    out = acc / tl.where(l_i == 0.0, 1.0, l_i)[:, None]
    o_addr = o_ptr + (row0 + qi)[:, None] * stride_ot + head[:, None] * stride_oh + d[None, :]
    tl.store(o_addr, out.to(o_ptr.dtype.element_ty), mask=row_ok[:, None] & d_ok[None, :])


@functools.cache
def _kernel(interpret: bool):
    """The jitted kernel; made on first use so that TRITON_INTERPRET is read then (one of each mode)."""
    del interpret  # the cache key: triton.jit reads the mode from the environment
    return triton.jit(_kernel_source)


def _pow2(n: int) -> int:
    return 1 << max(0, n - 1).bit_length()


class LaunchPlan:
    """The per-forward index tensors one launch reads: which sequence and first query each program takes.

    table [B, W] int: page ids (slot ids when page_size is 1). seq_lens [B]: each context's length,
    new tokens included. q_lens [B]: new tokens per sequence. q_rows [B]: the row of q / out holding
    each sequence's first new token (its others follow). prog_seq, prog_q0 [P]: per program. Built
    once per forward pass and shared by every layer; a CUDA graph keeps one for each batch size."""

    __slots__ = ("table", "seq_lens", "q_lens", "q_rows", "prog_seq", "prog_q0", "page_size", "block_q")

    def __init__(self, table, seq_lens, q_lens, q_rows, prog_seq, prog_q0, page_size: int, block_q: int) -> None:
        self.table = table
        self.seq_lens = seq_lens
        self.q_lens = q_lens
        self.q_rows = q_rows
        self.prog_seq = prog_seq
        self.prog_q0 = prog_q0
        self.page_size = page_size
        self.block_q = block_q


# Query tokens a program of a chunk takes (a decode's takes its one): with G query heads a KV head,
# 16 G rows of the tile.
CHUNK_BLOCK_Q = 16


def paged_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    plan: LaunchPlan,
    out: torch.Tensor,
    scale: float | None = None,
    window: int = 0,
) -> torch.Tensor:
    """Attention for the rows of `q` [T, H, D] the plan names, written into `out` [T, H, D] in place.

    k_cache, v_cache: one layer's pool [slots, KVH, D] (bf16, fp16 or fp32). window: 0, or a sliding
    window of that many keys (the query's own included)."""
    h, d = q.shape[1], q.shape[2]
    kvh = k_cache.shape[1]
    g = h // kvh
    assert q.stride(2) == 1 and k_cache.stride(2) == 1 and v_cache.stride() == k_cache.stride() and out.stride(2) == 1
    interp = interpreting()
    half = k_cache.dtype in (torch.float16, torch.bfloat16) and q.dtype == k_cache.dtype and not interp
    dot_dtype = {torch.float16: tl.float16, torch.bfloat16: tl.bfloat16}[k_cache.dtype] if half else tl.float32
    block_m = max(16, _pow2(plan.block_q * g))
    block_n = 64 if block_m <= 64 else 32
    warps = 4 if block_m <= 64 else 8
    grid = (plan.prog_seq.shape[0], kvh)
    _kernel(interp)[grid](
        q,
        k_cache,
        v_cache,
        out,
        plan.table,
        plan.seq_lens,
        plan.q_lens,
        plan.q_rows,
        plan.prog_seq,
        plan.prog_q0,
        d**-0.5 if scale is None else scale,
        window,
        plan.page_size,
        q.stride(0),
        q.stride(1),
        k_cache.stride(0),
        k_cache.stride(1),
        out.stride(0),
        out.stride(1),
        plan.table.stride(0),
        G=g,
        HEAD_DIM=d,
        BLOCK_D=max(16, _pow2(d)),
        BLOCK_Q=plan.block_q,
        BLOCK_M=block_m,
        BLOCK_N=block_n,
        DOT_DTYPE=dot_dtype,
        IEEE=not half,
        num_warps=warps,
    )
    return out


def reference_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    contexts: list[torch.Tensor],
    q_rows: list[int],
    q_lens: list[int],
    scale: float | None = None,
    window: int = 0,
) -> torch.Tensor:
    """What `paged_attention` computes, through SDPA over each sequence's gathered K/V (in fp32).

    contexts[b]: the pool slots of sequence b's whole context, in order; its q_lens[b] new tokens
    are rows q_rows[b].. of q. Returns [T, H, D] fp32 (rows no sequence names stay zero)."""
    h, d = q.shape[1], q.shape[2]
    out = torch.zeros(q.shape, dtype=torch.float32, device=q.device)
    for slots, r0, n in zip(contexts, q_rows, q_lens):
        length = slots.shape[0]
        qb = q[r0 : r0 + n].float().transpose(0, 1)[None]  # [1, H, n, D]
        kb = k_cache.index_select(0, slots).float().transpose(0, 1)[None]
        vb = v_cache.index_select(0, slots).float().transpose(0, 1)[None]
        pos = torch.arange(length - n, length, device=q.device)[:, None]
        key = torch.arange(length, device=q.device)[None, :]
        seen = key <= pos
        if window > 0:
            seen &= pos - key < window
        o = F.scaled_dot_product_attention(qb, kb, vb, attn_mask=seen, scale=scale, enable_gqa=kb.shape[1] != h)
        out[r0 : r0 + n] = o[0].transpose(0, 1)
    return out.view(-1, h, d)
