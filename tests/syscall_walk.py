"""A LIP that uses every documented member of `sym` (docs/reference/syscalls.md) once and returns
what each gave as JSON data, with the names it used (`covered`): run in-process, sandboxed on a
server and under the debugger, the three results must agree. The launcher sends it one message
(`message=False`: none).
This file is sent to the server as the program's source: it imports only what a sandbox allows."""

from __future__ import annotations


def _child(sym, n):
    return [sym.tid, n + 1]


def walk(sym, name, message=True):
    out: dict = {}
    covered: list[str] = []

    def note(member, value):
        covered.append(member)
        out[member] = value

    note("Sym.pid", isinstance(sym.pid, int) and sym.pid > 0)
    note("Sym.tid", sym.tid)
    note("Sym.user", sym.user)
    note("Sym.eos_token_ids", sorted(sym.eos_token_ids))
    note("Sym.vocab_size", sym.vocab_size)
    note("Sym.page_size", sym.page_size)
    with open(sym.tokenizer_file, "rb") as f:  # readable wherever the program runs
        note("Sym.tokenizer_file", [sym.tokenizer_file.rsplit("/", 1)[-1], len(f.read())])

    ids = sym.tokenize("Hello, world")
    note("Sym.tokenize", ids)
    note("Sym.detokenize", sym.detokenize(ids))
    note("Sym.chat_template", sym.chat_template([{"role": "user", "content": "hi"}]).endswith("assistant\n"))
    kv = sym.kv_create(name)
    d = sym.pred(kv, ids, outputs="all")
    masked = sym.pred(kv, [d[-1].argmax()], sampler="greedy", mask=[ids[0]])
    note("Sym.pred", [list(d.logits.shape), d[-1].argmax(), masked.token])
    note("Sym.kv_create", kv.len)
    ro = sym.kv_open(name)
    note("Sym.kv_open", [ro.len, ro.readonly])
    note("Sym.kv_list", sym.kv_list(name) == [f"/users/{sym.user}/{name}"])
    fork = sym.kv_fork(ro)
    note("Sym.kv_fork", fork.len)
    sym.kv_truncate(fork, 2)
    note("Sym.kv_truncate", fork.len)
    note("Sym.kv_hint", sym.kv_hint(fork, keep_for=30))
    note("Sym.kv_close", [sym.kv_close(fork), fork.closed])
    sym.kv_close(ro)
    sym.kv_close(kv)
    sym.kv_remove(name)
    note("Sym.kv_remove", sym.kv_list(name))

    note("Sym.send", sym.send({"walked": len(covered)}))
    try:  # without a launcher that sends one (the debugger's run_program), the wait times out
        note("Sym.recv", sym.recv(timeout=60 if message else 0.05))
    except TimeoutError as e:
        note("Sym.recv", str(e))
    h = sym.spawn(_child, 41)
    note("Sym.spawn", h.tid > 1)
    note("ThreadHandle.join", h.join(60))
    note("ThreadHandle.done", h.done)
    note("ThreadHandle.tid", h.tid == out["ThreadHandle.join"][0])
    try:
        sym.no_such_call()
    except AttributeError as e:
        out["unknown"] = str(e)
    out["covered"] = covered
    return out
