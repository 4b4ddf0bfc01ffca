"""LIPs of the thread-stepping matrix (tests/step_matrix.py): greedy decodes, no sampling, so every
front-end sees the same stops in the same order."""

from __future__ import annotations


def worker(sym, prompt: str, n: int) -> list[int]:
    kv = sym.kv_create()
    d = sym.pred(kv, sym.tokenize(prompt))
    out = [d.argmax()]
    for _ in range(n - 1):
        d = sym.pred(kv, [out[-1]])
        out.append(d.argmax())
    sym.kv_close(kv)
    return out


def two_workers(sym, n: int = 4) -> list[list[int]]:
    """Issue 50's program: one pred on the main thread, two threads of `n` preds each, joined."""
    kv = sym.kv_create()
    sym.pred(kv, sym.tokenize("Hello"))
    hs = [sym.spawn(worker, p, n) for p in ("One", "Two")]
    out = [h.join() for h in hs]
    sym.kv_close(kv)
    return out


def helper_first(sym) -> list[int]:
    """The main thread preds, then spawns a worker of one pred and joins it."""
    kv = sym.kv_create()
    sym.pred(kv, sym.tokenize("Hi"))
    out = sym.spawn(worker, "Three", 1).join()
    sym.kv_close(kv)
    return out


def single(sym, n: int = 3) -> list[int]:
    return worker(sym, "Once upon a time", n)


def open_or_create(sym, path: str) -> bool:
    """Opens a named file, creating (and feeding) it when it is not there: whether it was."""
    from symphony_core import KVError

    try:
        kv = sym.kv_open(path, "r")
        there = True
    except KVError:
        kv = sym.kv_create(path)
        sym.pred(kv, sym.tokenize("Hi"))
        there = False
    sym.kv_close(kv)
    return there
