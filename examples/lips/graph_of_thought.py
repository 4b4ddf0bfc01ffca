"""Graph of thought: branch, score each branch with the model, prune, merge.

1. **Branch** — the question's KV is forked K ways; branch i starts with the i-th most likely
   first token and continues greedily, so the K thoughts differ from their first word on.
2. **Score** — each branch's KV is forked once more and asked a verdict question; the score
   is log p("Yes") − log p("No") for the next token: the model grades its own thoughts without
   re-reading them (the fork already holds them).
3. **Prune** — only the best `keep` branches survive; the others' files are closed at once.
4. **Merge** — a new KV is fed the question and the surviving branches' text, and the final
   answer is decoded from it.

    python examples/lips/graph_of_thought.py "Name a good way to save money."
"""

from __future__ import annotations

import argparse

from symphony_core.lib import generate, parallel_map
from symphony_core.lib.chat import chat_prompt

VERDICT = "Is that a good answer? Reply Yes or No."


def verdict_tokens(sym) -> tuple[int, int]:
    return sym.tokenize("Yes")[0], sym.tokenize("No")[0]


def verdict_suffix(sym, question: str, thought: str) -> str:
    """The text that follows a branch's thought to ask for a verdict: the template's end of
    the assistant turn, a user turn with the verdict question, and the next assistant header."""
    head = chat_prompt(sym, [{"role": "user", "content": question}]) + thought
    full = chat_prompt(sym, [{"role": "user", "content": question}, {"role": "assistant", "content": thought},
                             {"role": "user", "content": VERDICT}])
    if not full.startswith(head):
        raise ValueError("this chat template rewrites the assistant turn; cannot extend the branch in place")
    return full[len(head):]


def graph_of_thought(sym, question: str, branches: int = 4, keep: int = 2, thought_tokens: int = 24,
                     answer_tokens: int = 40) -> dict:
    yes, no = verdict_tokens(sym)
    prompt = sym.tokenize(chat_prompt(sym, [{"role": "user", "content": question}]))
    root = sym.kv_create()
    d0 = sym.pred(root, prompt)  # the root holds the whole question; d0 predicts the first word
    firsts = [t for t, _ in d0.topk(branches + 4) if t not in sym.eos_token_ids][:branches]
    root_pages = root.pages

    def branch(s, first: int) -> dict:
        kv = s.kv_fork(root)
        g = generate(s, kv, [first], thought_tokens, stop=["\n"])
        toks = [first] + g.tokens
        text = s.detokenize(toks)
        # Score: fork the branch (its K/V stay for the merge view) and ask for a verdict.
        suffix = verdict_suffix(s, question, text)
        if g.stop_reason == "eos":  # the end-of-turn token is already the pending one
            end = s.detokenize(g.pending)
            suffix = suffix[len(end):] if suffix.startswith(end) else suffix
        judge = s.kv_fork(kv)
        dv = s.pred(judge, g.pending + s.tokenize(suffix))
        score = dv.logprob(yes) - dv.logprob(no)
        judge_tokens = judge.tokens
        s.kv_close(judge)
        return {"first": first, "tokens": toks, "text": text, "score": score, "kv": kv, "judge_tokens": judge_tokens,
                "shares_root": kv.pages[: len(root_pages) - 1] == root_pages[: len(root_pages) - 1]}

    nodes = parallel_map(sym, branch, firsts)
    ranked = sorted(range(len(nodes)), key=lambda i: -nodes[i]["score"])
    kept = sorted(ranked[:keep])
    for i, n in enumerate(nodes):  # prune: the losers' pages go back now
        n["kept"] = i in kept
        if not n["kept"]:
            sym.kv_close(n.pop("kv"))
    # Merge: a new KV fed the question and the chosen branches' text.
    ideas = "\n".join(f"{j + 1}. {nodes[i]['text'].strip()}" for j, i in enumerate(kept))
    merge_msg = f"{question}\nHere are some ideas:\n{ideas}\nCombine the ideas into one short answer."
    merge_kv = sym.kv_create()
    g = generate(sym, merge_kv, sym.tokenize(chat_prompt(sym, [{"role": "user", "content": merge_msg}])),
                 answer_tokens)
    merge_tokens = merge_kv.tokens
    for i in kept:
        sym.kv_close(nodes[i].pop("kv"))
    sym.kv_close(merge_kv)
    sym.kv_close(root)
    return {"question": question, "branches": nodes, "kept": kept, "merge_prompt": merge_msg,
            "merge_tokens": merge_tokens, "answer": g.text,
            "edges": [("root", f"b{i}") for i in range(len(nodes))] + [(f"b{i}", "merge") for i in kept]}


def main(argv: list[str] | None = None) -> None:
    from symphony_core import Engine

    ap = argparse.ArgumentParser(description="graph of thought: branch, score, prune, merge")
    ap.add_argument("question", nargs="?", default="Name a good way to save money.")
    ap.add_argument("--branches", type=int, default=4)
    ap.add_argument("--keep", type=int, default=2)
    args = ap.parse_args(argv)
    eng = Engine()
    res = eng.run(graph_of_thought, args.question, args.branches, args.keep).result()
    print(f"Q: {res['question']}")
    for i, b in enumerate(res["branches"]):
        mark = "keep " if b["kept"] else "prune"
        print(f"  b{i} [{mark}] score {b['score']:+.2f}  {b['text'].strip()!r}")
    print(f"merge of {[f'b{i}' for i in res['kept']]} -> {res['answer'].strip()!r}")
    eng.shutdown()


if __name__ == "__main__":
    main()
