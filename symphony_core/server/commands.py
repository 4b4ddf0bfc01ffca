"""The `symphony serve` and `symphony run` subcommands (registered by symphony_core/cli.py)."""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
from collections.abc import Iterable
from typing import Any

from ..errors import ModelError
from .vllm_flags import OpenAIOptions, add_vllm_flags

# symphony_core.model.weight_formats.WEIGHT_FORMATS and symphony_core.engine.KV_CACHE_DTYPES, spelled
# out so that parsing flags imports no torch (tests/test_weights.py checks that they agree)
WEIGHT_FORMATS = ("fp32", "q8", "q4")
KV_CACHE_DTYPES = ("auto", "fp32", "fp16")
WEIGHTS_HELP = (
    "weight format on CPU: fp32 (exact, default), q8 (int8) or q4 (4-bit from the GGUF's Q4_1 blocks); "
    "quantised formats decode faster and agree with fp32 less than fully (bench/RESULTS.md)"
)


def _parse_value(s: str) -> Any:
    """A command-line argument as JSON when it is JSON (16, 0.5, true, [..], {..}), else as text."""
    try:
        return json.loads(s)
    except ValueError:
        return s


def _show(v: Any) -> str:
    if isinstance(v, str):
        return v
    try:
        return json.dumps(v, ensure_ascii=False)
    except (TypeError, ValueError):
        return repr(v)


def print_stream(messages: Iterable[Any], out=sys.stdout) -> None:
    """Strings as they come (a LIP streams text piece by piece); anything else one JSON line each."""
    last = ""
    for m in messages:
        s = m if isinstance(m, str) else _show(m) + "\n"
        out.write(s)
        out.flush()
        last = s or last
    if last and not last.endswith("\n"):
        out.write("\n")


def _load_function(spec: str):
    path, sep, func = spec.rpartition(":")
    if not sep or not path or not func:
        raise SystemExit(f"symphony run: expected FILE:FUNC, got {spec!r}")
    if not os.path.exists(path):
        raise SystemExit(f"symphony run: no such file {path!r}")
    mspec = importlib.util.spec_from_file_location(f"_lip_{os.path.splitext(os.path.basename(path))[0]}", path)
    if mspec is None or mspec.loader is None:
        raise SystemExit(f"symphony run: cannot load {path!r} as a Python module")
    mod = importlib.util.module_from_spec(mspec)
    sys.modules[mspec.name] = mod
    mspec.loader.exec_module(mod)
    fn = getattr(mod, func, None)
    if not callable(fn):
        raise SystemExit(f"symphony run: {path} defines no function {func!r}")
    return fn


def _run(args: argparse.Namespace) -> int:
    from ..sched.process import LIPError

    lip_args = [_parse_value(a) for a in args.args]
    kwargs: dict[str, Any] = {}
    for kv in args.kw or []:
        k, sep, v = kv.partition("=")
        if not sep:
            print(f"symphony run: --kw expects NAME=VALUE, got {kv!r}", file=sys.stderr)
            return 2
        kwargs[k] = _parse_value(v)
    limits = {}
    if args.wall_time:
        limits["wall_time"] = args.wall_time
    if args.server:
        from ..client import Client, ServerError

        source_spec = args.target
        try:
            path, _, func = source_spec.rpartition(":")
            with open(path) as f:
                source = f.read()
        except OSError as e:
            print(f"symphony run: cannot read {source_spec!r}: {e}", file=sys.stderr)
            return 2
        client = Client(args.server, token=args.token)
        try:
            proc = client.launch(
                None,
                *lip_args,
                kwargs=kwargs,
                source=source,
                entry=func,
                name=args.name,
                limits=limits or None,
                sandbox=False if args.no_sandbox else None,
            )
        except (ServerError, OSError) as e:
            print(f"symphony run: {e}", file=sys.stderr)
            return 2
    else:
        from ..engine import Engine

        fn = _load_function(args.target)
        try:
            eng = Engine(args.model, weights=args.weights)
        except ModelError as e:
            print(f"symphony run: {e}", file=sys.stderr)
            return 2
        from ..sched.process import Limits

        proc = eng.launch(
            fn,
            *lip_args,
            name=args.name,
            kwargs=kwargs,
            limits=Limits(max_wall_time=args.wall_time) if args.wall_time else None,
        )
    try:
        print_stream(proc.messages())
        result = proc.result()
    except KeyboardInterrupt:
        proc.cancel()
        print("symphony run: cancelled", file=sys.stderr)
        return 130
    except LIPError as e:
        print(f"symphony run: {e}", file=sys.stderr)
        tb = getattr(e, "traceback_text", "")
        if tb and args.traceback:
            print(tb, file=sys.stderr)
        return 1
    finally:
        if not args.server:
            eng.shutdown()
    if not args.no_result and result is not None:
        print(_show(result))
    return 0


def _serve(args: argparse.Namespace) -> int:
    from .serve import serve

    if args.model_tag and args.model and args.model_tag != args.model:
        print(
            f"symphony serve: the model is given twice ({args.model_tag!r} and --model {args.model!r})", file=sys.stderr
        )
        return 2
    if args.user_memory_mb <= 0:
        print(f"symphony serve: --user-memory-mb must be > 0, got {args.user_memory_mb}", file=sys.stderr)
        return 2
    users = list(args.user or [])
    if args.api_key:
        users.append(f"api:{args.api_key}")
    prefix = not args.no_prefix_cache if args.enable_prefix_caching is None else args.enable_prefix_caching
    return serve(
        host=args.host,
        port=args.port,
        model=args.model_tag or args.model or "smollm2",
        users_file=args.users_file,
        user_flags=users,
        sandbox=not args.no_sandbox,
        max_workers=args.max_workers,
        cpu_seconds=args.cpu_seconds,
        memory_mb=args.memory_mb,
        num_pages=args.num_pages,
        kv_cache_gb=args.kv_cache_gb,
        threads=args.threads,
        max_body=args.max_body,
        wall_time=args.wall_time,
        log_level=args.log_level,
        plugins=args.plugin or [],
        keep_finished_s=args.keep_finished,
        user_memory_mb=args.user_memory_mb,
        drain_s=args.drain,
        weights=args.weights,
        kv_cache_dtype=args.kv_cache_dtype,
        prefix_cache=prefix,
        openai=OpenAIOptions(
            served_model_name=args.served_model_name,
            max_model_len=args.max_model_len,
            dtype=args.dtype,
            chat_template=args.chat_template,
            max_num_seqs=args.max_num_seqs,
            generation_config=args.generation_config,
            allowed_origins=args.allowed_origins,
        ),
    )


