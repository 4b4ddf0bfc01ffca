"""Our own Llama-family forward pass over the paged KV pool.

RMSNorm, RoPE (tables from the config, any scaling), grouped-query attention, SwiGLU, tied or
separate LM head. Q/K/V and gate/up are fused into one matmul each; the LM head runs only on
the rows whose logits were asked for.

Matmul layout (measured with MKL on 2 CPU threads, SmolLM2-135M; see bench/RESULTS.md):
- Every projection is `W @ xᵀ` with x row-major, giving a feature-major [out, T] result.
  For the 2-64 rows of batched decode MKL runs this 20-40% faster than `x @ Wᵀ` (F.linear),
  and equally fast for long prefills. Results are read through transposed views.
- Small batches are padded with zero rows to a count MKL streams the weights fastest at
  (`matmul_rows`): one decode row runs 25-30% faster as two. Padded rows stay exactly zero
  through every layer and are never attended to or written to the cache.

On CPU in fp32 with Symphony's compiled kernels loaded (cpu_kernels/, `make kernels`), a layer's small
steps run fused, one call each (decode_ops.cpp): the residual add with the RMSNorm after it, RoPE
with the K/V write, SwiGLU's activation, and decode attention over the pool in place. At decode
sizes the torch formulas below cost ~25 calls a layer whose dispatch outweighs their arithmetic.
They stay the path everywhere else (CUDA, half precision, `SYMPHONY_CPU_KERNELS=torch`). A decode step
whose projections all run compiled kernels goes one step further: all its layers are one call
(fused_decode.py), the same kernels chained in C++.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from .attention import CompiledDecode, choose_backend
from .config import ModelConfig
from .cpu_kernels import compiled
from .forward_batch import ForwardBatch
from .fused_decode import FusedDecode
from .huge_pages import into_huge_pages
from .quant import sgemm_weight


@dataclass
class LayerWeights:
    attn_norm: torch.Tensor
    wqkv: torch.Tensor  # [q + k + v, hidden]
    wo: torch.Tensor
    mlp_norm: torch.Tensor
    w_gate_up: torch.Tensor  # [2 * intermediate, hidden]
    w_down: torch.Tensor


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    if x.dtype == torch.float32:
        # HF's formula in five tensor calls (two of them in place on a [T, 1] column): CPU
        # F.rms_norm is a composite of ~10 calls, and at decode sizes each call's dispatch
        # costs more than its arithmetic (61 norms a step).
        r = x.square().sum(-1, keepdim=True).div_(x.shape[-1]).add_(eps).rsqrt_()
        return (x * r).mul_(weight)
    xf = x.float()  # half precision: normalise in fp32 and round before the weight, as HF does
    return weight * (xf * torch.rsqrt(xf.square().mean(-1, keepdim=True) + eps)).to(x.dtype)


def matmul_rows(t: int) -> int:
    """Rows to run a T-row CPU matmul at. Below 64 rows the weight read dominates and MKL's
    sgemm streams it fastest at 2, 4 or a multiple of 8 rows: over the 30 layers, 1 row
    takes 30 ms but 2 rows 22 ms; 12 rows 63 ms but 16 rows 45 ms."""
    if t >= 64 or 5 <= t <= 8:
        return t
    if t <= 4:
        return 2 if t <= 2 else 4
    return -(-t // 8) * 8


def pad_rows(x: torch.Tensor, rows: int) -> torch.Tensor:
    return x if x.shape[0] == rows else F.pad(x, (0, 0, 0, rows - x.shape[0]))


# From this many output rows the LM head's sgemm runs a block of the vocabulary at a time (see `logits_rows`).
LOGITS_IN_BLOCKS_FROM = 16
VOCAB_BLOCK = 1024  # [1024, rows] fp32 of a block's result stays in L2 for its transposed copy


def logits_rows(x: torch.Tensor, head, r: int) -> torch.Tensor:
    """The LM head on the first `r` rows of `x` (padded as the matmul likes): logits [r, vocab], row-major.

    MKL's `W·xᵀ` leaves them feature-major, [vocab, rows]; copying that transposed, 200 KB per row
    from all over memory, cost more than the multiply's own time at wide batches (30 ms on top of
    45 at 112 rows here). Run a block of the vocabulary at a time instead and transpose each block
    while it is in cache: the same products (bit for bit), the copy almost free. (On the CPU: a
    GPU's transposed copy costs little, and many small launches would.)"""
    w = sgemm_weight(head, x.shape[0])
    if w is None or r < LOGITS_IN_BLOCKS_FROM or x.device.type != "cpu":  # a GPU transposes fast
        return project(x, head)[:, :r].t().contiguous()
    out = torch.empty(r, w.shape[0], dtype=x.dtype, device=x.device)
    xt = x.t()
    for v0 in range(0, w.shape[0], VOCAB_BLOCK):
        block = torch.mm(w[v0 : v0 + VOCAB_BLOCK], xt)
        out[:, v0 : v0 + block.shape[0]].copy_(block[:, :r].t())
    return out


def project(x: torch.Tensor, w) -> torch.Tensor:
    """x [T, in] -> W xᵀ [out, T] feature-major. `w` is an fp32 tensor (the exact path) or a
    quantised linear from weight_formats.py (whose [T, out] result is returned transposed)."""
    if isinstance(w, torch.Tensor):
        return torch.mm(w, x.t())
    return w(x).t()


# Below this many rows the down projection wants its input row-major (W @ xᵀ is 2x faster
# than W @ x there); above, both run alike and writing it transposed would cost 3x the multiply.
ROW_MAJOR_ACT_BELOW = 16


class PagedLlama:
    def __init__(self, cfg: ModelConfig, weights: dict[str, torch.Tensor], device, dtype) -> None:
        self.cfg = cfg
        self.device = torch.device(device)
        self.dtype = dtype
        w = weights
        self.embed = w["model.embed_tokens.weight"]
        self.norm = w["model.norm.weight"]
        self.lm_head = self.embed if cfg.tie_embeddings or "lm_head.weight" not in w else w["lm_head.weight"]
        self.layers = []
        for i in range(cfg.n_layers):
            p = f"model.layers.{i}."
            self.layers.append(
                LayerWeights(
                    attn_norm=w[p + "input_layernorm.weight"],
                    wqkv=torch.cat(
                        [
                            w[p + "self_attn.q_proj.weight"],
                            w[p + "self_attn.k_proj.weight"],
                            w[p + "self_attn.v_proj.weight"],
                        ]
                    ).contiguous(),
                    wo=w[p + "self_attn.o_proj.weight"].contiguous(),
                    mlp_norm=w[p + "post_attention_layernorm.weight"],
                    w_gate_up=torch.cat([w[p + "mlp.gate_proj.weight"], w[p + "mlp.up_proj.weight"]]).contiguous(),
                    w_down=w[p + "mlp.down_proj.weight"].contiguous(),
                )
            )
        if self.device.type == "cpu":  # a decode step streams every weight: fewer TLB misses (huge_pages.py)
            self._into_huge_pages()
        # RoPE tables [max_positions, head_dim]; sin carries the rotation's sign, so that
        # rotate_half(x) * sin == swap_halves(x) * signed_sin.
        pos = torch.arange(cfg.max_positions, dtype=torch.float32)
        freqs = torch.outer(pos, cfg.inv_freq)
        cos, sin = freqs.cos() * cfg.rope_scaling, freqs.sin() * cfg.rope_scaling
        self.cos = torch.cat((cos, cos), dim=-1).to(device=self.device, dtype=dtype)
        self.sin = torch.cat((-sin, sin), dim=-1).to(device=self.device, dtype=dtype)
        self.pad = self.device.type == "cpu"  # the row padding is an MKL effect
        self.weight_format = "fp32"  # weight_formats.apply_weight_format swaps in quantised linears
        self.onednn_from = 0  # from how many rows fp32 matmuls run oneDNN's kernel (0: never); weight_formats.py
        # The fused steps (module docstring): fp32 on CPU, where the compiled kernels load.
        fused = self.device.type == "cpu" and dtype == torch.float32
        self.ops = compiled() if fused else None
        self.attention = choose_backend(self.device, self.ops if cfg.head_dim in (64, 128) else None)
        self.fused = FusedDecode(self)  # decode steps' layers as one compiled call, where they can be

    def _one_decode_group(self, plan: list) -> bool:
        """The batch is single-token decodes only, in one group the compiled kernel reads in place."""
        if not isinstance(self.attention, CompiledDecode) or len(plan) != 1:
            return False
        g, lengths = plan[0]
        return lengths is not None and g.all_rows

    def _into_huge_pages(self) -> None:
        """Move the embedding, the LM head and every projection into one huge-page mapping (same values)."""
        attrs = ("wqkv", "wo", "w_gate_up", "w_down")
        tied = self.lm_head is self.embed
        tensors = [self.embed] + ([] if tied else [self.lm_head])
        tensors += [getattr(layer, a) for layer in self.layers for a in attrs]
        moved = iter(into_huge_pages(tensors))
        self.embed = next(moved)
        self.lm_head = self.embed if tied else next(moved)
        for layer in self.layers:
            for a in attrs:
                setattr(layer, a, next(moved))

    def rows_for(self, t: int) -> int:
        return matmul_rows(t) if self.pad else t

    @staticmethod
    def rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        """x [T, heads, D]; cos/sin [T, 1, D]. The half-split rotation of HF Llama checkpoints."""
        half = x.shape[-1] // 2
        swapped = torch.cat((x[..., half:], x[..., :half]), dim=-1)  # row-major, whatever x's strides
        # The row-major operand first: the result takes its layout (x may be a transposed view).
        return torch.addcmul(swapped * sin, x, cos)

    def add_norm(self, x: torch.Tensor, delta: torch.Tensor | None, weight: torch.Tensor) -> torch.Tensor:
        """x += delta (in place; none before the first layer), then RMSNorm(x)."""
        eps = self.cfg.rms_eps
        if self.ops is not None:
            return self.ops.rms_norm(x, weight, eps) if delta is None else self.ops.add_rms_norm(x, delta, weight, eps)
        if delta is not None:
            x.add_(delta)
        return rms_norm(x, weight, eps)

    @torch.inference_mode()
    def forward(self, fb: ForwardBatch, k_cache: torch.Tensor, v_cache: torch.Tensor) -> torch.Tensor:
        """Run every token of the batch; write K/V to their slots; return logits [R, vocab]."""
        cfg = self.cfg
        t = fb.token_ids.shape[0]
        rows = self.rows_for(t)
        x = pad_rows(self.embed.index_select(0, fb.token_ids), rows)  # residual stream [rows, hidden]
        cos = self.cos.index_select(0, fb.positions)[:, None, :]
        sin = self.sin.index_select(0, fb.positions)[:, None, :]
        plan: list = self.attention.plan(fb.groups)  # each backend reads back its own plan
        stack = self.fused.stack(rows) if rows == t and self._one_decode_group(plan) else None
        if stack is not None:  # every layer in one compiled call (fused_decode.py)
            g, lengths = plan[0]
            slots = g.context_slots.view(g.n_seqs, g.context_len)
            x = stack.run(x, cos[:, 0], sin[:, 0], fb.write_slots, k_cache, v_cache, slots, lengths, cfg.head_dim**-0.5)
        else:
            self._layers(x, fb, cos, sin, plan, k_cache, v_cache, rows)
        x = self.add_norm(x.index_select(0, fb.output_rows), None, self.norm)
        r = x.shape[0]
        return logits_rows(pad_rows(x, self.rows_for(r)), self.lm_head, r).float()

    def _layers(self, x, fb: ForwardBatch, cos, sin, plan, k_cache, v_cache, rows: int) -> None:
        """Every layer, a call at a time; the residual stream `x` [rows, hidden] is updated in place."""
        cfg = self.cfg
        t = fb.token_ids.shape[0]
        h, kvh, d = cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
        # Padded rows of the attention output stay zero: each layer copies its t real rows in
        # (one call, where F.pad would allocate, fill and copy every layer).
        attn_out = torch.zeros(rows, h * d, dtype=x.dtype, device=x.device) if rows != t else None
        act = None  # SwiGLU's row-major output for small batches, reused by every layer (torch path)
        cos2, sin2 = cos[:, 0], sin[:, 0]
        ops = self.ops
        delta = None  # the last sublayer's output, added to x by the next norm (one fused call)
        for li, layer in enumerate(self.layers):
            # Token-major views of the feature-major result: RoPE writes q and k row-major
            # (attention wants D contiguous); v is only copied into the cache.
            qkv = project(self.add_norm(x, delta, layer.attn_norm), layer.wqkv)[:, :t].t()
            kc, vc = k_cache[li], v_cache[li]
            if ops is not None:
                q = ops.rope_write_kv(qkv, cos2, sin2, fb.write_slots, kc, vc, h)
            else:
                qk = self.rope(qkv[:, : (h + kvh) * d].view(t, h + kvh, d), cos, sin)
                kc.index_copy_(0, fb.write_slots, qk[:, h:].to(kc.dtype))
                vc.index_copy_(0, fb.write_slots, qkv[:, (h + kvh) * d :].view(t, kvh, d).to(vc.dtype))
                q = qk[:, :h]
            a = self.attention(q, kc, vc, plan)
            if attn_out is None:
                a = a.reshape(t, h * d)
            else:
                attn_out[:t].copy_(a.reshape(t, h * d))
                a = attn_out
            gate_up = project(self.add_norm(x, project(a, layer.wo).t(), layer.mlp_norm), layer.w_gate_up)
            if ops is not None:
                # Feature-major where MKL's sgemm runs the down projection (`W·xᵀ` then reads it as it is,
                # ~10x faster than gathering each row's values); row-major for every other kernel.
                swiglu = ops.silu_mul(gate_up.t(), feature_major=sgemm_weight(layer.w_down, rows) is not None)
                delta = project(swiglu, layer.w_down).t()
            elif rows < ROW_MAJOR_ACT_BELOW:
                gate, up = gate_up.chunk(2)
                if act is None:
                    act = torch.empty(rows, gate.shape[0], dtype=x.dtype, device=x.device)
                torch.mul(F.silu(gate), up, out=act.t())
                delta = project(act, layer.w_down).t()
            else:
                gate, up = gate_up.chunk(2)
                delta = project(F.silu(gate).mul_(up).t(), layer.w_down).t()
        assert delta is not None  # a model has layers
        x.add_(delta)
