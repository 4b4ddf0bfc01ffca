"""The HTTP + WebSocket API (Starlette). See docs/server.md for every route and message.

Programs arrive as source + entry point, run as the authenticated user — in a sandboxed
worker by default (see sandbox.py) — and are reached by pid: messages both ways, result,
cancel. The OpenAI-compatible routes (openai_api.py) run built-in LIPs through the same path.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import re
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from ..errors import KVError, KVNotFound, KVPermissionError, SymphonyError
from ..sched.process import Limits
from .metrics import render_metrics
from .records import ProcessRecord, Registry
from .sandbox import SandboxManager
from .sandbox_twin import SandboxJob, check_list_prefix, inprocess_lip, sandboxed_lip
from .users import QuotaExceeded, QuotaKeeper, User, Users
from .validate import BadRequest, check_fields, jtype, parse_json, read_json

log = logging.getLogger("symphony.server")

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass
class ServerConfig:
    max_body: int = 1 << 20  # bytes of one HTTP body or WebSocket message
    max_source: int = 512 << 10  # bytes of one program
    max_programs_per_user: int = 256
    sandbox: bool = True  # False: run every program in-process (development only)
    default_wall_time: float = 600.0  # seconds a program may run, unless it asks for less
    max_threads: int = 16  # LIP threads per program
    max_workers: int = 32  # sandboxed workers alive at once (more programs wait for one)
    sandbox_defaults: dict = field(default_factory=dict)  # SandboxSpec fields: cpu_seconds, memory_mb, ...


@dataclass
class Program:
    id: str
    user: str
    source: str
    entry: str | None
    name: str
    created: float


class State:
    def __init__(self, engine, users: Users, config: ServerConfig, sandbox: SandboxManager | None) -> None:
        self.engine = engine
        self.users = users
        self.config = config
        self.sandbox = sandbox
        self.quotas = QuotaKeeper(engine, users)
        self.registry = Registry()
        self.programs: dict[str, dict[str, Program]] = {}
        self.launch_lock = threading.Lock()
        self.loop: asyncio.AbstractEventLoop | None = None
        self.started = time.time()
        self.metrics_state: dict = {}


# --- helpers -----------------------------------------------------------------------------------------


def error_response(status: int, message: str, type: str, param: str | None = None) -> JSONResponse:
    return JSONResponse({"error": {"type": type, "message": message, "param": param, "code": status}}, status_code=status)


def _symphony_status(e: SymphonyError) -> int:
    if isinstance(e, KVPermissionError):
        return 403
    if isinstance(e, KVNotFound):
        return 404
    if isinstance(e, QuotaExceeded):
        return 429
    return 400


def token_of(headers, query) -> str | None:
    auth = headers.get("authorization", "")
    if auth.lower().startswith("bearer "):
        return auth[7:].strip()
    return query.get("token") or headers.get("x-api-key")


def authenticate(state: State, request: Request) -> User:
    user = state.users.authenticate(token_of(request.headers, request.query_params))
    if user is None:
        raise BadRequest(401, "missing or unknown API token: send 'Authorization: Bearer <token>'",
                         type="authentication_error")
    return user


_LIMIT_FIELDS = {"wall_time": ((int, float), False), "max_tokens": ((int,), False), "cpu_seconds": ((int,), False),
                 "memory_mb": ((int,), False), "max_threads": ((int,), False)}

RUN_FIELDS = {
    "program": ((str,), False), "source": ((str,), False), "entry": ((str,), False), "args": ((list,), False),
    "kwargs": ((dict,), False), "name": ((str,), False), "priority": ((int,), False), "limits": ((dict,), False),
    "sandbox": ((bool,), False),
}


def _positive(v, what: str):
    if v is not None and v <= 0:
        raise BadRequest(422, f"limits.{what} must be > 0, got {v}", param=f"limits.{what}")
    return v


def _def_line(source: str, entry: str) -> int | None:
    import ast

    try:
        return next((n.lineno for n in ast.walk(ast.parse(source)) if isinstance(n, ast.FunctionDef) and n.name == entry),
                    None)
    except SyntaxError:
        return None


def launch_program(state: State, user: User, body: dict, where: str) -> ProcessRecord:
    """Launch a program from a checked `run` request; returns its record."""
    check_fields(body, RUN_FIELDS, where)
    limits = check_fields(body.get("limits", {}), _LIMIT_FIELDS, f"{where}: limits")
    if "program" in body:
        if "source" in body:
            raise BadRequest(422, f"{where}: give either 'program' (an uploaded program's id) or 'source', not both")
        prog = state.programs.get(user.name, {}).get(body["program"])
        if prog is None:
            raise BadRequest(404, f"no program {body['program']!r} uploaded by user {user.name!r}", type="not_found")
        source, entry = prog.source, body.get("entry") or prog.entry
        name = body.get("name") or prog.name
    elif "source" in body:
        source, entry = body["source"], body.get("entry")
        name = body.get("name") or entry
    else:
        raise BadRequest(422, f"{where}: give 'program' (an uploaded program's id) or 'source' with 'entry'", param="source")
    if len(source.encode()) > state.config.max_source:
        raise BadRequest(413, f"program source of {len(source.encode())} bytes is over the limit of "
                              f"{state.config.max_source} bytes", type="payload_too_large")
    if not entry or not _IDENT.match(entry):
        raise BadRequest(422, f"{where}: 'entry' must name the program's LIP function (an identifier), got {entry!r}",
                         param="entry")
    name = str(name or entry)[:80]
    sandboxed = body.get("sandbox", state.config.sandbox)
    if not sandboxed and not user.trusted and state.config.sandbox:
        raise BadRequest(403, f"user {user.name!r} may not run programs outside the sandbox", type="permission_error")
    if sandboxed and state.sandbox is None:
        raise BadRequest(503, "the sandbox is not running on this server", type="unavailable")
    priority = max(-10, min(10, body.get("priority", 0)))
    wall = _positive(limits.get("wall_time"), "wall_time") or state.config.default_wall_time
    eng_limits = Limits(max_threads=min(_positive(limits.get("max_threads"), "max_threads") or state.config.max_threads,
                                        state.config.max_threads),
                        max_wall_time=min(wall, state.config.default_wall_time),
                        max_tokens=_positive(limits.get("max_tokens"), "max_tokens"), max_pages=user.max_pages)
    args, kwargs = body.get("args", []), body.get("kwargs", {})
    sink: list[ProcessRecord] = []
    pending_output: list[tuple[str, str]] = []

    def on_stdout(stream: str, text: str) -> None:
        if sink:
            sink[0].add_output(stream, text)
        else:
            pending_output.append((stream, text))

    over = {k: limits[k] for k in ("cpu_seconds", "memory_mb") if k in limits}
    for k in ("cpu_seconds", "memory_mb"):
        _positive(over.get(k), k)
        if getattr(user, k) is not None:
            over[k] = min(over.get(k, getattr(user, k)), getattr(user, k))
    if state.sandbox is not None:
        over["max_threads"] = eng_limits.max_threads + 8  # the worker's own threads besides the LIP's
        spec = state.sandbox.spec_for(over)
    else:
        from .confine import SandboxSpec

        spec = SandboxSpec()
    job = SandboxJob(source, entry, args, kwargs, name, spec, before_pred=state.quotas.before_pred, on_stdout=on_stdout)
    with state.launch_lock:
        state.quotas.check_launch(user, state.registry.live(user.name))
        if sandboxed:
            proc = state.engine.launch(sandboxed_lip, state.sandbox, job, user=user.name, name=name,
                                       priority=priority, limits=eng_limits)
        else:
            proc = state.engine.launch(inprocess_lip, job, user=user.name, name=name, priority=priority, limits=eng_limits)
        proc.entry_location = (f"<lip {name}>", _def_line(source, entry))  # for a debugger's stop on entry
        rec = ProcessRecord(proc, user.name, "program", bool(sandboxed), state.loop)
        state.registry.add(rec)
    sink.append(rec)
    for s, t in pending_output:
        rec.add_output(s, t)
    return rec


def launch_builtin(state: State, user: User, fn, kwargs: dict, name: str) -> ProcessRecord:
    """Run one of the server's own LIPs (in-process) as `user`."""
    limits = Limits(max_threads=4, max_wall_time=state.config.default_wall_time, max_pages=user.max_pages)
    with state.launch_lock:
        state.quotas.check_launch(user, state.registry.live(user.name))
        quota = state.quotas.before_pred
        kwargs = {**kwargs, "before_pred": lambda n: quota(user.name, n)}
        proc = state.engine.launch(fn, user=user.name, name=name, limits=limits, kwargs=kwargs)
        rec = ProcessRecord(proc, user.name, "builtin", False, state.loop)
        state.registry.add(rec)
    return rec


