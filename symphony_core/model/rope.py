"""RoPE tables from a config, as transformers computes them for each family.

The default rotation is computed here (no transformers import on the common path); every scaled kind —
llama3, linear, yarn, dynamic, longrope — comes from transformers' own `ROPE_INIT_FUNCTIONS`, given the
family's own config class, so the inverse frequencies and the attention scaling are transformers' to
the bit. Gemma 3 has two rotations (its local layers keep a base of 10,000 and no scaling): one table
per layer type. A partial rotary factor (Phi-4-mini's 0.75) gives tables over the rotated part only.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class RopeTable:
    inv_freq: torch.Tensor  # [rotary_dim / 2]
    scaling: float  # cos and sin are multiplied by it (yarn's and longrope's attention factor)
    # longrope: the frequencies transformers switches to once a sequence outgrows the original context.
    # Here a position uses them from `long_from` on (a file's earlier positions keep the K they were written with).
    long_inv_freq: torch.Tensor | None = None
    long_from: int = 0

    def cos_sin(self, n_positions: int) -> tuple[torch.Tensor, torch.Tensor]:
        """cos, sin [n_positions, rotary_dim] (the half-split layout of transformers' checkpoints), fp32."""
        pos = torch.arange(n_positions, dtype=torch.float32)
        freqs = pos[:, None] * self.inv_freq[None, :]
        if self.long_inv_freq is not None and n_positions > self.long_from:
            freqs[self.long_from :] = pos[self.long_from :, None] * self.long_inv_freq[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos() * self.scaling, emb.sin() * self.scaling


def _params(d: dict, layer_type: str | None) -> dict:
    params = d.get("rope_parameters") or d.get("rope_scaling") or {}
    if layer_type is not None and isinstance(params.get(layer_type), dict):
        params = params[layer_type]
    return params


def rope_kind(d: dict, layer_type: str | None = None) -> str:
    params = _params(d, layer_type)
    return params.get("rope_type", params.get("type", "default"))


def rotary_dim(d: dict, head_dim: int) -> int:
    factor = _params(d, None).get("partial_rotary_factor", d.get("partial_rotary_factor", 1.0))
    return int(head_dim * factor)


def rope_table(d: dict, head_dim: int, layer_type: str | None = None) -> RopeTable:
    kind = rope_kind(d, layer_type)
    if kind == "default":
        params = _params(d, layer_type)
        theta = params.get("rope_theta", d.get("rope_theta", 10000.0))
        dim = rotary_dim(d, head_dim)
        inv = 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
        return RopeTable(inv, 1.0)
    from transformers import AutoConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    cfg = AutoConfig.for_model(**{k: v for k, v in d.items() if k not in ("architectures", "transformers_version")})
    init = ROPE_INIT_FUNCTIONS[kind]
    inv, scaling = init(cfg, None, layer_type=layer_type)
    table = RopeTable(inv.detach().float().clone(), float(scaling))
    if kind == "longrope":
        original = _params(cfg.to_dict(), layer_type).get("original_max_position_embeddings")
        if original:
            long_inv, _ = init(cfg, None, seq_len=original + 1, layer_type=layer_type)
            table.long_inv_freq, table.long_from = long_inv.detach().float().clone(), int(original)
    return table
