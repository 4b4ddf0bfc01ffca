"""LIPs for Symphony Lab's tests: one that spawns threads and samples (the cross-front-end scenario)."""

from __future__ import annotations

from symphony_core.model.sampling import Sampler


def answer(sym, kv, question: str, max_tokens: int, seed: int) -> str:
    mine = sym.kv_fork(kv)
    toks = sym.tokenize(question)
    sampler = Sampler(temperature=0.8, top_k=20, seed=seed)
    out: list[int] = []
    for _ in range(max_tokens):
        t = sym.pred(mine, toks, sampler=sampler).token  # the engine samples: Dist.token
        out.append(t)
        toks = [t]
    sym.kv_close(mine)
    return sym.detokenize(out)


def spawn_and_sample(
    sym, questions: tuple[str, ...] = ("Q: 2+2? A:", "Q: the sky is? A:"), max_tokens: int = 3
) -> dict:
    kv = sym.kv_create()
    sym.pred(kv, sym.tokenize("Answer briefly."))
    threads = [sym.spawn(answer, kv, q, max_tokens, 7 + i) for i, q in enumerate(questions)]
    answers = [t.join() for t in threads]
    sym.kv_close(kv)
    return {"answers": answers}


def greedy_then_sample_yourself(sym, prompt: str = "The answer is", max_tokens: int = 3) -> list[int]:
    """Samples on its own (`Dist.sample`): what it took is known only once it feeds the token."""
    kv = sym.kv_create()
    toks = sym.tokenize(prompt)
    out = []
    for i in range(max_tokens):
        t = sym.pred(kv, toks).sample(temperature=1.0, seed=100 + i)
        out.append(t)
        toks = [t]
    sym.kv_close(kv)
    return out


def one_answer(sym, kv, question: str, max_tokens: int, seed: int) -> list[int]:
    mine = sym.kv_fork(kv)
    toks = sym.tokenize(question)
    sampler = Sampler(temperature=0.8, top_k=20, seed=seed)
    out: list[int] = []
    for _ in range(max_tokens):
        t = sym.pred(mine, toks, sampler=sampler).token
        out.append(t)
        toks = [t]
    sym.kv_close(mine)
    return out


def threads_in_turn(sym, questions: tuple[str, ...] = ("Q: 2+2? A:", "Q: the sky is? A:"), max_tokens: int = 2) -> list:
    """Spawns a sampling thread per question, one after another (spawn, join): its stops come in
    one order, whatever the machine's timing — the scenario every front-end must step alike."""
    kv = sym.kv_create()
    sym.pred(kv, sym.tokenize("Answer briefly."))
    answers = []
    for i, q in enumerate(questions):
        answers.append(sym.spawn(one_answer, kv, q, max_tokens, 11 + i).join())
    sym.kv_close(kv)
    return answers


def two_tokens(sym, kv, toks: list[int]) -> list[int]:
    a = sym.pred(kv, toks).argmax()
    b = sym.pred(kv, [a]).argmax()
    return [a, b]


def calls_a_helper(sym, prompt: str = "The capital of France is") -> list[int]:
    """Two preds in a called function, then one of its own: step into, out and over tell apart."""
    kv = sym.kv_create()
    first = two_tokens(sym, kv, sym.tokenize(prompt))
    last = sym.pred(kv, [first[-1]]).argmax()
    sym.kv_close(kv)
    return first + [last]
