"""Choose among given options by log-probability (SGLang's `select`).

The prompt is fed once; each option gets a fork of the prompt's KV (one LIP thread each, so
their `pred`s batch together) and one `pred(..., outputs="all")` that feeds the prompt's last
token plus the option's tokens: row i of the result is the distribution the option's token i
is drawn from. The option's score is the sum of those log-probabilities — log p(option |
prompt) — or their mean (`normalize="mean"`, which does not favour short options).

    python examples/lips/select_option.py "The capital of France is" " Paris" " London" " Berlin"
"""

from __future__ import annotations

import argparse

import torch


def option_logprobs(sym, prefix_kv, last: list[int], option: list[int]) -> list[float]:
    """Log-probability of each token of `option` after the prefix (`prefix_kv` + `last`)."""
    kv = sym.kv_fork(prefix_kv)
    d = sym.pred(kv, last + option, outputs="all")
    sym.kv_close(kv)
    lp = torch.log_softmax(d.logits.float(), -1)  # [1 + len(option), V]
    return [float(lp[i, t]) for i, t in enumerate(option)]


def select(sym, prompt: str, options: list[str], normalize: str = "sum") -> dict:
    """Pick the option the model finds most likely after `prompt`; returns all the scores."""
    if not options:
        raise ValueError("select needs at least one option")
    if normalize not in ("sum", "mean"):
        raise ValueError("normalize must be 'sum' or 'mean'")
    toks = sym.tokenize(prompt)
    prefix = sym.kv_create()
    if len(toks) > 1:
        sym.pred(prefix, toks[:-1])  # shared by every option; its last token goes with each option
    opt_toks = [sym.tokenize(o) for o in options]
    if any(not t for t in opt_toks):
        raise ValueError("every option must have at least one token")
    threads = [sym.spawn(option_logprobs, prefix, toks[-1:], t) for t in opt_toks]
    per_token = [h.join() for h in threads]
    sym.kv_close(prefix)
    scores = [sum(lp) if normalize == "sum" else sum(lp) / len(lp) for lp in per_token]
    best = max(range(len(options)), key=lambda i: scores[i])
    return {"choice": options[best], "index": best, "scores": scores, "token_logprobs": per_token,
            "option_tokens": opt_toks, "prompt_tokens": toks}


def main(argv: list[str] | None = None) -> None:
    from symphony_core import Engine

    ap = argparse.ArgumentParser(description="choose among options by log-probability")
    ap.add_argument("prompt", nargs="?", default="Q: Which planet is known as the Red Planet?\nA:")
    ap.add_argument("options", nargs="*", default=[" Mars", " Venus", " Jupiter", " Saturn"])
    ap.add_argument("--mean", action="store_true", help="average per token instead of summing")
    args = ap.parse_args(argv)
    eng = Engine()
    res = eng.run(select, args.prompt, args.options, "mean" if args.mean else "sum").result()
    print(args.prompt)
    for o, s in sorted(zip(args.options, res["scores"]), key=lambda x: -x[1]):
        print(f"  {s:8.3f}  {o!r}{'   <- chosen' if o == res['choice'] else ''}")
    eng.shutdown()


if __name__ == "__main__":
    main()
