"""Forwarding one request, or one WebSocket session, to a replica's server unchanged."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import httpx
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.websockets import WebSocket, WebSocketDisconnect

# hop-by-hop headers, and those the forwarding itself sets
_DROP = {
    "host",
    "content-length",
    "transfer-encoding",
    "connection",
    "keep-alive",
    "upgrade",
    "te",
    "trailer",
    "proxy-authorization",
    "proxy-authenticate",
    "x-symphony-replica",
}


class ReplicaUnreachable(Exception):
    """The replica's server did not answer (refused, or the connection broke before a response)."""


def request_headers(request_or_ws) -> dict[str, str]:
    """The client's headers less hop-by-hop ones (and a WebSocket handshake's, which the relay makes anew)."""
    return {
        k: v
        for k, v in request_or_ws.headers.items()
        if k.lower() not in _DROP and not k.lower().startswith("sec-websocket")
    }


def _response_headers(resp: httpx.Response) -> dict[str, str]:
    return {k: v for k, v in resp.headers.items() if k.lower() not in _DROP and k.lower() != "content-encoding"}


async def forward(
    client: httpx.AsyncClient, base: str, request: Request, body: bytes | None = None, stream: bool = False
) -> Response:
    """Send `request` (its method, path, query, headers and body) to the server at `base`."""
    if body is None:
        body = await request.body()
    req = client.build_request(
        request.method,
        base + request.url.path,
        params=request.query_params,
        headers=request_headers(request),
        content=body,
        timeout=httpx.Timeout(None, connect=5.0),
    )
    try:
        resp = await client.send(req, stream=True)
    except (httpx.ConnectError, httpx.RemoteProtocolError, httpx.ReadError) as e:
        raise ReplicaUnreachable(f"{type(e).__name__}: {e}") from None
    if stream:
        return StreamingResponse(
            resp.aiter_raw(),
            status_code=resp.status_code,
            headers=_response_headers(resp),
            background=BackgroundTask(resp.aclose),
        )
    try:
        content = await resp.aread()
    except (httpx.RemoteProtocolError, httpx.ReadError) as e:
        raise ReplicaUnreachable(f"{type(e).__name__}: {e}") from None
    finally:
        await resp.aclose()
    return Response(content, status_code=resp.status_code, headers=_response_headers(resp))


@dataclass
class SessionEnd:
    pid: int | None  # from the replica's `started` message, if it came
    got_result: bool
    upstream_broke: bool  # the replica's side ended without a close frame (it died)
    client_left: bool
    close_code: int | None = None  # the replica's close code and reason (mirrored to the client)
    close_reason: str = ""


async def relay_ws(
    ws: WebSocket,
    upstream_url: str,
    headers: dict[str, str],
    first: str | None,
    on_started: Callable[[int], Awaitable[None]] | None = None,
) -> SessionEnd:
    """Open the replica's WebSocket, send the client's first message, relay both ways until one side
    ends. The client's WebSocket is accepted but not closed here."""
    from websockets.asyncio.client import connect
    from websockets.exceptions import ConnectionClosed, ConnectionClosedOK

    end = SessionEnd(None, False, False, False)
    try:
        up = await connect(upstream_url, additional_headers=headers, max_size=None, ping_interval=None, open_timeout=10)
    except (TimeoutError, OSError) as e:
        raise ReplicaUnreachable(f"{type(e).__name__}: {e}") from None
    try:
        if first is not None:
            await up.send(first)

        async def client_to_replica() -> None:
            while True:
                msg = await ws.receive()
                if msg["type"] == "websocket.disconnect":
                    end.client_left = True
                    return
                await up.send(msg["text"] if msg.get("text") is not None else msg.get("bytes") or b"")

        async def replica_to_client() -> None:
            try:
                async for m in up:
                    if isinstance(m, str) and not end.got_result:
                        try:
                            obj = json.loads(m)
                        except ValueError:
                            obj = None
                        if isinstance(obj, dict) and obj.get("type") == "started" and isinstance(obj.get("pid"), int):
                            end.pid = obj["pid"]
                            if on_started is not None:
                                await on_started(end.pid)
                        elif isinstance(obj, dict) and obj.get("type") == "result":
                            end.got_result = True
                    await (ws.send_text(m) if isinstance(m, str) else ws.send_bytes(m))
            except ConnectionClosedOK:
                pass
            except ConnectionClosed:
                end.upstream_broke = True
            if up.close_code is None or up.close_code == 1006:
                end.upstream_broke = True

        t_in = asyncio.ensure_future(client_to_replica())
        t_out = asyncio.ensure_future(replica_to_client())
        done, pending = await asyncio.wait({t_in, t_out}, return_when=asyncio.FIRST_COMPLETED)
        for t in pending:
            t.cancel()
        for t in done:
            exc = t.exception()
            if isinstance(exc, (ConnectionClosed, OSError)):
                end.upstream_broke = not end.got_result
            elif isinstance(exc, WebSocketDisconnect):
                end.client_left = True
            elif exc is not None:
                raise exc
        end.close_code, end.close_reason = up.close_code, up.close_reason or ""
    finally:
        await up.close()
    return end
