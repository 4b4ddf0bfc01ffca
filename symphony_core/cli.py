"""`symphony …`: the command line."""

from __future__ import annotations

import argparse
import sys


def _demo(args: argparse.Namespace) -> int:
    from .engine import Engine
    from .programs import chat_answer

    eng = Engine(args.model, weights=args.weights)
    print(f"model: {eng.model_name} on {eng.device} ({eng.dtype})", file=sys.stderr)
    print(f"Q: {args.question}\nA: ", end="", flush=True)
    proc = eng.run(chat_answer, args.question, args.max_tokens)
    for piece in proc.messages():
        print(piece, end="", flush=True)
    print()
    answer = proc.result()
    eng.shutdown()
    return 0 if answer.strip() else 1


def _models(args: argparse.Namespace) -> int:
    from .model.loader import ensure_converted
    from .model.registry import BUILTIN

    if args.prepare:
        src, directory = ensure_converted(args.model)
        print(f"{src.name}: ready in {directory}")
        return 0
    for name, spec in BUILTIN.items():
        print(f"{name:10s} {spec.description}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="symphony", description="Serve LLM inference programs, not prompts.")
    sub = parser.add_subparsers(dest="cmd", required=True)
    from .server.commands import WEIGHT_FORMATS, WEIGHTS_HELP, add_server_commands  # `serve` and `run`

    d = sub.add_parser("demo", help="answer a question with an example LIP on the real model")
    d.add_argument("question", nargs="?", default="What is the capital of France?")
    d.add_argument("--model", default="smollm2")
    d.add_argument("--max-tokens", type=int, default=48)
    d.add_argument("--weights", choices=WEIGHT_FORMATS, default="fp32", help=WEIGHTS_HELP)
    d.set_defaults(fn=_demo)
    m = sub.add_parser("models", help="list built-in models, or convert one now (--prepare)")
    m.add_argument("--prepare", action="store_true")
    m.add_argument("--model", default="smollm2")
    m.set_defaults(fn=_models)
    add_server_commands(sub)
    args = parser.parse_args(argv)
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
