"""`symphony-lab`: Symphony Lab from the command line.

    symphony-lab tui examples/lips/prefix_parallel.py:prefix_parallel
    symphony-lab tui examples/lips/streaming_completion.py:complete "The capital of France is" max_tokens=16
    symphony-lab tui --server http://127.0.0.1:8000 --token T my_lip.py:main   # on `symphony serve --plugin debugger`
    symphony-lab tui --server ws://127.0.0.1:8765/          # attach to a debugger served over WebSocket
    symphony-lab dap                                        # a Debug Adapter Protocol server on stdio (docs/ide.md)
    symphony-lab dap --port 4711                            # ... on TCP, for editors that connect

Arguments after FILE:FUNC go to the LIP: each is read as a Python literal when it is one
(`16`, `0.7`, `"['a', 'b']"`), else taken as a string; `name=value` is a keyword argument.
"""

from __future__ import annotations

import argparse
import ast
import sys
from urllib.parse import urlparse, urlunparse

from symphony_core.cli import package_version

DEBUG_PATH = "/v1/debug"


def parse_value(text: str):
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def parse_lip_args(items: list[str]) -> tuple[tuple, dict]:
    """`["hi", "max_tokens=16"]` → (("hi",), {"max_tokens": 16})."""
    args, kwargs = [], {}
    for it in items:
        key, eq, val = it.partition("=")
        if eq and key.isidentifier():
            kwargs[key] = parse_value(val)
        else:
            args.append(parse_value(it))
    return tuple(args), kwargs


def debugger_url(url: str) -> str:
    """A debugger WebSocket address from what the user typed: ws(s):// as given; http(s)://host
    → ws(s)://host/v1/debug (where `symphony serve` would mount the debugger)."""
    u = urlparse(url if "://" in url else f"ws://{url}")
    if u.scheme in ("http", "https"):
        path = u.path if u.path not in ("", "/") else DEBUG_PATH
        u = u._replace(scheme="ws" if u.scheme == "http" else "wss", path=path)
    elif u.scheme not in ("ws", "wss"):
        raise SystemExit(f"symphony-lab: --server wants ws://, wss://, http:// or https://, got {url!r}")
    return urlunparse(u)


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="symphony-lab", description="Symphony Lab: debug LIPs in the terminal.")
    ap.add_argument("--version", action="version", version=f"%(prog)s {package_version()}")
    sub = ap.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser(
        "tui",
        help="the terminal UI: single-step a LIP, watch the KV tree and the scheduler",
        description="Launch FILE:FUNC in an embedded engine, stopped on entry, and debug it; or "
        "attach to a debugger served at --server URL.",
    )
    t.add_argument("target", nargs="?", help="FILE.py:FUNC or module:FUNC (with --server: module:FUNC on the server)")
    t.add_argument("lip_args", nargs=argparse.REMAINDER, help="arguments for the LIP: literals, or name=value")
    t.add_argument("--server", metavar="URL", help="attach to a debugger over WebSocket instead of an embedded engine")
    t.add_argument("--token", help="API token for --server")
    t.add_argument(
        "--no-sandbox",
        action="store_true",
        help="with an http(s) --server: ask to run the program in-process (trusted users only)",
    )
    t.add_argument("--model", help="model for the embedded engine (default: the built-in SmolLM2-135M-Instruct)")
    t.add_argument("--device", help="cpu, cuda, cuda:1 … (default: cuda if available)")
    t.add_argument("--num-pages", type=int, help="KV pages in the pool (default: from --kv-cache-gb)")
    t.add_argument("--kv-cache-gb", type=float, help="KV cache size in GB")
    t.add_argument(
        "--weights",
        choices=("fp32", "q8", "q4"),
        help="weight format of the embedded engine on CPU (fp32 exact, the default; q8/q4 quantised and faster)",
    )
    t.add_argument("--no-stop-on-entry", action="store_true", help="run straight away (breakpoints still stop)")
    t.add_argument("--theme", choices=["dark", "light"], help="colour theme (t toggles it in the app)")
    t.add_argument("--poll", type=float, default=0.25, help="seconds between screen refreshes (default 0.25)")
    d = sub.add_parser(
        "dap",
        help="a Debug Adapter Protocol server: debug LIPs from VS Code, Neovim, Emacs, Zed (docs/ide.md)",
        description="Speak the Debug Adapter Protocol on stdin/stdout (an editor starts this), or on TCP "
        "with --port (an editor connects). The editor's launch configuration names the program (FILE.py:FUNC) "
        "and where it runs: an engine in this process, or a `symphony serve --plugin debugger` server.",
    )
    d.add_argument("--port", type=int, help="listen on this TCP port instead of stdio (0: any free port, printed)")
    d.add_argument("--host", default="127.0.0.1", help="address to listen on with --port (default 127.0.0.1)")
    return ap


