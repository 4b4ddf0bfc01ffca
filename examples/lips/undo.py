"""Undo with a kept KV: the editor's Ctrl+Z from the Symphony paper.

An editor assistant keeps the document in a KV file and suggests how it goes on. Before each
edit it keeps the current file as an undo snapshot — no copy: the edit goes into a `kv_fork`
of it, which shares every page — and tells the engine with `kv_hint(keep_for=…)` that the
snapshot matters for a while (after that the engine may reclaim it under memory pressure).
Ctrl+Z closes the current file and goes back to the snapshot: its K/V are the very ones the
earlier state had, so the next-token logits are bit-for-bit those of the earlier state. If the
engine did reclaim the snapshot, the tokens are still known and it is recomputed.

The file holds every document token but the last, which is *pending* (fed with each
suggestion's `pred`), so a state's suggestion never writes into the state itself.

Commands (sent with `proc.send`, or given as a script): {"op": "type", "text": …},
{"op": "delete", "tokens": n}, {"op": "undo"}, {"op": "quit"}.

    python examples/lips/undo.py
"""

from __future__ import annotations

from dataclasses import dataclass

from symphony_core import KVError


@dataclass
class State:
    kv: object  # the document but its last token
    pending: list[int]  # the last token, fed by each suggestion


def suggest(sym, st: State, n: int = 6) -> tuple[object, list[int]]:
    """The next-token logits of a state and a short greedy continuation, without changing it."""
    f = sym.kv_fork(st.kv)
    d = sym.pred(f, st.pending)
    logits = d.logits.clone()
    toks, t = [], d.argmax()
    for _ in range(n):
        if t in sym.eos_token_ids:
            break
        toks.append(t)
        t = sym.pred(f, [t]).argmax()
    sym.kv_close(f)
    return logits, toks


def restore(sym, st: State) -> tuple[State, bool]:
    """Make a snapshot current again; recompute it if the engine reclaimed it (hint expired)."""
    if not st.kv.evicted:
        return st, False
    tokens = st.kv.tokens  # the tokens survive eviction; only the K/V went
    sym.kv_close(st.kv)
    kv = sym.kv_create()
    if tokens:
        sym.pred(kv, tokens)
    return State(kv, st.pending), True


def editor(sym, text: str, script: list[dict] | None = None, keep_for: float = 300.0, suggest_tokens: int = 6) -> list[dict]:
    """Run the editor on `text`; commands come from `script`, else from `sym.recv()`.

    Returns (and sends) one record per state: the document, a suggestion and the logits."""
    toks = sym.tokenize(text)
    kv = sym.kv_create()
    if len(toks) > 1:
        sym.pred(kv, toks[:-1])
    cur = State(kv, toks[-1:])
    undo: list[State] = []
    log = []

    def record(op: str, recomputed: bool = False) -> None:
        logits, sug = suggest(sym, cur, suggest_tokens)
        doc = sym.detokenize(cur.kv.tokens + cur.pending)
        entry = {"op": op, "doc": doc, "suggestion": sym.detokenize(sug), "logits": logits,
                 "kv_len": cur.kv.len, "undo_depth": len(undo), "recomputed": recomputed}
        log.append(entry)
        sym.send({k: v for k, v in entry.items() if k != "logits"})

    record("open")
    commands = iter(script) if script is not None else iter(lambda: sym.recv(), None)
    for cmd in commands:
        op = cmd.get("op")
        if op == "quit":
            break
        if op == "undo":
            if not undo:
                record("undo (nothing to undo)")
                continue
            sym.kv_close(cur.kv)
            cur, recomputed = restore(sym, undo.pop())
            record("undo", recomputed)
            continue
        # An edit: keep the current state as a snapshot, edit a fork of it.
        sym.kv_hint(cur.kv, keep_for=keep_for)
        undo.append(cur)
        new = sym.kv_fork(cur.kv)
        if op == "type":
            add = sym.tokenize(cmd["text"])
            if not add:
                undo.pop()
                sym.kv_close(new)
                continue
            sym.pred(new, cur.pending + add[:-1])
            cur = State(new, add[-1:])
        elif op == "delete":
            n = int(cmd.get("tokens", 1))
            doc = new.tokens + cur.pending
            n = min(n, len(doc) - 1)
            keep = len(doc) - n
            sym.kv_truncate(new, keep - 1)
            cur = State(new, doc[keep - 1:keep])
        else:
            undo.pop()
            sym.kv_close(new)
            raise KVError(f"unknown editor command {cmd!r}")
        record(op)
    for st in undo:
        sym.kv_close(st.kv)
    sym.kv_close(cur.kv)
    return log


SCRIPT = [
    {"op": "type", "text": "It was a dark and stormy night;"},
    {"op": "type", "text": " the rain fell in torrents."},
    {"op": "undo"},
    {"op": "delete", "tokens": 3},
    {"op": "undo"},
    {"op": "undo"},
]


def main() -> None:
    from symphony_core import Engine

    eng = Engine()
    proc = eng.run(editor, "Chapter 1.\n\n", SCRIPT)
    for m in proc.messages():
        print(f"[{m['op']:<6}] {m['doc']!r}")
        print(f"          suggestion: {m['suggestion']!r}  (cache {m['kv_len']} tokens, undo depth {m['undo_depth']})")
    log = proc.result()
    same = (log[0]["logits"] == log[-1]["logits"]).all().item()
    print(f"after undoing everything, the next-token logits equal the first state's exactly: {same}")
    eng.shutdown()


if __name__ == "__main__":
    main()
