"""Streaming text completion: the smallest useful LIP.

The program feeds the prompt, then decodes token by token with `symphony_core.lib.generate`,
which sends each piece of text to the user as soon as it is final (a piece that might be the
start of a stop string is held back until it is not). The user reads the stream with
`proc.messages()` while the program runs.

    python examples/lips/streaming_completion.py "The capital of France is" --max-tokens 32
"""

from __future__ import annotations

import argparse

from symphony_core.lib import generate


def complete(sym, prompt: str, max_tokens: int = 64, stop=None, temperature: float = 0.0,
             seed: int | None = None, chat: bool = False) -> dict:
    """Stream a completion of `prompt`; return the text, its tokens and why it stopped."""
    if chat:
        prompt = sym.chat_template([{"role": "user", "content": prompt}])
    kv = sym.kv_create()
    g = generate(sym, kv, sym.tokenize(prompt), max_tokens, stop=stop, stream=True,
                 temperature=temperature, seed=seed)
    sym.kv_close(kv)
    return {"text": g.text, "tokens": g.tokens, "stop_reason": g.stop_reason}


def main(argv: list[str] | None = None) -> None:
    from symphony_core import Engine

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("prompt", nargs="?", default="The three most famous painters of the Renaissance are")
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--stop", action="append", help="stop string (repeatable)")
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--chat", action="store_true", help="wrap the prompt in the model's chat template")
    args = ap.parse_args(argv)

    eng = Engine()
    proc = eng.run(complete, args.prompt, args.max_tokens, stop=args.stop, temperature=args.temperature,
                   chat=args.chat)
    print(args.prompt, end="", flush=True)
    for chunk in proc.messages():
        print(chunk, end="", flush=True)
    res = proc.result()
    print(f"\n[{len(res['tokens'])} tokens, stopped: {res['stop_reason']}]")
    eng.shutdown()


if __name__ == "__main__":
    main()
