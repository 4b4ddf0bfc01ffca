"""The jupyter-server side: authenticated REST and WebSocket routes that reach a kernel's lab.

Routes (all under the server's base URL, all behind Jupyter's own authentication — the token
or login cookie, plus XSRF for POST — and its authorizer):

    GET  /symphony-lab/api/status                       version, and the kernels with a live lab
    POST /symphony-lab/api/kernels/<kernel_id>/command  one request (docs/protocol.md) -> its response
    GET  /symphony-lab/api/kernels/<kernel_id>/trace    the run as a Chrome/Perfetto trace (download)
    WS   /symphony-lab/api/kernels/<kernel_id>/ws       requests in, responses and live events out

Every message from the browser is checked (`messages.parse_message`) before it is forwarded;
a malformed one is answered with an error naming what was wrong and goes no further.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

from jupyter_core.utils import ensure_async
from jupyter_server.auth.decorator import authorized, ws_authenticated
from jupyter_server.base.handlers import APIHandler, JupyterHandler
from tornado import web, websocket

from . import registry
from .messages import MalformedMessage, error_response, parse_message

log = logging.getLogger(__name__)

AUTH_RESOURCE = "symphony-lab"
VERSION = "0.1.0"
_ID = r"(?P<kernel_id>[A-Za-z0-9_\-]+)"


class LabConnection:
    """One connection to a kernel's bridge (asyncio streams, JSON lines)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def open(cls, info: dict, timeout: float = 5.0) -> LabConnection:
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection("127.0.0.1", int(info["port"]), limit=64 << 20), timeout
        )
        writer.write((json.dumps({"secret": info["secret"]}) + "\n").encode())
        await writer.drain()
        hello = json.loads(await asyncio.wait_for(reader.readline(), timeout) or b"null")
        if not isinstance(hello, dict) or hello.get("type") != "hello":
            writer.close()
            raise ConnectionError(f"the kernel's lab refused the connection: {hello!r}")
        return cls(reader, writer)

    async def send(self, req: dict) -> None:
        self.writer.write((json.dumps(req) + "\n").encode())
        await self.writer.drain()

    async def recv(self) -> dict | None:
        line = await self.reader.readline()
        if not line:
            return None
        return json.loads(line)

    async def request(self, req: dict, timeout: float) -> dict:
        await self.send(req)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            left = deadline - loop.time()
            if left <= 0:
                raise TimeoutError(f"no answer to {req['command']!r} within {timeout:.0f}s")
            msg = await asyncio.wait_for(self.recv(), left)
            if msg is None:
                raise ConnectionError("the kernel's lab closed the connection")
            if msg.get("type") == "response" and msg.get("request_seq") == req.get("seq"):
                return msg

    def close(self) -> None:
        try:
            self.writer.close()
        except (OSError, RuntimeError) as e:  # the socket or its event loop is gone: closed either way
            log.debug("closing the connection to the kernel's lab: %s", e)


class _LabMixin:
    @property
    def runtime_dir(self) -> str:
        return self.settings["symphony_lab_runtime_dir"]  # type: ignore[attr-defined]

    def lab_info(self, kernel_id: str) -> dict:
        info = registry.read_entry(kernel_id, self.runtime_dir)
        if info is None:
            raise web.HTTPError(
                404,
                f"kernel {kernel_id} has no running Symphony Lab "
                "(use `lab` in its notebook first: `lab.start()` or `lab.run(...)`)",
            )
        return info


class StatusHandler(_LabMixin, APIHandler):
    auth_resource = AUTH_RESOURCE

    @web.authenticated
    @authorized
    async def get(self) -> None:
        km = self.kernel_manager
        live = set(km.list_kernel_ids()) if km is not None else set()
        paths: dict[str, str] = {}
        try:
            for s in await ensure_async(self.session_manager.list_sessions()):
                paths[s["kernel"]["id"]] = s.get("path") or s.get("name") or ""
        except Exception as e:  # the notebook paths are a nicety: the kernels are listed without them
            log.warning("could not list the server's sessions (notebook paths not shown): %s: %s", type(e).__name__, e)
        kernels = [
            {
                "kernel_id": e["kernel_id"],
                "path": paths.get(e["kernel_id"]),
                "model": e.get("model"),
                "started": e.get("started"),
            }
            for e in registry.list_entries(self.runtime_dir)
            if e["kernel_id"] in live
        ]
        self.finish(json.dumps({"version": VERSION, "kernels": kernels}))