def _record(state: State, user: User, pid: str) -> ProcessRecord:
    try:
        n = int(pid)
    except ValueError:
        raise BadRequest(422, f"process id must be an integer, got {pid!r}", param="pid") from None
    rec = state.registry.get(n, user.name)
    if rec is None:
        raise BadRequest(404, f"no process {n} of user {user.name!r}", type="not_found")
    return rec


def _float_param(request: Request, name: str, default: float, hi: float) -> float:
    v = request.query_params.get(name)
    if v is None:
        return default
    try:
        f = float(v)
    except ValueError:
        raise BadRequest(422, f"query parameter {name!r} must be a number, got {v!r}", param=name) from None
    if not 0 <= f <= hi:
        raise BadRequest(422, f"query parameter {name!r} must be in [0, {hi}], got {f}", param=name)
    return f


# --- routes ------------------------------------------------------------------------------------------


def build_routes(state: State) -> list:
    cfg = state.config

    async def health(request: Request) -> Response:
        eng = state.engine
        return JSONResponse({
            "status": "ok", "model": eng.model_name, "device": str(eng.device), "uptime_s": round(time.time() - state.started, 1),
            "auth": not state.users.open, "sandbox": None if state.sandbox is None else {
                "workers": state.sandbox.live_workers(), "max_workers": state.sandbox.max_workers,
                "zygote_pid": state.sandbox.zygote_pid, **(state.sandbox.confinement or {})},
        })

    async def metrics(request: Request) -> Response:
        return PlainTextResponse(render_metrics(state), media_type="text/plain; version=0.0.4")

    async def whoami(request: Request) -> Response:
        u = authenticate(state, request)
        return JSONResponse({"user": u.name, "trusted": u.trusted, "max_processes": u.max_processes,
                             "max_pages": u.max_pages, "tokens_per_s": u.tokens_per_s})

    # programs
    async def upload(request: Request) -> Response:
        u = authenticate(state, request)
        body = check_fields(await read_json(request, cfg.max_body), {"source": ((str,), True), "entry": ((str,), False),
                                                                      "name": ((str,), False)}, "upload")
        src = body["source"]
        if len(src.encode()) > cfg.max_source:
            raise BadRequest(413, f"program source of {len(src.encode())} bytes is over the limit of {cfg.max_source} bytes",
                             type="payload_too_large")
        entry = body.get("entry")
        if entry is not None and not _IDENT.match(entry):
            raise BadRequest(422, f"upload: 'entry' must be an identifier, got {entry!r}", param="entry")
        pid = hashlib.sha256(src.encode()).hexdigest()[:16]
        mine = state.programs.setdefault(u.name, {})
        if pid not in mine and len(mine) >= cfg.max_programs_per_user:
            raise BadRequest(429, f"user {u.name!r} has {len(mine)} programs uploaded (the limit); delete some",
                             type="quota_exceeded")
        mine[pid] = Program(pid, u.name, src, entry, body.get("name") or entry or pid, time.time())
        return JSONResponse({"program": pid, "entry": entry, "name": mine[pid].name}, status_code=201)

    async def list_programs(request: Request) -> Response:
        u = authenticate(state, request)
        return JSONResponse({"programs": [{"program": p.id, "entry": p.entry, "name": p.name, "bytes": len(p.source)}
                                          for p in state.programs.get(u.name, {}).values()]})

    async def delete_program(request: Request) -> Response:
        u = authenticate(state, request)
        if state.programs.get(u.name, {}).pop(request.path_params["prog"], None) is None:
            raise BadRequest(404, f"no program {request.path_params['prog']!r} of user {u.name!r}", type="not_found")
        return Response(status_code=204)

    # processes
    async def create_process(request: Request) -> Response:
        u = authenticate(state, request)
        rec = launch_program(state, u, await read_json(request, cfg.max_body), "run")
        return JSONResponse({"pid": rec.pid, "status": rec.proc.status, "name": rec.proc.name}, status_code=201)

    async def list_processes(request: Request) -> Response:
        u = authenticate(state, request)
        return JSONResponse({"processes": [r.summary() for r in state.registry.of_user(u.name)]})

    async def get_process(request: Request) -> Response:
        u = authenticate(state, request)
        return JSONResponse(_record(state, u, request.path_params["pid"]).summary())

    async def get_messages(request: Request) -> Response:
        u = authenticate(state, request)
        rec = _record(state, u, request.path_params["pid"])
        try:
            after = int(request.query_params.get("after", "0"))
        except ValueError:
            raise BadRequest(422, "query parameter 'after' must be an integer", param="after") from None
        wait = _float_param(request, "wait", 0.0, 60.0)
        msgs, nxt = rec.messages_since(after)
        if not msgs and not rec.done and wait > 0:
            await rec.changed(wait)
            msgs, nxt = rec.messages_since(after)
        return JSONResponse({"messages": msgs, "next": nxt, "done": rec.done})

    async def post_message(request: Request) -> Response:
        u = authenticate(state, request)
        rec = _record(state, u, request.path_params["pid"])
        body = check_fields(await read_json(request, cfg.max_body), {"data": ((object,), True)}, "send")
        if rec.proc.done:
            raise BadRequest(409, f"process {rec.pid} has ended ({rec.proc.status}); it reads no more messages",
                             type="conflict")
        rec.proc.send(body["data"])
        return JSONResponse({"ok": True})

    async def get_result(request: Request) -> Response:
        u = authenticate(state, request)
        rec = _record(state, u, request.path_params["pid"])
        wait = _float_param(request, "wait", 0.0, 300.0)
        end = time.monotonic() + wait
        while not rec.done and time.monotonic() < end:
            await rec.changed(end - time.monotonic())
        return JSONResponse(rec.outcome())

    async def cancel(request: Request) -> Response:
        u = authenticate(state, request)
        rec = _record(state, u, request.path_params["pid"])
        rec.proc.cancel(f"cancelled by {u.name} over the API")
        return JSONResponse({"pid": rec.pid, "status": rec.proc.status})

    # KV files
    async def kv_list(request: Request) -> Response:
        u = authenticate(state, request)
        prefix = request.query_params.get("prefix")
        try:
            check_list_prefix(u.name, prefix)
            paths = state.engine.kvfs.listdir(u.name, prefix)
        except KVError as e:
            raise BadRequest(_symphony_status(e), str(e), type=type(e).__name__) from None
        kvfs = state.engine.kvfs
        out = []
        with kvfs.lock:
            for p in paths:
                f = kvfs.named.get(p)
                if f is not None:
                    out.append({"path": p, "owner": f.owner, "tokens": f.length, "pages": len(f.pages),
                                "evicted": f.evicted})
        return JSONResponse({"files": out})

    async def kv_remove(request: Request) -> Response:
        u = authenticate(state, request)
        raw = request.path_params["path"].lstrip("/")
        # users/<name>/… and shared/… are absolute; anything else is relative to the caller's directory
        path = "/" + raw if raw.startswith(("users/", "shared/")) else raw
        try:
            state.engine.runtime.freeing(state.engine.kvfs.remove, u.name, path)
        except SymphonyError as e:
            raise BadRequest(_symphony_status(e), str(e), type=type(e).__name__) from None
        return Response(status_code=204)

    from .openai_api import openai_routes

    return [
        Route("/health", health), Route("/metrics", metrics), Route("/v1/whoami", whoami),
        Route("/v1/programs", upload, methods=["POST"]), Route("/v1/programs", list_programs, methods=["GET"]),
        Route("/v1/programs/{prog}", delete_program, methods=["DELETE"]),
        Route("/v1/processes", create_process, methods=["POST"]), Route("/v1/processes", list_processes, methods=["GET"]),
        Route("/v1/processes/{pid}", get_process, methods=["GET"]),
        Route("/v1/processes/{pid}", cancel, methods=["DELETE"]),
        Route("/v1/processes/{pid}/messages", get_messages, methods=["GET"]),
        Route("/v1/processes/{pid}/messages", post_message, methods=["POST"]),
        Route("/v1/processes/{pid}/result", get_result, methods=["GET"]),
        Route("/v1/processes/{pid}/cancel", cancel, methods=["POST"]),
        Route("/v1/kv", kv_list, methods=["GET"]), Route("/v1/kv/{path:path}", kv_remove, methods=["DELETE"]),
        WebSocketRoute("/v1/ws", lambda ws: ws_session(state, ws)),
        *openai_routes(state),
    ]


