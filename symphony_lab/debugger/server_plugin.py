"""The debugger as a `symphony serve` plugin: `symphony serve --plugin debugger`.

Mounts the debugger protocol (docs/protocol.md) at `/v1/debug` on the server's own port. A
connection authenticates with the server's API token (`Authorization: Bearer`, or `?token=`),
like every other route, and gets what its user may do (scope.py):

- a loopback server without tokens, or a trusted user: the whole engine (trusted users can run
  code in the server anyway, so they may also `launch` by module name);
- any other user: their own processes only.

One extra command, `run_program`, starts a program through the server's own launch path (the
same checks, quotas and sandbox as `POST /v1/processes`, same fields: source, entry, args,
kwargs, name, limits, sandbox), registered with the debugger before its first line runs, so
`stop_on_entry` and `record` work for it:

    {"command": "run_program", "arguments": {"source": "...", "entry": "main", "args": [..],
     "stop_on_entry": true, "record": false}}  →  {"pid": 7, "name": "main", "sandboxed": true}

The Debugger attaches at the first connection, not at start-up, so a server with the plugin
but no debugger client pays nothing for it.
"""

from __future__ import annotations

import threading
from typing import Any

from .scope import FullAccess, UserScope

PATH = "/v1/debug"
RUN_FIELDS = ("source", "entry", "args", "kwargs", "name", "limits", "sandbox", "program", "priority")


class ServerPolicy:
    """A connection's policy plus the `run_program` command, which needs the server's context."""

    def __init__(self, inner, ctx, user) -> None:
        self.inner, self.ctx, self.user = inner, ctx, user

    def handle(self, dbg, msg: Any) -> dict:
        if isinstance(msg, dict) and msg.get("command") == "run_program":
            return self._run_program(dbg, msg)
        return self.inner.handle(dbg, msg)

    def event(self, dbg, msg: dict) -> dict | None:
        return self.inner.event(dbg, msg)

    def _run_program(self, dbg, msg: dict) -> dict:
        resp = {"type": "response", "request_seq": msg.get("seq"), "command": "run_program"}
        args = msg.get("arguments") or {}
        try:
            if not isinstance(args, dict):
                raise ValueError("arguments must be a JSON object")
            unknown = sorted(set(args) - set(RUN_FIELDS) - {"stop_on_entry", "record"})
            if unknown:
                raise ValueError(
                    f"run_program: unknown argument(s) {unknown}; it takes "
                    f"{sorted(RUN_FIELDS + ('stop_on_entry', 'record'))}"
                )
            body = {k: args[k] for k in RUN_FIELDS if k in args}
            rec = dbg.launch_with(
                lambda: self.ctx.launch_program(self.user, body, "run_program"),
                stop_on_entry=bool(args.get("stop_on_entry")),
                record=bool(args.get("record")),
            )
            resp.update(success=True, body={"pid": rec.proc.pid, "name": rec.proc.name, "sandboxed": rec.sandboxed})
        except Exception as e:  # the server's BadRequest carries the HTTP-style reason in its message
            message = getattr(e, "message", None) or str(e) or type(e).__name__
            resp.update(success=False, message=message, error=type(e).__name__)
        return resp


def debugger_plugin(ctx) -> list:
    """The `symphony.server_plugins` entry point `debugger`."""
    from .core import Debugger
    from .transport import starlette_route

    lock = threading.Lock()
    box: list = []

    def debugger() -> Debugger:
        with lock:
            if not box:
                box.append(Debugger(ctx.engine))
            return box[0]

    def policy(ws):
        user = ctx.authenticate(ws)
        if user is None:
            return None
        if ctx.state.users.open:
            inner = FullAccess()
        elif user.trusted:
            inner = FullAccess(allow_launch=True)
        else:
            inner = UserScope(user.name)
        return ServerPolicy(inner, ctx, user)

    return [starlette_route(debugger, PATH, policy=policy)]


__all__ = ["PATH", "ServerPolicy", "debugger_plugin"]
