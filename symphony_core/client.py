"""`Client`: run LIPs on a Symphony server with the same verbs as `Engine`.

    from symphony_core.client import Client
    c = Client("http://127.0.0.1:8000", token="...")
    proc = c.run(complete, "The capital of France is", max_tokens=16)   # a LIP function
    for msg in proc.messages(): print(msg, end="")
    print(proc.result())

`run` sends the source of the function's module (so its helpers come along) and the
function's name; the server runs it, sandboxed, as the token's user. Each process is one
WebSocket: messages stream back as the LIP sends them, `send` goes the other way.
"""

from __future__ import annotations

import inspect
import json
import os
import queue
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import urlencode

import httpx

from . import errors as _errors
from .sched.process import LIPError

__all__ = ["Client", "RemoteProcess", "RemoteLIPError", "ServerError"]


class ServerError(_errors.SymphonyError):
    """The server refused a request; `.status` is the HTTP status, `.type` its error type."""

    def __init__(self, message: str, status: int = 0, type: str = "") -> None:
        super().__init__(message)
        self.status, self.type = status, type


class RemoteLIPError(LIPError):
    """A remote LIP failed (or was cancelled); `.error_type` names the LIP's own exception."""

    def __init__(self, message: str, traceback_text: str = "", error_type: str = "", status: str = "failed") -> None:
        super().__init__(message, traceback_text)
        self.error_type, self.status = error_type, status


def _raise_for(status: int, body: Any) -> None:
    err = body.get("error") if isinstance(body, dict) else None
    msg = err.get("message") if isinstance(err, dict) else str(body)
    typ = err.get("type", "") if isinstance(err, dict) else ""
    cls = getattr(_errors, typ, None)
    if isinstance(cls, type) and issubclass(cls, _errors.SymphonyError):
        raise cls(msg)
    raise ServerError(f"HTTP {status}: {msg}", status, typ)


def program_of(fn: Callable | str | None) -> tuple[str, str]:
    """(source, entry) for a LIP function, or for "path/to/file.py:func".

    For a function, the source is its whole module's (so its helpers travel with it), or the
    function's own source where there is no module file (a notebook cell).

    Raises:
        ValueError: `expected FILE:FUNC, got <x>`.
        TypeError: `run expects a LIP function or 'FILE:FUNC', got <type>`.
        OSError: the file cannot be read.
    """
    if isinstance(fn, str):
        path, sep, entry = fn.rpartition(":")
        if not sep or not path:
            raise ValueError(f"expected FILE:FUNC, got {fn!r}")
        with open(path) as f:
            return f.read(), entry
    if not callable(fn):
        raise TypeError(f"run expects a LIP function or 'FILE:FUNC', got {type(fn).__name__}")
    mod = inspect.getmodule(fn)
    try:
        src = inspect.getsource(mod) if mod is not None else inspect.getsource(fn)
    except (OSError, TypeError):
        src = inspect.getsource(fn)  # a notebook: the function alone
    return src, fn.__name__


