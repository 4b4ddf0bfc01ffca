"""What one forward pass computes: the tokens of many `pred` calls and where their K/V live.

The model sees slots, never files: each sequence brings the slots its new tokens are written
to and the slots of its whole context (prefix + new tokens, in cache order). Attention runs
per *group*: all single-token decodes share one padded group; each multi-token chunk gets its
own, so a long prefill pads nobody.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class SeqInput:
    token_ids: list[int]
    positions: list[int]
    write_slots: list[int]
    context_slots: list[int]  # every slot of the file after this write, in order
    output_index: list[int]  # which of token_ids want logits


@dataclass
class AttentionGroup:
    query_rows: torch.Tensor  # [B, Q] rows of the flat token batch
    context_slots: torch.Tensor  # [B, L] cache slots (padding repeats slot 0 of the sequence)
    mask: torch.Tensor | None  # [B, 1, Q, L] True = may attend; None = attend to all
    causal: bool  # square causal block with no prefix: let SDPA build the mask


@dataclass
class ForwardBatch:
    token_ids: torch.Tensor  # [T]
    positions: torch.Tensor  # [T]
    write_slots: torch.Tensor  # [T]
    groups: list[AttentionGroup]
    output_rows: torch.Tensor  # [R]
    output_counts: list[int]  # outputs per sequence, to split logits back

    @classmethod
    def build(cls, seqs: list[SeqInput], device: torch.device | str = "cpu") -> "ForwardBatch":
        toks: list[int] = []
        pos: list[int] = []
        slots: list[int] = []
        outs: list[int] = []
        starts: list[int] = []
        for s in seqs:
            starts.append(len(toks))
            outs.extend(len(toks) + i for i in s.output_index)
            toks.extend(s.token_ids)
            pos.extend(s.positions)
            slots.extend(s.write_slots)
        decodes = [i for i, s in enumerate(seqs) if len(s.token_ids) == 1]
        chunks = [i for i, s in enumerate(seqs) if len(s.token_ids) > 1]
        groups = []
        if decodes:
            groups.append(_decode_group([seqs[i] for i in decodes], [starts[i] for i in decodes], device))
        for i in chunks:
            groups.append(_chunk_group(seqs[i], starts[i], device))

        def t(x: list[int]) -> torch.Tensor:
            return torch.tensor(x, dtype=torch.long, device=device)

        return cls(t(toks), t(pos), t(slots), groups, t(outs), [len(s.output_index) for s in seqs])


def _decode_group(seqs: list[SeqInput], starts: list[int], device) -> AttentionGroup:
    lens = [len(s.context_slots) for s in seqs]
    width = max(lens)
    table = [s.context_slots + [s.context_slots[0]] * (width - len(s.context_slots)) for s in seqs]
    mask = None
    if min(lens) != width:
        lengths = torch.tensor(lens, device=device)
        mask = (torch.arange(width, device=device)[None, :] < lengths[:, None])[:, None, None, :]
    rows = torch.tensor(starts, dtype=torch.long, device=device)[:, None]
    ctx = torch.tensor(table, dtype=torch.long, device=device)
    return AttentionGroup(rows, ctx, mask, causal=False)


def _chunk_group(s: SeqInput, start: int, device) -> AttentionGroup:
    q, length = len(s.token_ids), len(s.context_slots)
    rows = torch.arange(start, start + q, device=device)[None, :]
    ctx = torch.tensor([s.context_slots], dtype=torch.long, device=device)
    if q == length:
        return AttentionGroup(rows, ctx, None, causal=True)
    # Query i sits at cache index (length - q + i) and sees everything up to and including it.
    qi = torch.arange(q, device=device)[:, None] + (length - q)
    mask = (torch.arange(length, device=device)[None, :] <= qi)[None, None]
    return AttentionGroup(rows, ctx, mask, causal=False)
