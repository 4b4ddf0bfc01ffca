"""Prefix caching + parallel decoding: one cached system prompt, N questions, N threads.

The system prompt is prefilled once into a *named* KV file under /shared/ (its name is a hash
of the text, so every program with the same system prompt finds it). Each run opens it
read-only and forks it once per question: a fork is O(1) and shares every full page of the
prefix, so N answers cost one copy of the prefix plus N short tails. One LIP thread per
question (`sym.spawn`) lets the engine batch the N decodes into one forward pass per step.

    python examples/lips/prefix_parallel.py
"""

from __future__ import annotations

import hashlib

from symphony_core import KVError
from symphony_core.lib import generate
from symphony_core.lib.chat import chat_prompt

SYSTEM_PROMPT = (
    "You are the help desk of the Riverside Public Library. Opening hours: Monday to Friday "
    "9am to 8pm, Saturday 10am to 5pm, closed on Sunday. Members may borrow up to 12 items at "
    "a time for three weeks; items can be renewed twice online unless another member has "
    "reserved them. Late fees are 20 cents per day per item, capped at 5 dollars. Library cards "
    "are free for residents and cost 30 dollars a year for others. The library offers free "
    "Wi-Fi, four study rooms that can be booked for two hours, a makerspace with two 3D "
    "printers, printing at 10 cents a page, and children's story time every Wednesday at 10am. "
    "Answer questions in one or two short sentences, politely and accurately."
)

QUESTIONS = [
    "When is the library open on Saturday?",
    "How much are late fees?",
    "How many items can I borrow?",
    "Is there story time for children?",
]


def system_file(system_prompt: str) -> str:
    return "/shared/sys-" + hashlib.sha256(system_prompt.encode()).hexdigest()[:16] + ".kv"


def open_system_prompt(sym, system_prompt: str, path: str | None = None):
    """Open the cached system prompt read-only, prefilling it first if nobody has yet.

    Returns (read-only KV, whether it was already cached)."""
    path = path or system_file(system_prompt)
    try:
        return sym.kv_open(path, "r"), True
    except KVError:  # not there yet (KVNotFound is a KVError)
        pass
    text = chat_prompt(sym, [{"role": "system", "content": system_prompt}], add_generation_prompt=False)
    try:
        w = sym.kv_create(path)
    except KVError:  # another program created it meanwhile
        return sym.kv_open(path, "r"), True
    sym.pred(w, sym.tokenize(text))
    sym.kv_close(w)  # the file outlives this handle: it has a name
    return sym.kv_open(path, "r"), False


def question_tokens(sym, system_prompt: str, question: str) -> list[int]:
    """The tokens that follow the system prompt for this question (the user turn + the
    assistant header): the boundary is a special token, so prefix + these = the full prompt."""
    sys_msg = {"role": "system", "content": system_prompt}
    prefix = chat_prompt(sym, [sys_msg], add_generation_prompt=False)
    full = chat_prompt(sym, [sys_msg, {"role": "user", "content": question}], add_generation_prompt=True)
    return sym.tokenize(full[len(prefix):])


def answer(sym, sys_kv, tokens: list[int], max_tokens: int) -> dict:
    """One thread: fork the shared prefix and decode an answer into the fork."""
    kv = sym.kv_fork(sys_kv)
    g = generate(sym, kv, tokens, max_tokens)
    # The fork stays open so the caller can count pages; the process closes it at exit anyway.
    return {"text": g.text, "tokens": g.tokens, "kv": kv}


def prefix_parallel(sym, system_prompt: str = SYSTEM_PROMPT, questions: list[str] = QUESTIONS,
                    max_tokens: int = 24, path: str | None = None) -> dict:
    sys_kv, cached = open_system_prompt(sym, system_prompt, path)
    threads = [sym.spawn(answer, sys_kv, question_tokens(sym, system_prompt, q), max_tokens) for q in questions]
    results = [t.join() for t in threads]
    # Pages: what the N forks hold together vs. what N private copies would hold.
    shared = set(sys_kv.pages)
    for r in results:
        shared |= set(r["kv"].pages)
    copies = sum(len(r["kv"].pages) for r in results)  # a file holds ceil(len / page_size) pages
    lens = [r["kv"].len for r in results]
    for r in results:
        sym.kv_close(r.pop("kv"))
    sym.kv_close(sys_kv)
    return {"answers": results, "cached": cached, "path": path or system_file(system_prompt),
            "prefix_tokens": sys_kv.len, "pages_held": len(shared), "pages_if_copied": copies, "lengths": lens}


def main() -> None:
    from symphony_core import Engine

    eng = Engine()
    for run in (1, 2):
        res = eng.run(prefix_parallel).result()
        print(f"run {run}: system prompt {'found in' if res['cached'] else 'prefilled into'} {res['path']} "
              f"({res['prefix_tokens']} tokens)")
        if run == 1:
            for q, a in zip(QUESTIONS, res["answers"]):
                print(f"  Q: {q}\n  A: {a['text'].strip()}")
        print(f"  pages held by {len(QUESTIONS)} forks: {res['pages_held']} "
              f"(private copies would need {res['pages_if_copied']})")
    eng.kv_remove(res["path"])
    eng.shutdown()


if __name__ == "__main__":
    main()
