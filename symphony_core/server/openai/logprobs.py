"""Log-probabilities: one `TokenLogprob` per generated token, read from the `Dist` it was picked
from (after the grammar's mask, before the penalties), and their two OpenAI wire formats."""

from __future__ import annotations

from typing import TypedDict

import torch


class TokenLogprob(TypedDict):
    token: str
    logprob: float
    top: list[tuple[str, float]]  # the `top_logprobs` most likely tokens, most likely first


def token_logprob(sym, dist, token: int, top: int) -> TokenLogprob:
    logits = dist.logits if dist.logits.dim() == 1 else dist.logits[-1]
    lp = torch.log_softmax(logits.float(), -1)
    best: list[tuple[str, float]] = []
    if top:
        vals, ids = lp.topk(top)
        best = [(sym.detokenize([i]), float(v)) for i, v in zip(ids.tolist(), vals.tolist())]
    return {"token": sym.detokenize([token]), "logprob": max(float(lp[token]), -9999.0), "top": best}


def _entry(token: str, logprob: float) -> dict:
    return {"token": token, "logprob": logprob, "bytes": list(token.encode())}


def chat_logprobs(items: list[TokenLogprob]) -> dict:
    """`choices[i].logprobs` of a chat completion (or of one chunk)."""
    return {
        "content": [
            {**_entry(t["token"], t["logprob"]), "top_logprobs": [_entry(s, v) for s, v in t["top"]]} for t in items
        ],
        "refusal": None,
    }


def completion_logprobs(items: list[TokenLogprob], offset: int = 0) -> dict:
    """`choices[i].logprobs` of a text completion; `offset` is where these tokens' text starts."""
    offsets = []
    for t in items:
        offsets.append(offset)
        offset += len(t["token"])
    return {
        "tokens": [t["token"] for t in items],
        "token_logprobs": [t["logprob"] for t in items],
        "top_logprobs": [dict(t["top"]) for t in items],
        "text_offset": offsets,
    }
