"""Our own Llama-family forward pass over the paged KV pool.

RMSNorm, RoPE (tables from the config, any scaling), grouped-query attention, SwiGLU, tied or
separate LM head. Q/K/V and gate/up are fused into one matmul each; the LM head runs only on
the rows whose logits were asked for.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from .attention import torch_sdpa
from .batch import ForwardBatch
from .config import ModelConfig


@dataclass
class LayerWeights:
    attn_norm: torch.Tensor
    wqkv: torch.Tensor
    wo: torch.Tensor
    mlp_norm: torch.Tensor
    w_gate_up: torch.Tensor
    w_down: torch.Tensor


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    xf = x.float()
    xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return weight * xf.to(x.dtype)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x: [T, heads, D]; cos/sin: [T, D]. The half-split rotation HF Llama checkpoints use."""
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    rotated = torch.cat((-x2, x1), dim=-1)
    return x * cos[:, None, :] + rotated * sin[:, None, :]


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
                        [w[p + "self_attn.q_proj.weight"], w[p + "self_attn.k_proj.weight"], w[p + "self_attn.v_proj.weight"]]
                    ).contiguous(),
                    wo=w[p + "self_attn.o_proj.weight"],
                    mlp_norm=w[p + "post_attention_layernorm.weight"],
                    w_gate_up=torch.cat([w[p + "mlp.gate_proj.weight"], w[p + "mlp.up_proj.weight"]]).contiguous(),
                    w_down=w[p + "mlp.down_proj.weight"],
                )
            )
        pos = torch.arange(cfg.max_positions, dtype=torch.float32)
        freqs = torch.outer(pos, cfg.inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        self.cos = (emb.cos() * cfg.rope_scaling).to(device=self.device, dtype=dtype)
        self.sin = (emb.sin() * cfg.rope_scaling).to(device=self.device, dtype=dtype)
        self.attention = torch_sdpa

    @torch.inference_mode()
    def forward(self, fb: ForwardBatch, k_cache: torch.Tensor, v_cache: torch.Tensor) -> torch.Tensor:
        """Run every token of the batch; write K/V to their slots; return logits [R, vocab]."""
        cfg = self.cfg
        t = fb.token_ids.shape[0]
        nq, nkv, d = cfg.n_heads * cfg.head_dim, cfg.n_kv_heads * cfg.head_dim, cfg.head_dim
        x = self.embed.index_select(0, fb.token_ids)
        cos = self.cos.index_select(0, fb.positions)
        sin = self.sin.index_select(0, fb.positions)
        for li, layer in enumerate(self.layers):
            h = rms_norm(x, layer.attn_norm, cfg.rms_eps)
            q, k, v = F.linear(h, layer.wqkv).split([nq, nkv, nkv], dim=-1)
            q = apply_rope(q.view(t, cfg.n_heads, d), cos, sin)
            k = apply_rope(k.view(t, cfg.n_kv_heads, d), cos, sin)
            k_cache[li].index_copy_(0, fb.write_slots, k)
            v_cache[li].index_copy_(0, fb.write_slots, v.view(t, cfg.n_kv_heads, d))
            a = self.attention(q, k_cache[li], v_cache[li], fb.groups)
            x = x + F.linear(a.view(t, nq), layer.wo)
            h = rms_norm(x, layer.mlp_norm, cfg.rms_eps)
            gate, up = F.linear(h, layer.w_gate_up).chunk(2, dim=-1)
            x = x + F.linear(F.silu(gate) * up, layer.w_down)
        x = rms_norm(x.index_select(0, fb.output_rows), self.norm, cfg.rms_eps)
        return F.linear(x, self.lm_head).float()
