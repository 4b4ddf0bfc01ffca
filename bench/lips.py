"""The LIP the benchmarks run, in-process (`engine.run(greedy, ...)`) and over the network (this
whole file is then the program's source, so it imports nothing)."""


def greedy(sym, prompt: str, n: int, stream: bool = False) -> list[int]:
    """`n` greedy tokens after `prompt`, no stop at EOS; with `stream`, each piece is sent as it comes."""
    kv = sym.kv_create()
    toks = sym.tokenize(prompt)
    out = []
    for _ in range(n):
        t = sym.pred(kv, toks).argmax()
        out.append(t)
        if stream:
            sym.send(sym.detokenize([t]))
        toks = [t]
    sym.kv_close(kv)
    return out
