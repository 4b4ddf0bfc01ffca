"""Where the adapter's debugger lives: in this process (an `Engine` with a `Debugger` attached)
or on a `symphony serve --plugin debugger` server (a `RemoteDebugger` over WebSocket).

Both speak the debugger's own JSON protocol (docs/protocol.md); the adapter sees only
`request(command, **arguments)` and `subscribe(fn, events)`, so everything it does works the
same on either side. A program run by a server reports its source as `<lip ENTRY>`; the
backend maps that name back to the local file the editor opened.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import Any
from urllib.parse import urlparse, urlunparse

from ..debugger.errors import DebuggerError
from .config import ConfigError, DebugConfig

log = logging.getLogger(__name__)

DEBUG_PATH = "/v1/debug"
# the debugger events the adapter turns into DAP events
EVENTS = [
    "stopped",
    "continued",
    "process_exit",
    "thread_start",
    "thread_exit",
    "syscall_enter",
    "replay_diverged",
]


class BackendError(Exception):
    """A debugger command failed; the message is the debugger's own."""


def websocket_url(url: str) -> str:
    """http(s)://host[:port] → ws(s)://host[:port]/v1/debug; ws(s):// URLs are taken as they are."""
    u = urlparse(url if "://" in url else f"http://{url}")
    if u.scheme in ("http", "https"):
        path = u.path if u.path not in ("", "/") else DEBUG_PATH
        u = u._replace(scheme="ws" if u.scheme == "http" else "wss", path=path)
    elif u.scheme not in ("ws", "wss"):
        raise ConfigError(f"server must be an http(s):// or ws(s):// URL, got {url!r}")
    return urlunparse(u)


class Backend:
    """The debugger one DAP session drives, and the program it launched."""

    remote = False

    def __init__(self, cfg: DebugConfig) -> None:
        self.cfg = cfg
        self.program_file: str | None = None
        self.entry: str | None = None  # the LIP function's name
        self._target: str | None = None  # "module:FUNC" for the debugger's `launch`

    def request(self, command: str, **arguments: Any) -> Any:
        raise NotImplementedError

    def subscribe(self, fn: Callable[[dict], None]) -> Callable[[], None]:
        raise NotImplementedError

    def launch(self) -> int:
        """Start the configured program stopped on entry and recorded (for step back); its pid."""
        raise NotImplementedError

    def cancel(self, pid: int) -> None:
        """End process `pid` (DAP `terminate`)."""
        raise NotImplementedError

    def local_path(self, file: str | None) -> str | None:
        """The path an editor can open for a frame's `file`."""
        if file is None:
            return None
        if file.startswith("<lip ") and self.program_file is not None:
            return self.program_file
        return file if os.path.isabs(file) or os.path.exists(file) else None

    def close(self) -> None:
        pass


class InProcessBackend(Backend):
    """An engine in this process (built from `engine` options, or handed in) with a Debugger."""

    def __init__(self, cfg: DebugConfig, engine=None) -> None:
        super().__init__(cfg)
        from symphony_lab.debugger import Debugger
        from symphony_lab.tui.lip_files import resolve_target
        from symphony_lab.tui.session import SessionError

        if cfg.program is None:
            raise ConfigError("attach needs a server; an in-process session launches its program")
        try:
            self._target, self.program_file = resolve_target(cfg.program)
        except SessionError as e:
            raise ConfigError(str(e)) from None
        self.entry = cfg.program.rsplit(":", 1)[1]
        self._own_engine = engine is None
        if engine is None:
            from symphony_core import Engine

            engine = Engine(**cfg.engine)
        self.engine = engine
        self.dbg = Debugger(engine, stop_scope=cfg.stop_scope, topk=cfg.topk)

    def request(self, command: str, **arguments: Any) -> Any:
        resp = self.dbg.handle_command({"type": "request", "seq": 0, "command": command, "arguments": arguments})
        if not resp.get("success"):
            raise BackendError(resp.get("message") or f"{command} failed")
        return resp.get("body")

    def subscribe(self, fn: Callable[[dict], None]) -> Callable[[], None]:
        return self.dbg.subscribe(fn, EVENTS)

    def launch(self) -> int:
        body = self.request(
            "launch",
            fn=self._target,
            args=self.cfg.args,
            kwargs=self.cfg.kwargs,
            stop_on_entry=True,
            record=True,
        )
        return int(body["pid"])

    def cancel(self, pid: int) -> None:
        self.dbg.process(pid).cancel("terminated from the editor")

    def close(self) -> None:
        pids = [p["pid"] for p in self.request("threads")["processes"]]
        self.dbg.detach()
        for pid in pids:  # a shared engine goes on: end what this session started
            try:
                self.dbg.process(pid).cancel("the debug session ended")
            except DebuggerError:  # it ended, and the runtime let it go
                log.debug("process %s was gone already", pid)
        if self._own_engine:
            self.engine.shutdown()