class CommandHandler(_LabMixin, APIHandler):
    auth_resource = AUTH_RESOURCE

    @web.authenticated
    @authorized
    async def post(self, kernel_id: str) -> None:
        try:
            req = parse_message(self.request.body)
        except MalformedMessage as e:
            self.set_status(400)
            try:
                parsed: Any = json.loads(self.request.body)
            except ValueError:
                parsed = None
            self.finish(json.dumps(error_response(parsed, e)))
            return
        info = self.lab_info(kernel_id)
        conn = await _connect(info)
        try:
            resp = await conn.request(req, timeout=float(self.get_query_argument("timeout", "60")))
        except TimeoutError as e:
            raise web.HTTPError(504, str(e)) from None
        finally:
            conn.close()
        self.finish(json.dumps(resp))


class TraceHandler(_LabMixin, APIHandler):
    auth_resource = AUTH_RESOURCE

    @web.authenticated
    @authorized
    async def get(self, kernel_id: str) -> None:
        info = self.lab_info(kernel_id)
        conn = await _connect(info)
        try:
            resp = await conn.request({"type": "request", "seq": 1, "command": "trace", "arguments": {}}, timeout=60)
        finally:
            conn.close()
        if not resp.get("success"):
            raise web.HTTPError(500, resp.get("message") or "trace export failed")
        self.set_header("Content-Type", "application/json")
        self.set_header("Content-Disposition", f'attachment; filename="symphony-trace-{kernel_id[:8]}.json"')
        self.finish(json.dumps(resp["body"]))


class LabSocketHandler(_LabMixin, JupyterHandler, websocket.WebSocketHandler):
    """Browser <-> kernel bridge: requests are checked here, then forwarded; events stream back."""

    auth_resource = AUTH_RESOURCE

    async def pre_get(self) -> None:
        user = self.current_user
        if user is None:
            raise web.HTTPError(403)
        ok = await ensure_async(self.authorizer.is_authorized(self, user, "execute", AUTH_RESOURCE))
        if not ok:
            raise web.HTTPError(403)

    @ws_authenticated
    async def get(self, *args: Any, **kwargs: Any) -> None:
        await self.pre_get()
        self._info = self.lab_info(kwargs.get("kernel_id") or args[0])
        self._conn: LabConnection | None = None
        res = super().get(*args, **kwargs)
        if res is not None:
            await res

    async def open(self, kernel_id: str) -> None:  # type: ignore[override]
        try:
            self._conn = await _connect(self._info)
        except web.HTTPError as e:
            self.write_message(json.dumps({"type": "error", "message": e.log_message}))
            self.close(1011, "kernel lab unreachable")
            return
        self._pump = asyncio.ensure_future(self._forward())

    async def _forward(self) -> None:
        conn = self._conn
        assert conn is not None
        try:
            while True:
                msg = await conn.recv()
                if msg is None:
                    break
                if msg.get("type") == "hello":
                    continue
                self.write_message(json.dumps(msg))
        except (websocket.WebSocketClosedError, ConnectionError, ValueError):
            pass
        finally:
            if self.ws_connection is not None:
                self.close(1001, "kernel lab closed")

    async def on_message(self, message: str | bytes) -> None:
        try:
            req = parse_message(message)
        except MalformedMessage as e:
            try:
                parsed: Any = json.loads(message)
            except (ValueError, TypeError):
                parsed = None
            self.write_message(json.dumps(error_response(parsed, e)))
            return
        if self._conn is None:
            self.write_message(json.dumps(error_response(req, "not connected to the kernel's lab")))
            return
        await self._conn.send(req)

    def on_close(self) -> None:
        if getattr(self, "_conn", None) is not None:
            self._conn.close()
        pump = getattr(self, "_pump", None)
        if pump is not None:
            pump.cancel()

    def check_origin(self, origin: str) -> bool:  # Jupyter's own origin policy
        return JupyterHandler.check_origin(self, origin)  # type: ignore[arg-type]


async def _connect(info: dict) -> LabConnection:
    try:
        return await LabConnection.open(info)
    except (TimeoutError, OSError, ConnectionError, ValueError) as e:
        raise web.HTTPError(502, f"cannot reach the kernel's Symphony Lab: {e}") from None


def setup_handlers(web_app: Any, runtime_dir: str) -> None:
    from jupyter_server.utils import url_path_join

    base = url_path_join(web_app.settings["base_url"], "symphony-lab", "api")
    web_app.settings["symphony_lab_runtime_dir"] = runtime_dir
    web_app.add_handlers(
        ".*$",
        [
            (url_path_join(base, "status"), StatusHandler),
            (url_path_join(base, "kernels", _ID, "command"), CommandHandler),
            (url_path_join(base, "kernels", _ID, "trace"), TraceHandler),
            (url_path_join(base, "kernels", _ID, "ws"), LabSocketHandler),
        ],
    )