def make_session(ns):
    from symphony_lab.tui import DebuggerSession, EmbeddedSession

    args, kwargs = parse_lip_args(ns.lip_args or [])
    if ns.server:
        from symphony_lab.debugger import RemoteDebugger
        from symphony_lab.tui.debug_session import resolve_target

        url = debugger_url(ns.server)
        try:
            remote = RemoteDebugger(url, token=ns.token)
        except Exception as e:
            raise SystemExit(
                f"symphony-lab: could not attach to a debugger at {url}: {type(e).__name__}: {e}\n"
                f"  The address must serve the debugger protocol (docs/protocol.md): a DebugServer, or a "
                f"server that mounts symphony_lab.debugger.starlette_route at {DEBUG_PATH}."
            ) from None
        target, path = resolve_target(ns.target, load=False) if ns.target else (None, None)
        program = None
        if path is not None and urlparse(ns.server if "://" in ns.server else "").scheme in ("http", "https"):
            # a `symphony serve` server: send the file itself through the server's launch path
            with open(path) as f:
                program = {"source": f.read(), "entry": target.rsplit(":", 1)[1]}
            if ns.no_sandbox:
                program["sandbox"] = False
        return DebuggerSession(
            remote,
            target,
            args,
            kwargs,
            title=f"{url}" + (f"  {ns.target}" if ns.target else ""),
            stop_on_entry=not ns.no_stop_on_entry,
            on_close=remote.close,
            program=program,
            program_file=path,
        )
    if not ns.target:
        raise SystemExit(
            "symphony-lab tui: give FILE:FUNC (e.g. examples/lips/prefix_parallel.py:prefix_parallel) or --server URL"
        )
    opts = {
        k: v
        for k, v in (
            ("model", ns.model),
            ("device", ns.device),
            ("num_pages", ns.num_pages),
            ("kv_cache_gb", ns.kv_cache_gb),
            ("weights", ns.weights),
        )
        if v is not None
    }
    try:
        return EmbeddedSession(ns.target, args, kwargs, engine_options=opts, stop_on_entry=not ns.no_stop_on_entry)
    except Exception as e:
        raise SystemExit(f"symphony-lab tui: {e}") from None


def main(argv: list[str] | None = None) -> int:
    ns = build_parser().parse_args(argv)
    if ns.cmd == "tui":
        try:
            from symphony_lab.tui import SymphonyLab
        except ImportError as e:
            raise SystemExit(f"symphony-lab tui needs Textual: pip install 'symphony-lip[tui]' ({e})") from None
        session = make_session(ns)
        theme = {"dark": "textual-dark", "light": "textual-light"}.get(ns.theme or "")
        SymphonyLab(session, poll=ns.poll, theme=theme).run()
        return 0
    if ns.cmd == "dap":
        from symphony_lab.dap import serve_stdio, serve_tcp

        if ns.port is None:
            serve_stdio()
            return 0

        def ready(port: int) -> None:
            print(f"symphony-lab dap: listening on {ns.host}:{port}", file=sys.stderr, flush=True)

        try:
            serve_tcp(ns.host, ns.port, ready=ready)
        except KeyboardInterrupt:
            pass
        return 0
    return 2


if __name__ == "__main__":
    sys.exit(main())
