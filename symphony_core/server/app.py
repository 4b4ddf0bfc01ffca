"""The HTTP API (Starlette): the routes of docs/server.md, and `create_app`, which puts them,
the WebSocket route (websocket.py), the OpenAI-compatible routes (the openai package) and any
plugins' routes together around an `Engine`.

Programs arrive as source + entry point, run as the authenticated user (auth.py) — in a
sandboxed worker by default (symphony_core/sandbox/) — through launch.py, and are reached by
pid: messages both ways, result, cancel.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import time
from collections.abc import Sequence

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route, WebSocketRoute

from ..errors import KVError, SymphonyError
from ..sandbox.pool import SandboxManager
from ..sandbox.twin import check_list_prefix
from .auth import authenticate, owned_record
from .json_text import JSONResponse
from .launch import IDENT, check_program, launch_builtin, launch_program
from .metrics import render_metrics
from .openai import openai_routes
from .plugins import mount
from .state import Program, ServerConfig, State
from .users import Users
from .validate import BadRequest, check_fields, check_text, error_response, read_json, symphony_status
from .websocket import ws_session

log = logging.getLogger("symphony.server")


# --- routes ------------------------------------------------------------------------------------------


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


def build_routes(state: State) -> list:
    cfg = state.config

    async def health(request: Request) -> Response:
        eng = state.engine
        sbx = state.sandbox
        degraded = sbx is not None and not sbx.healthy()
        return JSONResponse(
            {
                "status": "draining" if state.draining else "degraded" if degraded else "ok",
                "model": eng.model_name,
                "device": str(eng.device),
                "uptime_s": round(time.time() - state.started, 1),
                "auth": not state.users.open,
                "sandbox": None
                if state.sandbox is None
                else {
                    "workers": state.sandbox.live_workers(),
                    "max_workers": state.sandbox.max_workers,
                    "zygote_pid": state.sandbox.zygote_pid,
                    "zygote_restarts": state.sandbox.restarts,
                    "io_stalled_s": round(state.sandbox.io_stalled_s(), 1),
                    **(state.sandbox.confinement or {}),
                },
            }
        )

    async def metrics(request: Request) -> Response:
        state.registry.prune()
        return PlainTextResponse(render_metrics(state), media_type="text/plain; version=0.0.4")

    async def whoami(request: Request) -> Response:
        u = authenticate(state, request)
        return JSONResponse(
            {
                "user": u.name,
                "trusted": u.trusted,
                "max_processes": u.max_processes,
                "max_pages": u.max_pages,
                "tokens_per_s": u.tokens_per_s,
            }
        )

    # programs
    async def upload(request: Request) -> Response:
        u = authenticate(state, request)
        body = check_fields(
            await read_json(request, cfg.max_body),
            {"source": ((str,), True), "entry": ((str,), False), "name": ((str,), False)},
            "upload",
        )
        src = body["source"]
        for field in ("source", "entry", "name"):
            check_text(body.get(field), field, "upload")
        if len(src.encode()) > cfg.max_source:
            raise BadRequest(
                413,
                f"program source of {len(src.encode())} bytes is over the limit of {cfg.max_source} bytes",
                type="payload_too_large",
            )
        entry = body.get("entry")
        if entry is not None and not IDENT.match(entry):
            raise BadRequest(422, f"upload: 'entry' must be an identifier, got {entry!r}", param="entry")
        check_program(src, entry, "upload")
        pid = hashlib.sha256(src.encode()).hexdigest()[:16]
        mine = state.programs.setdefault(u.name, {})
        if pid not in mine and len(mine) >= cfg.max_programs_per_user:
            raise BadRequest(
                429,
                f"user {u.name!r} has {len(mine)} programs uploaded (the limit); delete some",
                type="quota_exceeded",
            )
        mine[pid] = Program(pid, u.name, src, entry, body.get("name") or entry or pid, time.time())
        return JSONResponse({"program": pid, "entry": entry, "name": mine[pid].name}, status_code=201)

    async def list_programs(request: Request) -> Response:
        u = authenticate(state, request)
        return JSONResponse(
            {
                "programs": [
                    {"program": p.id, "entry": p.entry, "name": p.name, "bytes": len(p.source)}
                    for p in state.programs.get(u.name, {}).values()
                ]
            }
        )

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
        return JSONResponse(owned_record(state, u, request.path_params["pid"]).summary())

    async def get_messages(request: Request) -> Response:
        u = authenticate(state, request)
        rec = owned_record(state, u, request.path_params["pid"])
        try:
            after = int(request.query_params.get("after", "0"))
        except ValueError:
            raise BadRequest(422, "query parameter 'after' must be an integer", param="after") from None
        wait = _float_param(request, "wait", 0.0, 60.0)
        msgs, nxt = rec.messages_since(after)
        if not msgs and not rec.done and wait > 0:
            await rec.changed(wait)
            msgs, nxt = rec.messages_since(after)
        return JSONResponse({"messages": msgs, "next": nxt, "done": rec.done, "dropped": rec.dropped_before(after)})

    async def post_message(request: Request) -> Response:
        u = authenticate(state, request)
        rec = owned_record(state, u, request.path_params["pid"])
        body = check_fields(await read_json(request, cfg.max_body), {"data": ((object,), True)}, "send")
        if rec.proc.done:
            raise BadRequest(
                409, f"process {rec.pid} has ended ({rec.proc.status}); it reads no more messages", type="conflict"
            )
        state.registry.post(rec, body["data"])
        return JSONResponse({"ok": True})

    async def get_result(request: Request) -> Response:
        u = authenticate(state, request)
        rec = owned_record(state, u, request.path_params["pid"])
        wait = _float_param(request, "wait", 0.0, 300.0)
        end = time.monotonic() + wait
        while not rec.done and time.monotonic() < end and not state.drained:
            await rec.changed(end - time.monotonic())
        # A waiter woken by the drain's cancel may find the process already ended as cancelled;
        # it is answered the same as one that wakes first.
        if state.drained and (not rec.done or (rec.cut_by_drain and rec.proc.status == "cancelled")):
            raise BadRequest(
                503,
                f"the server is shutting down: process {rec.pid} did not finish within the "
                f"{cfg.drain_s:g} s drain and is cancelled",
                type="unavailable",
            )
        return JSONResponse(rec.outcome())

    async def cancel(request: Request) -> Response:
        u = authenticate(state, request)
        rec = owned_record(state, u, request.path_params["pid"])
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
            raise BadRequest(symphony_status(e), str(e), type=type(e).__name__) from None
        kvfs = state.engine.kvfs
        out = []
        with kvfs.lock:
            for p in paths:
                f = kvfs.named.get(p)
                if f is not None:
                    out.append(
                        {"path": p, "owner": f.owner, "tokens": f.length, "pages": len(f.pages), "evicted": f.evicted}
                    )
        return JSONResponse({"files": out})

    async def kv_remove(request: Request) -> Response:
        u = authenticate(state, request)
        raw = request.path_params["path"].lstrip("/")
        # users/<name>/… and shared/… are absolute; anything else is relative to the caller's directory
        path = "/" + raw if raw.startswith(("users/", "shared/")) else raw
        try:
            state.engine.runtime.kv_remove(u.name, path)
        except SymphonyError as e:
            raise BadRequest(symphony_status(e), str(e), type=type(e).__name__) from None
        return Response(status_code=204)

    return [
        Route("/health", health),
        Route("/metrics", metrics),
        Route("/v1/whoami", whoami),
        Route("/v1/programs", upload, methods=["POST"]),
        Route("/v1/programs", list_programs, methods=["GET"]),
        Route("/v1/programs/{prog}", delete_program, methods=["DELETE"]),
        Route("/v1/processes", create_process, methods=["POST"]),
        Route("/v1/processes", list_processes, methods=["GET"]),
        Route("/v1/processes/{pid}", get_process, methods=["GET"]),
        Route("/v1/processes/{pid}", cancel, methods=["DELETE"]),
        Route("/v1/processes/{pid}/messages", get_messages, methods=["GET"]),
        Route("/v1/processes/{pid}/messages", post_message, methods=["POST"]),
        Route("/v1/processes/{pid}/result", get_result, methods=["GET"]),
        Route("/v1/processes/{pid}/cancel", cancel, methods=["POST"]),
        Route("/v1/kv", kv_list, methods=["GET"]),
        Route("/v1/kv/{path:path}", kv_remove, methods=["DELETE"]),
        WebSocketRoute("/v1/ws", lambda ws: ws_session(state, ws)),
        *openai_routes(state, authenticate, launch_builtin),
    ]


# --- the app -----------------------------------------------------------------------------------------


def create_app(
    engine,
    users: Users | None = None,
    config: ServerConfig | None = None,
    sandbox: SandboxManager | None = None,
    plugins: Sequence[str] = (),
) -> Starlette:
    """The ASGI app. `sandbox` must already be started (see `serve`) unless config.sandbox is False.
    `plugins` names server plugins (plugins.py) whose routes are mounted beside the built-in ones."""
    if getattr(engine, "lip_runner", "threads") != "threads":
        # A sandboxed program's twin, and an in-process one's relay, block on their worker or queue:
        # on the greenlet runner's one hub thread that would hold every program.
        raise SymphonyError(
            f"the server runs programs on OS threads: build its Engine with lip_runner='threads', not {engine.lip_runner!r}"
        )
    state = State(engine, users or Users({}), config or ServerConfig(), sandbox)

    async def on_bad_request(request, exc: Exception) -> Response:
        assert isinstance(exc, BadRequest)  # registered for BadRequest only
        return JSONResponse(exc.body(), status_code=exc.status)

    async def on_http(request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)  # registered for HTTPException only
        msg = {
            404: f"no route {request.method} {request.url.path}",
            405: f"method {request.method} not allowed on {request.url.path}",
        }.get(exc.status_code, str(exc.detail))
        return error_response(exc.status_code, msg, "not_found" if exc.status_code == 404 else "invalid_request_error")

    async def on_symphony(request, exc: Exception) -> Response:
        assert isinstance(exc, SymphonyError)  # registered for SymphonyError only
        return error_response(symphony_status(exc), str(exc), type(exc).__name__)

    async def on_error(request, exc: Exception) -> Response:
        log.exception("unhandled error on %s", request.url.path)
        return error_response(500, f"internal error: {type(exc).__name__}: {exc}", "internal_error")

    @contextlib.asynccontextmanager
    async def lifespan(app):
        state.loop = asyncio.get_running_loop()
        try:
            yield
        finally:
            state.metrics.gc.close()

    cors = Middleware(
        CORSMiddleware,  # browser clients of the OpenAI API (--allowed-origins; tokens travel as headers)
        allow_origins=list(state.config.allowed_origins),
        allow_methods=["*"],
        allow_headers=["*"],
    )
    app = Starlette(
        routes=build_routes(state),
        middleware=[cors] if state.config.allowed_origins else [],
        lifespan=lifespan,
        exception_handlers={
            BadRequest: on_bad_request,
            HTTPException: on_http,
            SymphonyError: on_symphony,
            Exception: on_error,
        },
    )
    app.state.symphony = state
    app.state.plugin_paths = [(spec, path) for spec in plugins for path in mount(app, state, [spec])]
    return app


__all__ = ["build_routes", "create_app"]
