"""Built-in LIPs behind the OpenAI-compatible endpoints: ordinary programs over `sym`.

`complete_text` generates from a prompt and `sym.send`s `{"text": ...}` pieces as they become
safe to show (whole UTF-8 characters, never a prefix of a stop string), then one
`{"finish_reason": ..., "usage": ...}`; it returns the same summary with the full text.
`chat_complete` renders the chat template first. They run in the engine process (they are
the server's own code) as the requesting user, through the same scheduler as any LIP.
"""

from __future__ import annotations

from typing import Any, Callable

from ..model.sampling import Sampler


def complete_text(sym, prompt: str, max_tokens: int = 16, temperature: float = 1.0, top_p: float = 1.0,
                  stop: list[str] | None = None, seed: int | None = None,
                  before_pred: Callable[[int], None] | None = None) -> dict[str, Any]:
    stops = [s for s in (stop or []) if s]
    hold = max((len(s) for s in stops), default=1) - 1
    kv = sym.kv_create()
    prompt_ids = sym.tokenize(prompt)
    toks = prompt_ids
    sampler = None if temperature == 0 else Sampler(temperature=temperature, top_p=top_p, seed=seed)
    out: list[int] = []
    shown = 0
    text = ""
    finish = "length"
    try:
        for _ in range(max_tokens):
            if before_pred is not None:
                before_pred(len(toks))
            d = sym.pred(kv, toks, sampler=sampler)
            t = d.token if sampler is not None else d.argmax()
            if t in sym.eos_token_ids:
                finish = "stop"
                break
            out.append(t)
            text = sym.detokenize(out)
            cut = min((i for i in (text.find(s) for s in stops) if i >= 0), default=-1)
            if cut >= 0:
                text = text[:cut]
                finish = "stop"
                break
            safe = len(text) - hold
            if text.endswith("\ufffd"):  # the rest of a multi-byte character is still to come
                safe = min(safe, len(text) - 1)
            if safe > shown:
                sym.send({"text": text[shown:safe]})
                shown = safe
            toks = [t]
    finally:
        sym.kv_close(kv)
    if len(text) > shown:
        sym.send({"text": text[shown:]})
    usage = {"prompt_tokens": len(prompt_ids), "completion_tokens": len(out),
             "total_tokens": len(prompt_ids) + len(out)}
    sym.send({"finish_reason": finish, "usage": usage})
    return {"text": text, "finish_reason": finish, "usage": usage}


def chat_complete(sym, messages: list[dict], **kw) -> dict[str, Any]:
    return complete_text(sym, sym.chat_template(messages, True), **kw)
