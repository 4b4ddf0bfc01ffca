"""JSON for responses and WebSocket frames that a lone surrogate in a program's result, message or
output cannot break: such text is written with JSON's `\\udXXX` escapes (valid JSON, read back to
the same Python string) instead of failing in the UTF-8 encoder with a 500."""

from __future__ import annotations

import json
from typing import Any

from starlette.responses import JSONResponse as _StarletteJSON
from starlette.websockets import WebSocket


def dumps(content: Any) -> str:
    try:
        text = json.dumps(content, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
        text.encode()
        return text
    except UnicodeEncodeError:
        return json.dumps(content, ensure_ascii=True, allow_nan=False, separators=(",", ":"))


class JSONResponse(_StarletteJSON):
    def render(self, content: Any) -> bytes:
        return dumps(content).encode()


async def send_json(ws: WebSocket, data: Any) -> None:
    await ws.send_text(dumps(data))


__all__ = ["JSONResponse", "dumps", "send_json"]