# --- WebSocket ---------------------------------------------------------------------------------------

WS_FIRST = {"op": ((str,), True), **RUN_FIELDS, "pid": ((int,), False), "detach": ((bool,), False)}


async def _ws_error(ws: WebSocket, status: int, message: str, type: str = "invalid_request_error", close: int = 4400) -> None:
    try:
        await ws.send_json({"type": "error", "error": {"type": type, "message": message, "code": status}})
        await ws.close(code=close, reason=message[:120])
    except Exception:
        pass


async def _ws_receive(ws: WebSocket, limit: int) -> Any:
    msg = await ws.receive()
    if msg["type"] == "websocket.disconnect":
        raise WebSocketDisconnect(msg.get("code", 1000))
    data = msg.get("text") if msg.get("text") is not None else msg.get("bytes")
    if data is None:
        raise BadRequest(400, "empty WebSocket message")
    if len(data) > limit:
        raise BadRequest(413, f"WebSocket message of {len(data)} bytes is over the limit of {limit} bytes",
                         type="payload_too_large")
    return parse_json(data)


async def ws_session(state: State, ws: WebSocket) -> None:
    """One process per connection: `run` (or `attach`), then messages both ways, then `result`."""
    await ws.accept()
    user = state.users.authenticate(token_of(ws.headers, ws.query_params))
    if user is None:
        await _ws_error(ws, 401, "missing or unknown API token: send 'Authorization: Bearer <token>' or ?token=",
                        "authentication_error", 4401)
        return
    limit = state.config.max_body
    try:
        first = await asyncio.wait_for(_ws_receive(ws, limit), 60)
        check_fields(first, WS_FIRST, "WebSocket first message")
        op = first.pop("op")
        detach = first.pop("detach", False)
        if op == "run":
            if "pid" in first:
                raise BadRequest(422, "WebSocket 'run': unknown field 'pid' (use op 'attach' to follow a process)")
            rec = launch_program(state, user, first, "WebSocket 'run'")
        elif op == "attach":
            if set(first) - {"pid"} or "pid" not in first:
                raise BadRequest(422, "WebSocket 'attach' takes exactly one field, 'pid'")
            rec = _record(state, user, str(first["pid"]))
            detach = True  # following someone else's launch never cancels it
        else:
            raise BadRequest(422, f"WebSocket first message: op must be 'run' or 'attach', got {op!r}", param="op")
    except BadRequest as e:
        await _ws_error(ws, e.status, e.message, e.type)
        return
    except SymphonyError as e:
        await _ws_error(ws, _symphony_status(e), str(e), type(e).__name__)
        return
    except (WebSocketDisconnect, asyncio.TimeoutError):
        return
    await ws.send_json({"type": "started", "pid": rec.pid, "name": rec.proc.name, "sandboxed": rec.sandboxed})

    async def pump_in() -> None:
        while True:
            try:
                m = await _ws_receive(ws, limit)
                check_fields(m, {"op": ((str,), True), "data": ((object,), False)}, "WebSocket message")
                if m["op"] == "send":
                    if "data" not in m:
                        raise BadRequest(422, "WebSocket 'send' needs a 'data' field", param="data")
                    rec.proc.send(m["data"])
                elif m["op"] == "cancel":
                    rec.proc.cancel(f"cancelled by {user.name} over the API")
                else:
                    raise BadRequest(422, f"WebSocket message: op must be 'send' or 'cancel', got {m['op']!r}", param="op")
            except BadRequest as e:
                await ws.send_json({"type": "error", "error": {"type": e.type, "message": e.message, "code": e.status}})

    async def pump_out() -> None:
        mi = oi = 0
        while True:
            done = rec.done
            msgs, mi = rec.messages_since(mi)
            outs, oi = rec.output_since(oi)
            for o in outs:
                await ws.send_json({"type": "output", **o})
            for m in msgs:
                await ws.send_json({"type": "message", "data": m})
            if done:
                await ws.send_json({"type": "result", **rec.outcome()})
                return
            await rec.changed(5.0)

    tin = asyncio.ensure_future(pump_in())
    tout = asyncio.ensure_future(pump_out())
    try:
        finished, _ = await asyncio.wait({tin, tout}, return_when=asyncio.FIRST_COMPLETED)
        if tout in finished:
            tout.result()
            await ws.close(code=1000)
        elif not detach and not rec.proc.done:  # the client went away: stop what it started
            rec.proc.cancel("the WebSocket client disconnected")
    except Exception:
        if not detach and not rec.proc.done:
            rec.proc.cancel("the WebSocket connection failed")
    finally:
        for t in (tin, tout):
            t.cancel()