def add_server_commands(sub) -> None:
    s = sub.add_parser(
        "serve",
        help="serve LIPs over HTTP + WebSocket (and the OpenAI API)",
        description="Serve LLM inference programs over HTTP + WebSocket; see docs/server.md.",
    )
    s.add_argument(
        "model_tag",
        nargs="?",
        metavar="MODEL",
        help="the model, as `vllm serve MODEL` takes it: a built-in name, a GGUF file or a model directory "
        "(default: smollm2)",
    )
    s.add_argument("--host", default="127.0.0.1", help="address to listen on (default: %(default)s, loopback only)")
    s.add_argument("--port", type=int, default=8000, help="port to listen on (default: %(default)s)")
    s.add_argument("--model", default=None, help="the model, as the positional MODEL (default: smollm2)")
    s.add_argument("--users-file", help="JSON file of users, tokens and quotas (see docs/server.md)")
    s.add_argument("--user", action="append", metavar="NAME:TOKEN", help="add a user with default quotas (repeatable)")
    s.add_argument(
        "--no-sandbox", action="store_true", help="run uploaded programs in-process (trusted development only)"
    )
    s.add_argument("--max-workers", type=int, default=32, help="sandboxed workers alive at once")
    s.add_argument(
        "--user-memory-mb",
        type=int,
        default=128,
        help="server memory one user's programs may hold in all: kept messages, prints, logits, KV names",
    )
    s.add_argument("--cpu-seconds", type=int, default=60, help="CPU time limit of one sandboxed program")
    s.add_argument(
        "--memory-mb", type=int, default=1024, help="memory limit of one sandboxed program (beyond the runtime)"
    )
    s.add_argument("--wall-time", type=float, default=600.0, help="wall-time limit of one program, seconds")
    s.add_argument("--num-pages", type=int, default=None, help="KV pages in the pool (default: from --kv-cache-gb)")
    s.add_argument("--kv-cache-gb", type=float, default=1.0)
    s.add_argument("--threads", type=int, default=None, help="torch threads of the engine")
    s.add_argument("--weights", choices=WEIGHT_FORMATS, default="fp32", help=WEIGHTS_HELP)
    s.add_argument(
        "--kv-cache-dtype",
        choices=KV_CACHE_DTYPES,
        default="auto",
        help="the KV cache's dtype: auto (the engine's), fp32, or fp16 (CPU; twice the pages per GB)",
    )
    s.add_argument(
        "--no-prefix-cache",
        action="store_true",
        help="compute every prompt in full: do not keep prompts' K/V for later prompts of the same user "
        "that start alike (the prefix cache, on by default)",
    )
    s.add_argument("--max-body", type=int, default=1 << 20, help="largest request body / WebSocket message, bytes")
    s.add_argument(
        "--keep-finished",
        type=float,
        default=600.0,
        metavar="SECONDS",
        help="how long a finished process's result and messages are kept for late readers",
    )
    s.add_argument(
        "--drain",
        type=float,
        default=5.0,
        metavar="SECONDS",
        help="on SIGTERM, how long running processes get to finish before they are cancelled",
    )
    s.add_argument("--log-level", default="info", help="server log level (default: %(default)s)")
    add_vllm_flags(s)
    s.add_argument(
        "--plugin",
        action="append",
        metavar="NAME",
        help="mount a server plugin: an installed one by name (e.g. 'debugger', the Symphony Lab "
        "debugger at /v1/debug) or module:function (repeatable; see docs/server.md)",
    )
    s.set_defaults(fn=_serve)

    r = sub.add_parser(
        "run",
        help="run a LIP (FILE:FUNC) embedded or on a server, streaming its messages",
        description="Run the LIP FUNC from FILE with ARGS (each parsed as JSON when it is JSON). "
        "Messages stream to stdout; the return value is printed last.",
    )
    r.add_argument("target", metavar="FILE:FUNC")
    r.add_argument("args", nargs="*", help="positional arguments of the LIP")
    r.add_argument("--kw", action="append", metavar="NAME=VALUE", help="keyword argument (repeatable)")
    r.add_argument("--server", default=os.environ.get("SYMPHONY_SERVER"), help="server URL (default: run embedded)")
    r.add_argument("--token", default=None, help="API token (default: $SYMPHONY_TOKEN)")
    r.add_argument("--model", default="smollm2", help="model for an embedded run")
    r.add_argument("--weights", choices=WEIGHT_FORMATS, default="fp32", help=WEIGHTS_HELP + " (embedded run)")
    r.add_argument("--name", default=None)
    r.add_argument("--wall-time", type=float, default=None)
    r.add_argument("--no-sandbox", action="store_true", help="ask the server to run it in-process (trusted users)")
    r.add_argument("--no-result", action="store_true", help="do not print the return value")
    r.add_argument("--traceback", action="store_true", help="print the LIP's traceback when it fails")
    r.set_defaults(fn=_run)
