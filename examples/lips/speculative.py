"""Speculative decoding with an n-gram (prompt-lookup) drafter, rejecting with `kv_truncate`.

The drafter needs no second model: it finds the most recent earlier occurrence of the last n
tokens of the text (prompt included) and proposes the k tokens that followed it — a good
guess whenever the output repeats or quotes its input. One `pred(..., outputs="all")`
verifies all k drafts: it feeds the newest token plus the drafts and returns the model's
choice after each. Drafts are accepted while they match the greedy choice; the first
mismatch is replaced by the model's own token, and `kv_truncate` drops the K/V of the
rejected drafts. The output is exactly greedy decoding's, in fewer `pred` calls.

    python examples/lips/speculative.py
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence


def ngram_draft(context: Sequence[int], k: int = 4, max_n: int = 3, min_n: int = 1) -> list[int]:
    """Up to k tokens that followed the latest earlier occurrence of the context's last n tokens
    (longest n first); [] when no n-gram of the tail occurs earlier."""
    L = len(context)
    for n in range(min(max_n, L - 1), min_n - 1, -1):
        tail = list(context[L - n:])
        for start in range(L - n - 1, -1, -1):  # latest earlier occurrence first
            if list(context[start:start + n]) == tail:
                follow = list(context[start + n:start + n + k])
                if follow:
                    return follow
    return []


def speculative(sym, prompt: str, max_tokens: int = 64, k: int = 4, max_n: int = 3) -> dict:
    eos = sym.eos_token_ids
    kv = sym.kv_create()
    ctx = sym.tokenize(prompt)
    t = sym.pred(kv, ctx).argmax()
    preds, drafted, accepted_total = 1, 0, 0
    out: list[int] = []
    while True:
        if t in eos:
            break
        out.append(t)
        if len(out) >= max_tokens:
            break
        draft = ngram_draft(ctx + out, k, max_n)[: max_tokens - len(out)]
        base = kv.len
        d = sym.pred(kv, [t] + draft, outputs="all")  # row i: the model's pick after draft[:i]
        preds += 1
        choices = d.argmax()  # outputs="all": one pick per fed token
        accepted = 0
        while accepted < len(draft) and choices[accepted] == draft[accepted] and draft[accepted] not in eos:
            accepted += 1
        drafted += len(draft)
        accepted_total += accepted
        if accepted < len(draft):
            sym.kv_truncate(kv, base + 1 + accepted)  # drop the rejected drafts' K/V
        out.extend(draft[:accepted])
        if len(out) >= max_tokens:
            out = out[:max_tokens]
            break
        t = choices[accepted]  # the model's own token after the accepted drafts (or a bonus one)
    sym.kv_close(kv)
    return {"tokens": out, "text": sym.detokenize(out), "preds": preds, "drafted": drafted,
            "accepted": accepted_total}


def greedy(sym, prompt: str, max_tokens: int = 64) -> dict:
    """Plain greedy decoding, one pred per token — the reference."""
    from symphony_core.lib import generate

    kv = sym.kv_create()
    g = generate(sym, kv, sym.tokenize(prompt), max_tokens)
    sym.kv_close(kv)
    return {"tokens": g.tokens, "text": g.text, "preds": g.n_preds}


PROMPT = ("Repeat the text exactly.\n"
          "Text: The quick brown fox jumps over the lazy dog. The dog sleeps in the sun all day long.\n"
          "Repeated text: The quick brown fox")


def main(argv: list[str] | None = None) -> None:
    import time

    from symphony_core import Engine

    ap = argparse.ArgumentParser(description="speculative decoding with an n-gram drafter")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("-k", type=int, default=4)
    args = ap.parse_args(argv)
    eng = Engine()
    t0 = time.perf_counter()
    ref = eng.run(greedy, PROMPT, args.max_tokens).result()
    t1 = time.perf_counter()
    res = eng.run(speculative, PROMPT, args.max_tokens, args.k).result()
    t2 = time.perf_counter()
    print(PROMPT + res["text"])
    print(f"--- identical to greedy: {res['tokens'] == ref['tokens']}")
    print(f"greedy: {ref['preds']} preds in {t1 - t0:.2f}s; speculative: {res['preds']} preds in {t2 - t1:.2f}s "
          f"for {len(res['tokens'])} tokens ({res['accepted']}/{res['drafted']} drafts accepted)")
    eng.shutdown()


if __name__ == "__main__":
    main()
