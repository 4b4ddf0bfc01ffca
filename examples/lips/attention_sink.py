"""Attention sinks / windowed generation by positions: endless text in a bounded number of pages.

StreamingLLM (Xiao et al., 2023) observed that a model keeps working on a sliding window as
long as the first few tokens — the *attention sinks* — stay in view. Here the sinks are a KV
file of their own (the first `sink` tokens, positions 0..sink-1). Decoding appends to a
working file; when it holds `sink + window` tokens, the program forks the sink file, re-feeds
the most recent `keep` tokens with explicit `positions` right after the sinks (so the model
sees a contiguous sequence, and no position ever exceeds sink + window), and closes the old
file. The pages held never exceed a bound set by `sink` and `window`, however long the text.

Until the first slide, the output is exactly plain greedy decoding (same tokens, same cache).

    python examples/lips/attention_sink.py --window 32 --tokens 128
"""

from __future__ import annotations

import argparse


def sink_generate(sym, prompt: str, max_tokens: int = 128, sink: int = 4, window: int = 32,
                  keep: int | None = None) -> dict:
    """Greedy decoding in a window of `sink + window` cache slots; returns the text and the
    page and position bookkeeping that shows it stayed bounded."""
    keep = window // 2 if keep is None else keep
    if not 0 < keep < window:
        raise ValueError("keep must be in (0, window)")
    toks = sym.tokenize(prompt)
    if len(toks) > sink + window:
        raise ValueError(f"the prompt ({len(toks)} tokens) must fit in sink + window = {sink + window}")
    kv = sym.kv_create()
    d = sym.pred(kv, toks)
    sinks = sym.kv_fork(kv)
    sym.kv_truncate(sinks, sink)  # the sink file: the first tokens, positions 0..sink-1
    history = list(toks)  # every token of the text (the cache holds only a window of it)
    out: list[int] = []
    slides, max_pages, max_position, positions_ok = 0, 0, 0, True

    def held(*files) -> int:
        return len(set().union(*(set(f.pages) for f in files)))

    max_pages = held(sinks, kv)
    for _ in range(max_tokens):
        t = d.argmax()
        out.append(t)
        history.append(t)
        if kv.len + 1 > sink + window:
            # Slide: sinks + the last `keep` tokens before t, re-fed at positions sink.., then t.
            recent = history[-1 - keep:-1]
            new = sym.kv_fork(sinks)
            pos = list(range(sink, sink + keep + 1))
            d = sym.pred(new, recent + [t], positions=pos)
            max_pages = max(max_pages, held(sinks, kv, new))  # both files live for a moment
            sym.kv_close(kv)
            kv = new
            slides += 1
            positions_ok &= kv.positions == list(range(kv.len))
        else:
            d = sym.pred(kv, [t])
        max_pages = max(max_pages, held(sinks, kv))
        max_position = max(max_position, kv.positions[-1])
    sym.kv_close(kv)
    sym.kv_close(sinks)
    return {"tokens": out, "text": sym.detokenize(out), "slides": slides, "max_pages": max_pages,
            "max_position": max_position, "positions_contiguous": positions_ok, "prompt_tokens": len(toks)}


def page_bound(sink: int, window: int, page_size: int) -> int:
    """The most pages `sink_generate` can hold: the sink page(s) plus two working files."""
    return -(-sink // page_size) + 2 * (-(-(sink + window) // page_size))


def main(argv: list[str] | None = None) -> None:
    from symphony_core import Engine

    ap = argparse.ArgumentParser(description="windowed generation with attention sinks")
    ap.add_argument("--prompt", default="Once upon a time, in a small village by the sea,")
    ap.add_argument("--window", type=int, default=32)
    ap.add_argument("--sink", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=128)
    args = ap.parse_args(argv)
    eng = Engine()
    res = eng.run(sink_generate, args.prompt, args.tokens, args.sink, args.window).result()
    ps = eng.pool.page_size
    print(args.prompt + res["text"])
    full = -(-(res["prompt_tokens"] + args.tokens) // ps)
    print(f"--- {len(res['tokens'])} tokens, {res['slides']} slides; at most {res['max_pages']} pages held "
          f"(bound {page_bound(args.sink, args.window, ps)}; the full context would need {full}); "
          f"highest position {res['max_position']}")
    eng.shutdown()


if __name__ == "__main__":
    main()
