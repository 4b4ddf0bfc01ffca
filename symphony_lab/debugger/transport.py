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

`RemoteDebugger(url)` has the `Debugger`'s command methods with the same signatures (it
reads them off the `Debugger` class), so code written against one runs against the other.
Connection-level command: `set_event_filter` {"events": [names] | null}.
"""

from __future__ import annotations

import inspect as _pyinspect
import itertools
import json
import queue
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib.parse import parse_qs, urlparse

from .core import DebuggerError
from .protocol import COMMANDS, EVENTS
from .scope import FullAccess

DEFAULT_EVENTS = [e for e in EVENTS if e not in ("syscall_enter", "syscall_exit")]


def _dumps(m: dict) -> str:
    return json.dumps(m, separators=(",", ":"), allow_nan=False, default=str)


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
                except Exception:
                    return
            try:
                self._send(_dumps(m))
            except Exception:
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
        except Exception:
            pass
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


class RemoteError(DebuggerError):
    """A command failed on the server; `.error` names the server-side exception type."""

    def __init__(self, message: str, error: str | None = None) -> None:
        super().__init__(message)
        self.error = error


class RemoteDebugger:
    """A `Debugger` on the far side of a WebSocket: the same command methods, answered remotely.

    Results are the same JSON bodies the in-process methods return. A failed command raises
    `RemoteError` (`TimeoutError` for a server-side timeout). Events arrive on `event_queue()`
    queues and `subscribe()` callbacks.
    """

    def __init__(self, url: str, *, token: str | None = None, timeout: float = 120.0) -> None:
        from websockets.sync.client import connect

        headers = {"Authorization": f"Bearer {token}"} if token else None
        extra = {"legacy": True} if "legacy" in _pyinspect.signature(connect).parameters else {}
        self._ws = connect(url, additional_headers=headers, max_size=64 << 20, compression=None, proxy=None, **extra)
        self.timeout = timeout
        self._seq = itertools.count(1)
        self._waiting: dict[int, tuple[threading.Event, list]] = {}
        self._lock = threading.Lock()
        self._subs: list[tuple[Callable[[dict], None], frozenset | None]] = []
        self.closed = False
        self._reader = threading.Thread(target=self._read_loop, name="symphony-lab-ws-client", daemon=True)
        self._reader.start()

    def _read_loop(self) -> None:
        try:
            for raw in self._ws:
                m = json.loads(raw)
                if m.get("type") == "response":
                    with self._lock:
                        w = self._waiting.pop(m.get("request_seq"), None)
                    if w is not None:
                        w[1].append(m)
                        w[0].set()
                elif m.get("type") == "event":
                    for fn, kinds in list(self._subs):
                        if kinds is None or m["event"] in kinds:
                            try:
                                fn(m)
                            except Exception:
                                pass
        except Exception:
            pass
        finally:
            self.closed = True
            with self._lock:
                waiting, self._waiting = self._waiting, {}
            for ev, box in waiting.values():
                box.append({"success": False, "message": "connection closed", "error": "ConnectionClosed"})
                ev.set()

    def request(self, command: str, **arguments: Any) -> Any:
        """Send one command; return its body or raise."""
        if self.closed:
            raise RemoteError("connection closed", "ConnectionClosed")
        seq = next(self._seq)
        ev, box = threading.Event(), []
        with self._lock:
            self._waiting[seq] = (ev, box)
        self._ws.send(_dumps({"type": "request", "seq": seq, "command": command, "arguments": arguments}))
        wait = self.timeout + float(arguments.get("timeout") or 0)
        if not ev.wait(wait):
            with self._lock:
                self._waiting.pop(seq, None)
            raise TimeoutError(f"no response to {command} within {wait}s")
        r = box[0]
        if not r.get("success"):
            if r.get("error") == "TimeoutError":
                raise TimeoutError(r.get("message"))
            raise RemoteError(r.get("message", "command failed"), r.get("error"))
        return r.get("body")

    def set_event_filter(self, events: list[str] | None) -> Any:
        """Which events the server sends this connection (`None`: all, syscall events included)."""
        return self.request("set_event_filter", events=events)

    def subscribe(self, fn: Callable[[dict], None], kinds: list[str] | None = None) -> Callable[[], None]:
        """Call `fn(event message)` for every event received (optionally only these names); returns `unsubscribe`."""
        entry = (fn, None if kinds is None else frozenset(kinds))
        self._subs = self._subs + [entry]

        def unsubscribe() -> None:
            self._subs = [s for s in self._subs if s is not entry]

        return unsubscribe

    def event_queue(self, kinds: list[str] | None = None) -> tuple[queue.Queue, Callable[[], None]]:
        """`subscribe` into a queue: returns `(queue, unsubscribe)`."""
        q: queue.Queue = queue.Queue()
        return q, self.subscribe(q.put, kinds)

    def launch(
        self,
        fn: str,
        *args: Any,
        stop_on_entry: bool | None = None,
        record: bool | None = None,
        name: str | None = None,
        priority: int = 0,
        **kwargs: Any,
    ) -> Any:
        """The `launch` command over the socket: `fn` must be "module:function", importable on the
        server, and the server must allow remote launches (`DebugServer(allow_launch=True)`).

        Raises:
            TypeError: `a remote launch names the LIP as 'module:function'`.
            RemoteError: the server refused it (`launch is not allowed on this connection`, …).
        """
        if not isinstance(fn, str):
            raise TypeError("a remote launch names the LIP as 'module:function'")
        a: dict = {"fn": fn, "args": list(args), "kwargs": kwargs, "priority": priority}
        for k, v in (("stop_on_entry", stop_on_entry), ("record", record), ("name", name)):
            if v is not None:
                a[k] = v
        return self.request("launch", **a)

    def run_program(
        self, source: str, entry: str, *args: Any, stop_on_entry: bool = False, record: bool = False, **fields: Any
    ) -> Any:
        """Start a program from its source through a `symphony serve` server's own launch path
        (its quotas and sandbox; fields as in POST /v1/processes: kwargs, name, limits, sandbox)
        under this debugger; only on a server with `--plugin debugger`."""
        return self.request(
            "run_program",
            source=source,
            entry=entry,
            args=list(args),
            stop_on_entry=stop_on_entry,
            record=record,
            **fields,
        )

    def __getattr__(self, name: str) -> Any:
        cmd = "continue" if name == "continue_" else name
        if cmd not in COMMANDS or cmd in ("launch", "initialize"):
            raise AttributeError(name)
        from .core import Debugger

        sig = _pyinspect.signature(getattr(Debugger, COMMANDS[cmd]))

        def call(*args: Any, **kwargs: Any) -> Any:
            bound = sig.bind(None, *args, **kwargs)
            arguments = {k: v for k, v in bound.arguments.items() if k != "self"}
            for k, p in sig.parameters.items():  # **conditions of set_breakpoint
                if p.kind == p.VAR_KEYWORD and k in arguments:
                    arguments.update(arguments.pop(k))
            return self.request(cmd, **arguments)

        call.__name__ = name
        call.__doc__ = getattr(Debugger, COMMANDS[cmd]).__doc__
        return call

    def initialize(self) -> Any:
        return self.request("initialize")

    def close(self) -> None:
        self.closed = True
        try:
            self._ws.close()
        except Exception:
            pass

    def __enter__(self) -> RemoteDebugger:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def connect(url: str, *, token: str | None = None, timeout: float = 120.0) -> RemoteDebugger:
    """Attach to a debugger served over WebSocket (DebugServer or the server's debug route)."""
    return RemoteDebugger(url, token=token, timeout=timeout)


__all__ = ["DEFAULT_EVENTS", "DebugServer", "RemoteDebugger", "RemoteError", "connect", "starlette_route"]
