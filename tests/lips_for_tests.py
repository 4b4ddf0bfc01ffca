"""Small LIPs used by the runtime and scheduler tests."""

from __future__ import annotations

import time


def greedy(sym, prompt: str | list[int], max_tokens: int = 8) -> list[int]:
    kv = sym.kv_create()
    toks = sym.tokenize(prompt) if isinstance(prompt, str) else prompt
    out: list[int] = []
    for _ in range(max_tokens):
        t = sym.pred(kv, toks).argmax()
        out.append(t)
        toks = [t]
    sym.kv_close(kv)
    return out


def greedy_reference(engine, prompt: str, max_tokens: int = 8) -> list[int]:
    """The same generation through the engine's synchronous pred, with no runtime involved."""
    kv = engine.kv_create()
    toks = engine.tokenize(prompt)
    out: list[int] = []
    for _ in range(max_tokens):
        t = engine.pred(kv, toks).argmax()
        out.append(t)
        toks = [t]
    engine.kv_close(kv)
    return out


def raises(sym):
    kv = sym.kv_create()
    sym.pred(kv, sym.tokenize("hello"))
    raise ValueError("the LIP's own bug")


def spins(sym):
    kv = sym.kv_create()
    sym.pred(kv, sym.tokenize("spin"))
    while True:
        pass


def thread_bomb(sym):
    def idle(s):
        time.sleep(5)

    handles = [sym.spawn(idle) for _ in range(1000)]
    return len(handles)


def page_hog(sym):
    kv = sym.kv_create()
    while True:
        sym.pred(kv, list(range(100, 164)))


def timestamps(sym, prompt: str, n: int) -> list[float]:
    """Greedy decode that records when each token arrived."""
    kv = sym.kv_create()
    toks = sym.tokenize(prompt)
    stamps = []
    for _ in range(n):
        toks = [sym.pred(kv, toks).argmax()]
        stamps.append(time.perf_counter())
    return stamps
