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
    from .model.families import FAMILIES, WRAPPED
    from .model.loader import cache_root, ensure_converted, model_family
    from .model.registry import BUILTIN

    if args.prepare:
        src, directory = ensure_converted(args.model)
        print(f"{src.name}: ready in {directory}")
        return 0
    if args.check:
        print(model_family(args.check))
        return 0
    print("supported architectures (config.json's model_type):")
    for kind, fam in FAMILIES.items():
        print(f"  {kind:12s} {fam.name}: {fam.examples}")
    for kind, (inner, _) in WRAPPED.items():
        print(f"  {kind:12s} the text model of a {FAMILIES[inner].name} checkpoint")
    print("built-in models:")
    for name, spec in BUILTIN.items():
        print(f"  {name:12s} {spec.description}")
    converted = sorted(p.name for p in cache_root().glob("*") if (p / "config.json").exists())
    print(f"converted and cached in {cache_root()}:" + ("" if converted else " none"))
    for name in converted:
        print(f"  {name}")
    return 0


def package_version(dist: str = "symphony-lip") -> str:
    """The installed distribution's version (its metadata), or 'unknown' when run from a bare checkout."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return "unknown"


def _add_scale_out(serve: argparse.ArgumentParser) -> None:
    """`symphony serve --ray [ADDRESS] --replicas N` (symphony_core/scaleout, docs/scale-out.md)."""
    serve.add_argument(
        "--ray",
        nargs="?",
        const="local",
        default=None,
        metavar="ADDRESS",
        help="serve through N replicas on Ray: a local Ray without ADDRESS, else the cluster at "
        "ADDRESS ('auto', 'host:6379', 'ray://host:10001'); needs the [ray] extra",
    )
    serve.add_argument("--replicas", type=int, default=2, help="engine replicas with --ray (default 2)")
    serve.add_argument("--replica-cpus", type=float, default=1, help="CPUs Ray reserves per replica with --ray")
    serve.add_argument(
        "--replica-host",
        default=None,
        help="address each replica's server listens on with --ray "
        "(default: its node's IP when tokens are configured, else loopback)",
    )
    single = serve.get_default("fn")

    def run(args: argparse.Namespace) -> int:
        if getattr(args, "model_tag", None) and not args.model:
            args.model = args.model_tag  # `symphony serve MODEL`, as the replicas are told it too
        if args.ray is None:
            return single(args)
        from .scaleout.serve import serve_on_ray

        return serve_on_ray(args)

    serve.set_defaults(fn=run)


def build_parser() -> argparse.ArgumentParser:
    """The `symphony` parser with every subcommand (the docs' CLI reference is rendered from it)."""
    parser = argparse.ArgumentParser(prog="symphony", description="Serve LLM inference programs, not prompts.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {package_version()}")
    sub = parser.add_subparsers(dest="cmd", required=True)
    from .server.commands import WEIGHT_FORMATS, WEIGHTS_HELP, add_server_commands  # `serve` and `run`

    d = sub.add_parser("demo", help="answer a question with an example LIP on the real model")
    d.add_argument("question", nargs="?", default="What is the capital of France?", help="the question to answer")
    d.add_argument("--model", default="smollm2", help="a built-in model name, a GGUF file or a model directory")
    d.add_argument("--max-tokens", type=int, default=48, help="most tokens in the answer")
    d.add_argument("--weights", choices=WEIGHT_FORMATS, default="fp32", help=WEIGHTS_HELP)
    d.set_defaults(fn=_demo)
    m = sub.add_parser(
        "models", help="list the supported architectures, built-in and cached models; check or convert one"
    )
    m.add_argument("--prepare", action="store_true", help="convert --model to the cached safetensors form now")
    m.add_argument(
        "--check", metavar="MODEL", help="say which family a directory, GGUF or name is, or why it is refused"
    )
    m.add_argument("--model", default="smollm2", help="the model --prepare converts")
    m.set_defaults(fn=_models)
    add_server_commands(sub)
    _add_scale_out(sub.choices["serve"])
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
