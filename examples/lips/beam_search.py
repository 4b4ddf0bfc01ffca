"""Beam search with `kv_fork` / `kv_close`: every hypothesis is a KV file.

Each step feeds every live beam's newest token (one LIP thread per beam, so the engine runs
them as one batch), expands the best `beam_width + 1` tokens of each, keeps the best
`beam_width` extensions overall, and gives each survivor its own KV file: the last child of
a parent takes the parent's file, the others fork it (O(1): pages are shared copy-on-write).
Parents with no surviving child are closed, so their pages go back to the pool at once.

A hypothesis ends when it picks EOS. The search stops when no live beam can still beat the
best finished one (log-probabilities only fall as a sequence grows), or after `max_tokens`.

    python examples/lips/beam_search.py "The best way to learn a language is" --width 4
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

import torch

from symphony_core.lib import pred_parallel


@dataclass
class Beam:
    kv: object
    pending: list[int]  # tokens to feed next (the newest pick)
    tokens: list[int]  # generated so far
    score: float  # sum of log-probabilities


def beam_search(sym, prompt: str, beam_width: int = 3, max_tokens: int = 16, length_penalty: float = 0.0) -> dict:
    """Return the best hypothesis (tokens, text, score) and every finished/live beam at the end.

    `score` is the sum of the tokens' log-probabilities (the EOS included for a finished one);
    candidates are ranked by `score / len ** length_penalty` (0: plain sum)."""
    if beam_width < 1:
        raise ValueError("beam_width must be >= 1")
    eos = sym.eos_token_ids
    toks = sym.tokenize(prompt)
    root = sym.kv_create()
    if len(toks) > 1:
        sym.pred(root, toks[:-1])
    beams = [Beam(root, toks[-1:], [], 0.0)]
    finished: list[dict] = []
    forks = 0

    def rank(score: float, n: int) -> float:
        return score / (max(n, 1) ** length_penalty) if length_penalty else score

    for step in range(max_tokens):  # noqa: B007 (the step count is read after the loop)
        dists = pred_parallel(sym, [(b.kv, b.pending) for b in beams])
        cands = []
        for bi, (b, d) in enumerate(zip(beams, dists)):
            lp = torch.log_softmax(d.logits.float(), -1)
            top = lp.topk(beam_width + 1)
            for v, t in zip(top.values.tolist(), top.indices.tolist()):
                cands.append((b.score + v, bi, t))
        cands.sort(key=lambda c: -rank(c[0], len(beams[c[1]].tokens) + 1))
        chosen = []
        for r, (score, bi, t) in enumerate(cands):
            if len(chosen) == beam_width:
                break
            if t in eos:
                if r < beam_width:  # an ending only counts if it ranks among the best
                    finished.append({"tokens": beams[bi].tokens, "score": score, "finished": True})
                continue
            chosen.append((score, bi, t))
        # Give each survivor a file: fork for all but the parent's last child, which inherits it.
        last_use = {bi: i for i, (_, bi, _) in enumerate(chosen)}
        new_beams = []
        for i, (score, bi, t) in enumerate(chosen):
            parent = beams[bi]
            if last_use[bi] == i:
                kv = parent.kv
            else:
                kv = sym.kv_fork(parent.kv)
                forks += 1
            new_beams.append(Beam(kv, [t], parent.tokens + [t], score))
        for bi, b in enumerate(beams):
            if bi not in last_use:
                sym.kv_close(b.kv)
        beams = new_beams
        if len(finished) >= beam_width or not beams:
            break
        best_done = max((rank(f["score"], len(f["tokens"]) + 1) for f in finished), default=float("-inf"))
        if length_penalty == 0 and best_done >= max(b.score for b in beams):
            break  # no live beam can catch up: its score can only fall
    live = [{"tokens": b.tokens, "score": b.score, "finished": False} for b in beams]
    for b in beams:
        sym.kv_close(b.kv)
    every = finished + live
    best = max(every, key=lambda h: rank(h["score"], len(h["tokens"]) + int(h["finished"])))
    for h in every:
        h["text"] = sym.detokenize(h["tokens"])
    return {"best": best, "hypotheses": sorted(every, key=lambda h: -h["score"]), "forks": forks, "steps": step + 1}


def main(argv: list[str] | None = None) -> None:
    from symphony_core import Engine

    ap = argparse.ArgumentParser(description="beam search with kv_fork / kv_close")
    ap.add_argument("prompt", nargs="?", default="The best way to learn a new language is")
    ap.add_argument("--width", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=16)
    args = ap.parse_args(argv)
    eng = Engine()
    greedy = eng.run(beam_search, args.prompt, 1, args.max_tokens).result()
    res = eng.run(beam_search, args.prompt, args.width, args.max_tokens).result()
    print(f"prompt: {args.prompt!r}")
    print(f"greedy      ({greedy['best']['score']:7.3f}): {greedy['best']['text']!r}")
    print(f"beam width {args.width} ({res['best']['score']:7.3f}): {res['best']['text']!r}")
    print(f"{res['forks']} forks over {res['steps']} steps; hypotheses at the end:")
    for h in res["hypotheses"]:
        print(f"  {h['score']:8.3f} {'done' if h['finished'] else 'live'} {h['text']!r}")
    eng.shutdown()


if __name__ == "__main__":
    main()
