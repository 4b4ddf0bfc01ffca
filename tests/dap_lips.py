"""Small LIPs for the DAP tests (tests/test_dap.py): their line numbers are part of the tests."""

from __future__ import annotations


def chat(sym, prompt: str = "The capital of France is", n: int = 4) -> list[int]:
    kv = sym.kv_create()
    toks = sym.tokenize(prompt)
    out: list[int] = []
    for i in range(n):
        t = sym.pred(kv, toks).argmax()  # PRED_LINE
        out.append(t)
        toks = [t]
        sym.send(f"token {i}: {t}")
    sym.kv_close(kv)
    return out


def fails(sym, prompt: str = "hello") -> None:
    kv = sym.kv_create()
    sym.pred(kv, sym.tokenize(prompt))
    raise ValueError("the LIP's own bug")  # RAISE_LINE


def over_limit(sym) -> None:
    kv = sym.kv_create()
    for _ in range(100):
        sym.pred(kv, list(range(100, 132)))
