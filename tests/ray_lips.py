"""LIPs the scale-out tests send through the front (the whole file is each program's source)."""


def remember(sym, path: str, text: str) -> int:
    """Creates the named file `path` holding `text`; returns its length in tokens."""
    kv = sym.kv_create(path)
    sym.pred(kv, sym.tokenize(text))
    n = kv.len
    sym.kv_close(kv)
    return n


def recall(sym, path: str) -> int:
    """Opens the named file `path` (KVNotFound when it is not on this replica); returns its length."""
    kv = sym.kv_open(path)
    n = kv.len
    sym.kv_close(kv)
    return n


def greedy(sym, prompt: str, n: int = 4) -> str:
    kv = sym.kv_create()
    toks = sym.tokenize(prompt)
    out = []
    for _ in range(n):
        t = sym.pred(kv, toks).argmax()
        out.append(t)
        sym.send(sym.detokenize([t]))
        toks = [t]
    sym.kv_close(kv)
    return sym.detokenize(out)


def waits(sym) -> str:
    """Holds until it receives a message (or is cancelled)."""
    return f"released by {sym.recv(timeout=170)!r}"
