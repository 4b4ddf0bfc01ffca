"""Built-in LIPs the CLI ships with (the demo); each is an ordinary LIP like any user's."""

from __future__ import annotations


def chat_answer(sym, question: str, max_tokens: int = 64, system: str | None = None) -> str:
    """Answer one chat question greedily, streaming each piece of text with `sym.send`."""
    messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": question}]
    kv = sym.kv_create()
    toks = sym.tokenize(sym.chat_template(messages))
    out: list[int] = []
    shown = ""
    for _ in range(max_tokens):
        t = sym.pred(kv, toks).argmax()
        if t in sym.eos_token_ids:
            break
        out.append(t)
        text = sym.detokenize(out)
        if not text.endswith("\ufffd"):  # wait for the rest of a multi-byte character
            sym.send(text[len(shown) :])
            shown = text
        toks = [t]
    sym.kv_close(kv)
    return sym.detokenize(out)
