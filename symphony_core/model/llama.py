"""Our own forward pass over the paged KV pool, for every family families.py lists.

RMSNorm, RoPE (tables from the config, any scaling), grouped-query attention, SwiGLU, tied or
separate LM head. Q/K/V and gate/up are fused into one matmul each; the LM head runs only on
the rows whose logits were asked for. The families' switches (config.py) sit in the same layer loop:
Q/K/V and output biases, per-head q/k RMSNorm, partial rotary, a RoPE table per layer type, sliding
windows per layer (sliding_window.py), Gemma's norms after each sublayer, scaled embeddings and GeGLU,
a softmax scale of the config's, and soft-capped logits. A model without any (`ModelConfig.plain`,
SmolLM2 and Llama) runs exactly the code it always ran.

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
from .families import layer_tensors
from .forward_batch import ForwardBatch
from .fused_decode import FusedDecode
from .huge_pages import into_huge_pages
from .quant import sgemm_weight
from .sliding_window import window_plan, windowed_attention


@dataclass
class LayerWeights:
    attn_norm: torch.Tensor
    wqkv: torch.Tensor  # [q + k + v, hidden]
    wo: torch.Tensor
    mlp_norm: torch.Tensor
    w_gate_up: torch.Tensor  # [2 * intermediate, hidden]
    w_down: torch.Tensor
    bqkv: torch.Tensor | None = None  # Qwen2's Q/K/V biases
    bo: torch.Tensor | None = None
    q_norm: torch.Tensor | None = None  # per-head RMSNorm of q and k before RoPE (Qwen3, Gemma 3)
    k_norm: torch.Tensor | None = None
    post_attn_norm: torch.Tensor | None = None  # Gemma's norms of each sublayer's output
    post_mlp_norm: torch.Tensor | None = None


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
        # Gemma's norms multiply by (1 + w): folded into the weight once (the same fp32 sum transformers makes).
        plus_one = cfg.gemma_norms
        self.embed = w["model.embed_tokens.weight"]
        self.norm = w["model.norm.weight"] + 1 if plus_one else w["model.norm.weight"]
        self.lm_head = self.embed if cfg.tie_embeddings or "lm_head.weight" not in w else w["lm_head.weight"]
        # Gemma scales the embeddings by sqrt(hidden), rounded to the weights' dtype as transformers does.
        self.embed_scale = torch.tensor(cfg.hidden_size**0.5).to(dtype).item() if cfg.gemma_norms else None
        self.layers = []
        for i in range(cfg.n_layers):
            t = layer_tensors(cfg.family, w, i)
            for k in ("attn_norm", "mlp_norm", "q_norm", "k_norm", "post_attn_norm", "post_mlp_norm"):
                if plus_one and (norm_w := t[k]) is not None:
                    t[k] = norm_w + 1
            self.layers.append(LayerWeights(**t))  # type: ignore[arg-type]
        if self.device.type == "cpu":  # a decode step streams every weight: fewer TLB misses (huge_pages.py)
            self._into_huge_pages()
        # RoPE tables [max_positions, rotary_dim], one per name in cfg.layer_rope; sin carries the rotation's sign,
        # so that rotate_half(x) * sin == swap_halves(x) * signed_sin.
        self.cos: dict[str, torch.Tensor] = {}
        self.sin: dict[str, torch.Tensor] = {}
        for name, table in cfg.rope.items():
            cos, sin = table.cos_sin(cfg.max_positions)
            half = sin.shape[-1] // 2
            self.cos[name] = cos.to(device=self.device, dtype=dtype)
            self.sin[name] = torch.cat((-sin[:, :half], sin[:, half:]), dim=-1).to(device=self.device, dtype=dtype)
        self.layer_rope = cfg.layer_rope
        self.pad = self.device.type == "cpu"  # the row padding is an MKL effect
        self.weight_format = "fp32"  # weight_formats.apply_weight_format swaps in quantised linears
        self.onednn_from = 0  # from how many rows fp32 matmuls run oneDNN's kernel (0: never); weight_formats.py
        # The fused steps (module docstring): fp32 on CPU, where the compiled kernels load.
        fused = self.device.type == "cpu" and dtype == torch.float32
        self.ops = compiled() if fused else None
        self.attention = choose_backend(self.device, self.ops if cfg.head_dim in (64, 128) else None)
        if cfg.windows:  # a window masks keys per query: no shared-prefix groups (sliding_window.py)
            self.attention.shares_prefixes = False
        # Llama's own layer, which the fused decode stack computes; a family's switches run the layer loop.
        extras = ("bqkv", "bo", "q_norm", "post_attn_norm")
        self.plain = cfg.plain and not any(getattr(layer, a) is not None for layer in self.layers for a in extras)
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
        """x [T, heads, D]; cos/sin [T, 1, R]. The half-split rotation of HF checkpoints over the first R dims
        (all of them but for partial rotary)."""
        r = cos.shape[-1]
        if r < x.shape[-1]:
            return torch.cat((PagedLlama.rope(x[..., :r], cos, sin), x[..., r:]), dim=-1)
        half = r // 2
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
        x = self.embed.index_select(0, fb.token_ids)
        if self.embed_scale is not None:
            x = x * self.embed_scale
        x = pad_rows(x, rows)  # residual stream [rows, hidden]
        ropes = {
            name: (
                cos.index_select(0, fb.positions)[:, None, :],
                self.sin[name].index_select(0, fb.positions)[:, None, :],
            )
            for name, cos in self.cos.items()
        }
        plan: list = self.attention.plan(fb.groups)  # each backend reads back its own plan
        stack = self.fused.stack(rows) if rows == t and self._one_decode_group(plan) else None
        if stack is not None:  # every layer in one compiled call (fused_decode.py)
            g, lengths = plan[0]
            slots = g.context_slots.view(g.n_seqs, g.context_len)
            cos, sin = ropes[self.layer_rope[0]]
            x = stack.run(x, cos[:, 0], sin[:, 0], fb.write_slots, k_cache, v_cache, slots, lengths, cfg.head_dim**-0.5)
        else:
            windows = (
                {}
                if getattr(self.attention, "takes_window", False)
                else {w: window_plan(fb.groups, w) for w in cfg.windows}
            )
            self._layers(x, fb, ropes, plan, windows, k_cache, v_cache, rows)
        x = self.add_norm(x.index_select(0, fb.output_rows), None, self.norm)
        r = x.shape[0]
        logits = logits_rows(pad_rows(x, self.rows_for(r)), self.lm_head, r).float()
        if cfg.final_softcap is not None:
            logits = torch.tanh(logits / cfg.final_softcap) * cfg.final_softcap
        return logits

    def _qk(self, qkv: torch.Tensor, layer: LayerWeights, cos, sin, fb: ForwardBatch, kc, vc) -> torch.Tensor:
        """RoPE on q and k (after their per-head norms, where the family has them); K/V written to their slots. q [T, H, D]."""
        cfg = self.cfg
        t = qkv.shape[0]
        h, kvh, d = cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
        if self.ops is not None and layer.q_norm is None and cos.shape[-1] == d:
            return self.ops.rope_write_kv(qkv, cos[:, 0], sin[:, 0], fb.write_slots, kc, vc, h)
        qk = qkv[:, : (h + kvh) * d].view(t, h + kvh, d)
        if layer.q_norm is not None and layer.k_norm is not None:
            qk = torch.cat(
                (rms_norm(qk[:, :h], layer.q_norm, cfg.rms_eps), rms_norm(qk[:, h:], layer.k_norm, cfg.rms_eps)), 1
            )
        qk = self.rope(qk, cos, sin)
        kc.index_copy_(0, fb.write_slots, qk[:, h:].to(kc.dtype))
        vc.index_copy_(0, fb.write_slots, qkv[:, (h + kvh) * d :].reshape(t, kvh, d).to(vc.dtype))
        return qk[:, :h]

    def _mlp_act(self, gate_up: torch.Tensor, rows: int, w_down) -> torch.Tensor:
        """SwiGLU's (or GeGLU's) activation of the feature-major gate/up [2 * I, rows], as the down projection takes it."""
        if self.cfg.hidden_act != "silu":
            gate, up = gate_up.chunk(2)
            return F.gelu(gate, approximate="tanh").mul_(up).t()
        if self.ops is not None:
            # Feature-major where MKL's sgemm runs the down projection (`W·xᵀ` then reads it as it is,
            # ~10x faster than gathering each row's values); row-major for every other kernel.
            return self.ops.silu_mul(gate_up.t(), feature_major=sgemm_weight(w_down, rows) is not None)
        gate, up = gate_up.chunk(2)
        if rows < ROW_MAJOR_ACT_BELOW:
            act = torch.empty(rows, gate.shape[0], dtype=gate.dtype, device=gate.device)
            torch.mul(F.silu(gate), up, out=act.t())
            return act
        return F.silu(gate).mul_(up).t()

    def _layers(self, x, fb: ForwardBatch, ropes, plan, windows, k_cache, v_cache, rows: int) -> None:
        """Every layer, a call at a time; the residual stream `x` [rows, hidden] is updated in place."""
        cfg = self.cfg
        t = fb.token_ids.shape[0]
        h, d = cfg.n_heads, cfg.head_dim
        # Padded rows of the attention output stay zero: each layer copies its t real rows in
        # (one call, where F.pad would allocate, fill and copy every layer).
        attn_out = torch.zeros(rows, h * d, dtype=x.dtype, device=x.device) if rows != t else None
        q_scale = cfg.query_scale / d**-0.5  # the backends scale by head_dim ** -0.5
        in_kernel = getattr(self.attention, "takes_window", False)  # the Triton kernel masks a window itself
        delta = None  # the last sublayer's output, added to x by the next norm (one fused call)
        for li, layer in enumerate(self.layers):
            # Token-major views of the feature-major result: RoPE writes q and k row-major
            # (attention wants D contiguous); v is only copied into the cache.
            qkv = project(self.add_norm(x, delta, layer.attn_norm), layer.wqkv)[:, :t].t()
            if layer.bqkv is not None:
                qkv = qkv + layer.bqkv
            kc, vc = k_cache[li], v_cache[li]
            cos, sin = ropes[self.layer_rope[li]]
            q = self._qk(qkv, layer, cos, sin, fb, kc, vc)
            if q_scale != 1.0:
                q = q * q_scale
            window = cfg.layer_windows[li]
            if window and in_kernel:
                a = self.attention(q, kc, vc, plan, window=window)
            elif window and (wplan := windows.get(window)) is not None:
                a = windowed_attention(q, kc, vc, wplan)
            else:
                a = self.attention(q, kc, vc, plan)
            if attn_out is None:
                a = a.reshape(t, h * d)
            else:
                attn_out[:t].copy_(a.reshape(t, h * d))
                a = attn_out
            o = project(a, layer.wo).t()
            if layer.bo is not None:
                o = o + layer.bo
            if layer.post_attn_norm is not None:
                o = rms_norm(o, layer.post_attn_norm, cfg.rms_eps)
            gate_up = project(self.add_norm(x, o, layer.mlp_norm), layer.w_gate_up)
            delta = project(self._mlp_act(gate_up, rows, layer.w_down), layer.w_down).t()
            if layer.post_mlp_norm is not None:
                delta = rms_norm(delta, layer.post_mlp_norm, cfg.rms_eps)
        assert delta is not None  # a model has layers
        x.add_(delta)