class RemoteBackend(Backend):
    """A `symphony serve --plugin debugger` server: a program file is sent as source and run
    through the server's own launch path (`run_program`); `module:FUNC` is launched by name."""

    remote = True

    def __init__(self, cfg: DebugConfig) -> None:
        super().__init__(cfg)
        from symphony_lab.debugger import RemoteDebugger

        assert cfg.server is not None
        url = websocket_url(cfg.server)
        if cfg.program is not None:
            left, self.entry = cfg.program.rsplit(":", 1)
            if left.endswith(".py") or os.sep in left or os.path.exists(left):
                path = os.path.abspath(left)
                if not os.path.isfile(path):
                    raise ConfigError(f"no such file: {left}")
                self.program_file = path
            else:
                self._target = cfg.program
        try:
            self.dbg = RemoteDebugger(url, token=cfg.token, timeout=120)
        except Exception as e:
            raise ConfigError(f"could not reach the debugger at {url}: {type(e).__name__}: {e}") from None

    def request(self, command: str, **arguments: Any) -> Any:
        try:
            return self.dbg.request(command, **arguments)
        except TimeoutError:
            raise
        except Exception as e:
            raise BackendError(str(e)) from None

    def subscribe(self, fn: Callable[[dict], None]) -> Callable[[], None]:
        try:
            self.dbg.set_event_filter(EVENTS)
        except (DebuggerError, TimeoutError, OSError) as e:  # an older server, or a slow one: every event comes
            log.warning("could not narrow the debugger's event stream: %s: %s", type(e).__name__, e)
        return self.dbg.subscribe(fn, EVENTS)

    def launch(self) -> int:
        if self.program_file is not None:
            with open(self.program_file) as f:
                source = f.read()
            fields: dict[str, Any] = {"kwargs": self.cfg.kwargs}
            if not self.cfg.sandbox:
                fields["sandbox"] = False
            body = self.request(
                "run_program",
                source=source,
                entry=self.entry,
                args=self.cfg.args,
                stop_on_entry=True,
                record=True,
                **fields,
            )
        else:
            body = self.request(
                "launch", fn=self._target, args=self.cfg.args, kwargs=self.cfg.kwargs, stop_on_entry=True, record=True
            )
        return int(body["pid"])

    def cancel(self, pid: int) -> None:
        """The server's own `DELETE /v1/processes/{pid}` (the debugger protocol has no cancel verb)."""
        import httpx

        u = urlparse(self.cfg.server or "")
        if u.scheme not in ("http", "https"):
            raise BackendError("terminate needs the server's http(s):// URL (DELETE /v1/processes/<pid>)")
        headers = {"Authorization": f"Bearer {self.cfg.token}"} if self.cfg.token else {}
        base = urlunparse(u._replace(path="", params="", query="", fragment=""))
        r = httpx.delete(f"{base}/v1/processes/{pid}", headers=headers, timeout=30)
        if r.status_code >= 400:
            raise BackendError(f"the server refused to cancel process {pid}: {r.status_code} {r.text[:200]}")

    def close(self) -> None:
        self.dbg.close()


def make_backend(cfg: DebugConfig, engine=None) -> Backend:
    """The backend a configuration asks for (`engine`: reuse this in-process Engine)."""
    if cfg.server is not None:
        return RemoteBackend(cfg)
    return InProcessBackend(cfg, engine)


__all__ = ["Backend", "BackendError", "InProcessBackend", "RemoteBackend", "make_backend", "websocket_url"]