# --- the app -----------------------------------------------------------------------------------------


def create_app(engine, users: Users | None = None, config: ServerConfig | None = None,
               sandbox: SandboxManager | None = None, plugins: list[str] = ()) -> Starlette:
    """The ASGI app. `sandbox` must already be started (see `serve`) unless config.sandbox is False.
    `plugins` names server plugins (plugins.py) whose routes are mounted beside the built-in ones."""
    state = State(engine, users or Users({}), config or ServerConfig(), sandbox)

    async def on_bad_request(request, exc: BadRequest) -> Response:
        return JSONResponse(exc.body(), status_code=exc.status)

    async def on_http(request, exc: HTTPException) -> Response:
        msg = {404: f"no route {request.method} {request.url.path}", 405: f"method {request.method} not allowed on "
               f"{request.url.path}"}.get(exc.status_code, str(exc.detail))
        return error_response(exc.status_code, msg, "not_found" if exc.status_code == 404 else "invalid_request_error")

    async def on_symphony(request, exc: SymphonyError) -> Response:
        return error_response(_symphony_status(exc), str(exc), type(exc).__name__)

    async def on_error(request, exc: Exception) -> Response:
        log.exception("unhandled error on %s", request.url.path)
        return error_response(500, f"internal error: {type(exc).__name__}: {exc}", "internal_error")

    @contextlib.asynccontextmanager
    async def lifespan(app):
        state.loop = asyncio.get_running_loop()
        yield

    app = Starlette(routes=build_routes(state), lifespan=lifespan,
                    exception_handlers={BadRequest: on_bad_request, HTTPException: on_http, SymphonyError: on_symphony,
                                        Exception: on_error})
    app.state.symphony = state
    from .plugins import mount

    app.state.plugin_paths = [(spec, path) for spec in plugins for path in mount(app, state, [spec])]
    return app


__all__ = ["ServerConfig", "State", "create_app", "jtype"]
