"""The WebSocket API (`/v1/ws`): one process per connection — `run` (or `attach`) first, then
messages both ways and the program's output, then its `result`. See docs/server.md."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from starlette.websockets import WebSocket, WebSocketDisconnect

from ..errors import SymphonyError
from .auth import owned_record, token_of
from .json_text import send_json
from .launch import RUN_FIELDS, launch_program
from .state import State
from .validate import BadRequest, check_fields, parse_json, symphony_status

log = logging.getLogger("symphony.server")

WS_FIRST = {"op": ((str,), True), **RUN_FIELDS, "pid": ((int,), False), "detach": ((bool,), False)}


async def _ws_error(
    ws: WebSocket, status: int, message: str, type: str = "invalid_request_error", close: int = 4400
) -> None:
    try:
        await send_json(ws, {"type": "error", "error": {"type": type, "message": message, "code": status}})
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
        raise BadRequest(
            413, f"WebSocket message of {len(data)} bytes is over the limit of {limit} bytes", type="payload_too_large"
        )
    return parse_json(data)


async def ws_session(state: State, ws: WebSocket) -> None:
    """One process per connection: `run` (or `attach`), then messages both ways, then `result`."""
    await ws.accept()
    user = state.users.authenticate(token_of(ws.headers, ws.query_params))
    if user is None:
        await _ws_error(
            ws,
            401,
            "missing or unknown API token: send 'Authorization: Bearer <token>' or ?token=",
            "authentication_error",
            4401,
        )
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
            rec = owned_record(state, user, str(first["pid"]))
            detach = True  # following someone else's launch never cancels it
        else:
            raise BadRequest(422, f"WebSocket first message: op must be 'run' or 'attach', got {op!r}", param="op")
    except BadRequest as e:
        await _ws_error(ws, e.status, e.message, e.type)
        return
    except SymphonyError as e:
        await _ws_error(ws, symphony_status(e), str(e), type(e).__name__)
        return
    except (TimeoutError, WebSocketDisconnect):
        return
    except Exception as e:  # the server's own fault: say so in a message rather than drop the connection
        log.exception("unhandled error starting a program over the WebSocket")
        await _ws_error(ws, 500, f"internal error: {type(e).__name__}: {e}", "internal_error", 1011)
        return
    await send_json(ws, {"type": "started", "pid": rec.pid, "name": rec.proc.name, "sandboxed": rec.sandboxed})

    async def pump_in() -> None:
        while True:
            try:
                m = await _ws_receive(ws, limit)
                check_fields(m, {"op": ((str,), True), "data": ((object,), False)}, "WebSocket message")
                if m["op"] == "send":
                    if "data" not in m:
                        raise BadRequest(422, "WebSocket 'send' needs a 'data' field", param="data")
                    state.registry.post(rec, m["data"])
                elif m["op"] == "cancel":
                    rec.proc.cancel(f"cancelled by {user.name} over the API")
                else:
                    raise BadRequest(
                        422, f"WebSocket message: op must be 'send' or 'cancel', got {m['op']!r}", param="op"
                    )
            except BadRequest as e:
                await send_json(
                    ws, {"type": "error", "error": {"type": e.type, "message": e.message, "code": e.status}}
                )
            except SymphonyError as e:
                await send_json(
                    ws,
                    {
                        "type": "error",
                        "error": {"type": type(e).__name__, "message": str(e), "code": symphony_status(e)},
                    },
                )

    async def pump_out() -> None:
        mi = oi = 0
        while True:
            done = rec.done
            msgs, mi = rec.messages_since(mi)
            outs, oi = rec.output_since(oi)
            for o in outs:
                await send_json(ws, {"type": "output", **o})
            for m in msgs:
                await send_json(ws, {"type": "message", "data": m})
            if done:
                await send_json(ws, {"type": "result", **rec.outcome()})
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


__all__ = ["ws_session"]