class RemoteProcess:
    """A process on the server: `messages()`, `send()`, `result()`, `cancel()`, `status`, `pid`."""

    def __init__(self, client: Client, ws, started: dict, on_output: Callable[[str, str], None] | None) -> None:
        self._client, self._ws = client, ws
        self.pid: int = started["pid"]
        self.name: str = started.get("name", "")
        self.sandboxed: bool = started.get("sandboxed", True)
        self._q: queue.Queue = queue.Queue()
        self._outcome: dict | None = None
        self._done = threading.Event()
        self._on_output = on_output or (lambda stream, text: sys.stderr.write(text))
        self._thread = threading.Thread(target=self._read, name=f"symphony-remote-{self.pid}", daemon=True)
        self._thread.start()

    def _read(self) -> None:
        try:
            for raw in self._ws:
                m = json.loads(raw)
                t = m.get("type")
                if t == "message":
                    self._q.put(("m", m.get("data")))
                elif t == "output":
                    try:
                        self._on_output(m.get("stream", "stdout"), m.get("text", ""))
                    except Exception:
                        pass
                elif t == "result":
                    self._outcome = m
                    break
                elif t == "error":
                    e = m.get("error", {})
                    self._q.put(("e", f"{e.get('type')}: {e.get('message')}"))
        except Exception as e:  # the connection broke
            if self._outcome is None:
                self._outcome = {
                    "status": "failed",
                    "error": {"type": "ConnectionError", "message": f"lost the connection to the server: {e}"},
                }
        finally:
            if self._outcome is None:
                self._outcome = {
                    "status": "failed",
                    "error": {"type": "ConnectionError", "message": "the server closed the connection"},
                }
            self._done.set()
            self._q.put(("end", None))
            try:
                self._ws.close()
            except Exception:
                pass

    def messages(self, timeout: float | None = None) -> Iterator[Any]:
        """Everything the LIP `send`s, in order, until it ends."""
        while True:
            try:
                kind, v = self._q.get(timeout=timeout)
            except queue.Empty:
                raise TimeoutError(f"process {self.pid}: no message within {timeout}s") from None
            if kind == "end":
                self._q.put((kind, v))
                return
            if kind == "m":
                yield v

    def send(self, obj: Any) -> None:
        """Deliver `obj` (JSON data) to the LIP's `sym.recv()`."""
        self._ws.send(json.dumps({"op": "send", "data": obj}))

    def cancel(self, reason: str = "") -> None:
        """Ask the server to cancel the process (`{"op": "cancel"}`); `result()` then raises."""
        if not self._done.is_set():
            try:
                self._ws.send(json.dumps({"op": "cancel"}))
            except Exception:
                pass

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until the process ends; False if `timeout` passed first."""
        return self._done.wait(timeout)

    @property
    def done(self) -> bool:
        """True once the result (or the connection's end) has arrived."""
        return self._done.is_set()

    @property
    def status(self) -> str:
        """The process's status: the final one once ended, else asked of the server."""
        if self._outcome is not None:
            return self._outcome.get("status", "failed")
        return self._client._request("GET", f"/v1/processes/{self.pid}").get("status", "running")

    def result(self, timeout: float | None = None) -> Any:
        """The LIP's return value, once it has ended.

        Raises:
            RemoteLIPError: the LIP failed or was cancelled: the server's message, with the
                remote traceback in `.traceback_text`, the LIP's exception name in
                `.error_type` and `.status` (`failed` / `cancelled`). A lost connection is a
                `RemoteLIPError` with `error_type` `ConnectionError`.
            TimeoutError: `process <pid> (<name>) still running after <timeout>s`.
        """
        if not self._done.wait(timeout):
            raise TimeoutError(f"process {self.pid} ({self.name}) still running after {timeout}s")
        out = self._outcome or {}
        if "error" in out:
            e = out["error"]
            raise RemoteLIPError(
                e.get("message", "failed"), e.get("traceback", ""), e.get("type", ""), out.get("status", "failed")
            )
        return out.get("result")

    def __repr__(self) -> str:
        return f"RemoteProcess(pid={self.pid}, {self.name!r})"


class Client:
    """A Symphony server, used like an `Engine`: `run`, `launch`, and the KV file verbs.

    Args:
        url: the server's base URL.
        token: the API token; default `$SYMPHONY_TOKEN` (none for a tokenless loopback server).
        timeout: seconds for each HTTP request and for the WebSocket's opening.

    Every method raises, for a refused request, the Symphony error the server named
    when it is one of `symphony_core.errors` (`KVPermissionError`, `KVNotFound`, `KVError`, …,
    with the server's message), else a `ServerError` with `.status` (the HTTP status) and
    `.type`.
    """

    def __init__(self, url: str = "http://127.0.0.1:8000", token: str | None = None, timeout: float = 120.0) -> None:
        self.url = url.rstrip("/")
        self.token = token if token is not None else os.environ.get("SYMPHONY_TOKEN")
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        self._http = httpx.Client(base_url=self.url, headers=headers, timeout=timeout)
        self.timeout = timeout

    def _request(self, method: str, path: str, **kw) -> Any:
        r = self._http.request(method, path, **kw)
        if r.status_code == 204:
            return None
        try:
            body = r.json()
        except ValueError:
            body = r.text
        if r.status_code >= 400:
            _raise_for(r.status_code, body)
        return body

    # --- programs --------------------------------------------------------------------------------
    def run(self, fn: Callable | str, *args: Any, **kwargs: Any) -> RemoteProcess:
        """Launch the LIP `fn(sym, *args, **kwargs)` on the server; returns its process at once.

        `fn` is a function (its module's source is sent) or `"path/to/file.py:func"`.
        Arguments, messages and results must be JSON data.

        Raises:
            ServerError: the server refused the run (`HTTP 401: …`, `HTTP 422: …`, …).
            ValueError: `expected FILE:FUNC, got <x>`.
            TypeError: `run expects a LIP function or 'FILE:FUNC', got <type>`.
        """
        return self.launch(fn, *args, kwargs=kwargs)

    def launch(
        self,
        fn: Callable | str | None = None,
        *args: Any,
        name: str | None = None,
        priority: int = 0,
        limits: dict | None = None,
        kwargs: dict | None = None,
        sandbox: bool | None = None,
        source: str | None = None,
        entry: str | None = None,
        program: str | None = None,
        detach: bool = False,
        on_output: Callable[[str, str], None] | None = None,
        user: str | None = None,
    ) -> RemoteProcess:
        """`run` with options. The user is the token's (`user=` is accepted for Engine parity and
        must match it if given). `limits`: wall_time, max_tokens, cpu_seconds, memory_mb, max_threads.

        Args:
            fn: a LIP function or `"FILE:FUNC"`; or `None` with `source=`/`entry=` or `program=`.
            name: the process's name.
            priority: clamped by the server to [-10, 10].
            limits: `{"wall_time", "max_tokens", "cpu_seconds", "memory_mb", "max_threads"}`,
                each > 0; they can only tighten the server's and the user's.
            kwargs: the LIP's keyword arguments.
            sandbox: `False` asks to run in the engine process (trusted users only).
            source: the program's source, instead of `fn`.
            entry: the LIP function's name in `source` or in the uploaded program.
            program: the id of a program uploaded with `upload`.
            detach: keep the process running if this client disconnects.
            on_output: `fn(stream, text)` for what a sandboxed LIP prints (default: to stderr).
            user: must be the token's user if given.

        Raises:
            ServerError: the server refused the run, e.g. `HTTP 403: user 'bob' may not run
                programs outside the sandbox`, `HTTP 422: run: unknown field(s) …`, `HTTP 503:
                the sandbox is not running on this server`, `HTTP 429: user <name>: process
                quota of <N> reached …`; or `user=` is not the token's.
        """
        from websockets.sync.client import connect

        req: dict[str, Any] = {"op": "run", "args": list(args), "kwargs": dict(kwargs or {}), "priority": priority}
        if program is not None:
            req["program"] = program
        else:
            if source is None:
                source, entry0 = program_of(fn)
                entry = entry or entry0
            req["source"] = source
        if entry is not None:
            req["entry"] = entry
        for k, v in (("name", name), ("limits", limits), ("sandbox", sandbox)):
            if v is not None:
                req[k] = v
        if detach:
            req["detach"] = True
        if user is not None and user != self.whoami()["user"]:
            raise ServerError(f"this client's token belongs to {self.whoami()['user']!r}, not {user!r}", 403)
        ws_url = ("ws" + self.url[4:] if self.url.startswith("http") else self.url) + "/v1/ws"
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        # entered at once: the connection lives as long as the RemoteProcess, which closes it
        ws = connect(
            ws_url, additional_headers=headers, max_size=None, open_timeout=self.timeout, close_timeout=5
        ).__enter__()
        try:
            ws.send(json.dumps(req, allow_nan=False))
            first = json.loads(ws.recv(timeout=self.timeout))
        except BaseException:
            ws.close()
            raise
        if first.get("type") == "error":
            ws.close()
            e = first.get("error", {})
            _raise_for(e.get("code", 400), {"error": e})
        return RemoteProcess(self, ws, first, on_output)

    def upload(self, source: str, entry: str | None = None, name: str | None = None) -> str:
        """Upload a program's source; returns its id (a hash of the source) for `launch(program=)`.

        Raises:
            ServerError: `HTTP 413: …` (too large), `HTTP 422: upload: 'entry' must be an
                identifier …`, `HTTP 429: …` (too many programs).
        """
        body = {"source": source, **({"entry": entry} if entry else {}), **({"name": name} if name else {})}
        return self._request("POST", "/v1/programs", json=body)["program"]

    def processes(self) -> list[dict]:
        """Summaries of this user's processes on the server."""
        return self._request("GET", "/v1/processes")["processes"]

    # --- KV files ---------------------------------------------------------------------------------
    def kv_list(self, prefix: str | None = None) -> list[dict]:
        """The named KV files this user may see: `[{"path", "owner", "tokens", "pages", "evicted"}]`.

        Raises:
            KVPermissionError: a prefix in another user's directory.
        """
        q = f"?{urlencode({'prefix': prefix})}" if prefix else ""
        return self._request("GET", f"/v1/kv{q}")["files"]

    def kv_remove(self, path: str) -> None:
        """Remove a named KV file (relative paths are in this user's directory).

        Raises:
            KVNotFound: `no KV file at <path>`.
            KVPermissionError: another user's file.
        """
        self._request("DELETE", "/v1/kv/" + path.lstrip("/"))

    # --- the server -------------------------------------------------------------------------------
    def health(self) -> dict:
        """`GET /health`: status, model, device, uptime, and what the sandbox enforces."""
        return self._request("GET", "/health")

    def metrics(self) -> str:
        """`GET /metrics`: the Prometheus text."""
        return self._http.get("/metrics").text

    def whoami(self) -> dict:
        """`GET /v1/whoami`: this token's user, whether trusted, and its quotas."""
        return self._request("GET", "/v1/whoami")

    def close(self) -> None:
        """Close the HTTP connection pool (processes keep their own WebSockets)."""
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
