"""The debugger protocol over WebSocket: a server for a `Debugger`, and `RemoteDebugger`, the client.

One JSON message per WebSocket text frame, exactly the messages of protocol.py: the client
sends requests, the server answers each with a response (matched by `request_seq`) and pushes
event messages as they happen. Commands run on a small thread pool, so a long-poll command
(`wait_stopped`, `wait_batch_pending`, `wait_process`) never holds up the others or the
event stream; events go through a per-connection queue and a sender thread, so a slow client
never slows a LIP (past `max_pending_events` queued events it loses events, and is told so
with an `events_dropped` event).

Two ways to serve:
- `DebugServer(debugger, port=...)`: a standalone WebSocket server (the `websockets`
  package), e.g. next to a notebook's engine;
- `starlette_route(debugger, path="/v1/debug", authenticate=...)`: a Starlette
  `WebSocketRoute` that `symphony serve`'s app can mount beside its own routes.

The client, `RemoteDebugger(url)` / `connect(url)`, lives in remote.py and is re-exported here.
Connection-level command: `set_event_filter` {"events": [names] | null}.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib.parse import parse_qs, urlparse

from .protocol import EVENTS
from .protocol import encode_message as _dumps
from .remote import RemoteDebugger, RemoteError, connect
from .scope import FullAccess

log = logging.getLogger(__name__)

DEFAULT_EVENTS = [e for e in EVENTS if e not in ("syscall_enter", "syscall_exit")]


class _Session:
    """One client connection: its event filter, its outgoing queue and its sender."""

    def __init__(
        self,
        debugger,
        send: Callable[[str], None],
        *,
        policy,
        events: list[str] | None,
        max_pending_events: int,
        workers: int,
    ) -> None:
        self.dbg = debugger
        self._send = send
        self.policy = policy  # scope.FullAccess or scope.UserScope: what this connection may see and do
        self.kinds: frozenset | None = None if events is None else frozenset(events)
        self.max_pending = max_pending_events
        self.out: queue.Queue = queue.Queue()
        self.dropped = 0
        self.closed = False
        self.pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="symphony-lab-ws")
        self.sender = threading.Thread(target=self._send_loop, name="symphony-lab-ws-send", daemon=True)
        self.sender.start()
        self.unsubscribe = debugger.subscribe(self._on_event)

    def _on_event(self, msg: dict) -> None:
        if self.closed or (self.kinds is not None and msg["event"] not in self.kinds):
            return
        msg = self.policy.event(self.dbg, msg)
        if msg is None:
            return
        if self.out.qsize() >= self.max_pending:
            self.dropped += 1
            return
        self.out.put(msg)

    def _send_loop(self) -> None:
        while True:
            m = self.out.get()
            if m is None:
                return
            if self.dropped:
                n, self.dropped = self.dropped, 0
                try:
                    self._send(_dumps({"type": "event", "event": "events_dropped", "seq": 0, "body": {"dropped": n}}))
                except Exception as e:  # whatever the transport raises, the client is gone: stop sending
                    log.info("a debugger client went away: %s: %s", type(e).__name__, e)
                    return
            try:
                self._send(_dumps(m))
            except Exception as e:  # as above
                log.info("a debugger client went away: %s: %s", type(e).__name__, e)
                return

    def on_message(self, raw: str | bytes) -> None:
        try:
            msg = json.loads(raw)
        except ValueError as e:
            self.out.put(
                {
                    "type": "response",
                    "request_seq": None,
                    "command": None,
                    "success": False,
                    "message": f"not JSON: {e}",
                    "error": "ProtocolError",
                }
            )
            return
        if isinstance(msg, dict) and msg.get("command") == "set_event_filter":
            ev = (msg.get("arguments") or {}).get("events")
            ok = ev is None or (isinstance(ev, list) and all(isinstance(e, str) for e in ev))
            if ok:
                self.kinds = None if ev is None else frozenset(ev)
            self.out.put(
                {
                    "type": "response",
                    "request_seq": msg.get("seq"),
                    "command": "set_event_filter",
                    "success": ok,
                    "body": {"events": None if self.kinds is None else sorted(self.kinds)},
                    **({} if ok else {"message": "events must be a list of event names or null"}),
                }
            )
            return
        self.pool.submit(self._run, msg)

    def _run(self, msg: Any) -> None:
        resp = self.policy.handle(self.dbg, msg)
        if not self.closed:
            self.out.put(resp)

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.unsubscribe()
        self.out.put(None)
        self.pool.shutdown(wait=False, cancel_futures=True)


class DebugServer:
    """Serve `debugger` over WebSocket at ws://host:port/ (optionally `?token=...` required).

    `allow_launch` lets clients start programs by "module:function" (only for a trusted,
    local client: it imports and runs code); `allow_files` lets them save and load recordings.
    """

    def __init__(
        self,
        debugger,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        token: str | None = None,
        allow_launch: bool = False,
        allow_files: bool = False,
        events: list[str] | None = DEFAULT_EVENTS,
        max_pending_events: int = 10_000,
        workers: int = 8,
    ) -> None:
        from websockets.sync.server import serve

        self.debugger = debugger
        self.token = token
        self.opts = dict(
            policy=FullAccess(allow_launch=allow_launch, allow_files=allow_files),
            events=events,
            max_pending_events=max_pending_events,
            workers=workers,
        )
        self._server = serve(self._handler, host, port, max_size=16 << 20, compression=None)
        self.host = host
        self.port = self._server.socket.getsockname()[1]
        self._thread = threading.Thread(target=self._server.serve_forever, name="symphony-lab-ws-server", daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"ws://{self.host}:{self.port}/"

    def _handler(self, ws) -> None:
        if self.token is not None:
            q = parse_qs(urlparse(ws.request.path).query)
            auth = ws.request.headers.get("Authorization", "")
            given = (q.get("token") or [None])[0] or (auth[7:].strip() if auth.lower().startswith("bearer ") else None)
            if given != self.token:
                ws.close(4401, "missing or wrong debugger token")
                return
        s = _Session(self.debugger, ws.send, **self.opts)
        try:
            for raw in ws:
                s.on_message(raw)
        except Exception as e:  # the connection broke: this client's session ends, the server goes on
            log.info("a debugger connection ended: %s: %s", type(e).__name__, e)
        finally:
            s.close()

    def close(self) -> None:
        self._server.shutdown()
        self._thread.join(timeout=5)

    def __enter__(self) -> DebugServer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def starlette_route(
    debugger,
    path: str = "/v1/debug",
    *,
    authenticate: Callable[[Any], bool] | None = None,
    allow_launch: bool = False,
    allow_files: bool = False,
    policy: Callable[[Any], Any] | None = None,
):
    """A Starlette WebSocketRoute speaking the debugger protocol (for `symphony serve`'s app).

    `authenticate(websocket) -> bool` runs before the handshake is accepted (e.g. the server's
    bearer-token check); a refused client is closed with code 4401. Or give
    `policy(websocket) -> FullAccess | UserScope | None` (scope.py) to decide per connection what
    it may see and do; None refuses it (4401). `debugger` may be a function returning the
    Debugger, called at the first accepted connection (so nothing attaches before anyone asks).
    """
    import asyncio

    from starlette.routing import WebSocketRoute
    from starlette.websockets import WebSocketDisconnect

    full = FullAccess(allow_launch=allow_launch, allow_files=allow_files)

    async def endpoint(ws) -> None:
        if authenticate is not None and not authenticate(ws):
            await ws.close(code=4401)
            return
        pol = policy(ws) if policy is not None else full
        if pol is None:
            await ws.close(code=4401, reason="missing or unknown API token")
            return
        dbg = debugger() if callable(debugger) and not hasattr(debugger, "runtime") else debugger
        await ws.accept()
        loop = asyncio.get_running_loop()
        outq: asyncio.Queue = asyncio.Queue()

        def send(text: str) -> None:  # called from the session's sender thread
            asyncio.run_coroutine_threadsafe(outq.put(text), loop).result()

        s = _Session(dbg, send, policy=pol, events=DEFAULT_EVENTS, max_pending_events=10_000, workers=8)

        async def writer() -> None:
            while True:
                await ws.send_text(await outq.get())

        wtask = asyncio.create_task(writer())
        try:
            while True:
                raw = await ws.receive_text()
                s.on_message(raw)
        except (WebSocketDisconnect, RuntimeError):
            pass
        finally:
            s.close()
            wtask.cancel()

    return WebSocketRoute(path, endpoint)


__all__ = ["DEFAULT_EVENTS", "DebugServer", "RemoteDebugger", "RemoteError", "connect", "starlette_route"]
