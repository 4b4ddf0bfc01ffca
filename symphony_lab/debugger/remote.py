"""The debugger protocol's WebSocket client: `RemoteDebugger`, a `Debugger` on the far side of a socket.

`RemoteDebugger(url)` has the `Debugger`'s command methods with the same signatures (it
reads them off the `Debugger` class), so code written against one runs against the other.
The servers it talks to (`DebugServer`, `starlette_route`) are in transport.py.
"""

from __future__ import annotations

import inspect as _pyinspect
import itertools
import json
import logging
import queue
import threading
from collections.abc import Callable
from typing import Any

from .errors import DebuggerError
from .protocol import COMMANDS
from .protocol import encode_message as _dumps

log = logging.getLogger(__name__)


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
                            except Exception:  # one subscriber failing must not stop the reader for the others
                                log.warning("a subscriber failed on a %r event", m["event"], exc_info=True)
        except Exception as e:  # the connection broke (or sent what is not JSON): every waiter is answered below
            log.warning("the debugger connection ended: %s: %s", type(e).__name__, e)
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

        target = getattr(Debugger, COMMANDS[cmd])
        sig = _pyinspect.signature(target)
        first = next(iter(sig.parameters))  # `self`

        def call(*args: Any, **kwargs: Any) -> Any:
            bound = sig.bind(None, *args, **kwargs)
            arguments = {k: v for k, v in bound.arguments.items() if k != first}
            for k, p in sig.parameters.items():  # **conditions of set_breakpoint
                if p.kind == p.VAR_KEYWORD and k in arguments:
                    arguments.update(arguments.pop(k))
            return self.request(cmd, **arguments)

        call.__name__ = name
        call.__doc__ = target.__doc__
        return call

    def initialize(self) -> Any:
        return self.request("initialize")

    def close(self) -> None:
        self.closed = True
        try:
            self._ws.close()
        except (OSError, RuntimeError) as e:  # the socket is gone already: closed either way
            log.debug("closing the debugger connection: %s", e)

    def __enter__(self) -> RemoteDebugger:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def connect(url: str, *, token: str | None = None, timeout: float = 120.0) -> RemoteDebugger:
    """Attach to a debugger served over WebSocket (DebugServer or the server's debug route)."""
    return RemoteDebugger(url, token=token, timeout=timeout)


__all__ = ["RemoteDebugger", "RemoteError", "connect"]
