"""Log-probabilities: one `TokenLogprob` per generated token, read from the `Dist` it was picked
from (after the grammar's mask, before the penalties), and their two OpenAI wire formats.

A token's `bytes` are its exact bytes (text.py), so the bytes of a reply's tokens joined are the
reply's UTF-8 text even where one character spans several tokens (each of which prints as U+FFFD).
"""

from __future__ import annotations

from typing import TypedDict

import torch

from .text import TextCodec

FLOOR = -9999.0  # a token the grammar masked has log-probability -inf; JSON has no infinity


class TopEntry(TypedDict):
    token: str
    logprob: float
    bytes: list[int]


class TokenLogprob(TypedDict):
    token: str
    logprob: float
    bytes: list[int]
    top: list[TopEntry]  # the `top_logprobs` most likely tokens, most likely first


def _entry(sym, tok: int, lp: float, codec: TextCodec | None) -> TopEntry:
    text = sym.detokenize([tok])
    raw = codec.token_bytes(tok) if codec is not None else text.encode()
    return {"token": text, "logprob": max(lp, FLOOR), "bytes": list(raw)}


def token_logprob(sym, dist, token: int, top: int, codec: TextCodec | None = None) -> TokenLogprob:
    logits = dist.logits if dist.logits.dim() == 1 else dist.logits[-1]
    lp = torch.log_softmax(logits.float(), -1)
    best: list[TopEntry] = []
    if top:
        vals, ids = lp.topk(top)
        best = [_entry(sym, i, v, codec) for i, v in zip(ids.tolist(), vals.tolist())]
    return {**_entry(sym, token, float(lp[token]), codec), "top": best}


def _wire(t: TopEntry) -> dict:
    return {"token": t["token"], "logprob": t["logprob"], "bytes": t["bytes"]}


def chat_logprobs(items: list[TokenLogprob]) -> dict:
    """`choices[i].logprobs` of a chat completion (or of one chunk)."""
    return {
        "content": [{**_wire(t), "top_logprobs": [_wire(s) for s in t["top"]]} for t in items],
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
        "top_logprobs": [{s["token"]: s["logprob"] for s in t["top"]} for t in items],
        "text_offset": offsets,
    }
