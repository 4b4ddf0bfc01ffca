"""Serving DAP: over stdio (an editor starts `symphony-lab dap` and talks on its stdin/stdout) or
over TCP (`symphony-lab dap --port 4711`: an editor connects; one session per connection, one at
a time)."""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import Callable

from .framing import Channel
from .session import DapSession


def serve_stdio(engine=None) -> None:
    """One session on this process's stdin/stdout. Anything else that writes to stdout (a LIP's
    print, a library's warning) goes to stderr instead, so it cannot break a frame."""
    out = os.fdopen(os.dup(sys.stdout.fileno()), "wb", buffering=0)
    sys.stdout.flush()
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    sys.stdout = sys.stderr
    # a reader of its own on stdin: the session's reader thread may still wait in it at exit, and
    # the interpreter's own stdin must then not be the stream that thread holds
    inp = os.fdopen(os.dup(sys.stdin.fileno()), "rb")
    DapSession(Channel(inp, out), engine=engine).run()


def serve_tcp(
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    engine=None,
    once: bool = False,
    ready: Callable[[int], None] | None = None,
) -> None:
    """Listen on `host:port` (0: any free port) and serve each connection as one session, in turn.
    `ready(port)` is called once listening; `once`: return after the first session."""
    with socket.create_server((host, port)) as srv:
        bound = srv.getsockname()[1]
        if ready is not None:
            ready(bound)
        while True:
            conn, _ = srv.accept()
            with conn:
                rfile, wfile = conn.makefile("rb"), conn.makefile("wb")
                try:
                    DapSession(Channel(rfile, wfile), engine=engine).run()
                finally:
                    try:  # wakes the session's reader (closing its file under it would wait for it)
                        conn.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass
                    for f in (rfile, wfile):
                        try:
                            f.close()
                        except OSError:
                            pass
            if once:
                return


__all__ = ["serve_stdio", "serve_tcp"]
