"""The Debug Adapter Protocol's wire format: each message is a `Content-Length: N` header block,
a blank line, then N bytes of UTF-8 JSON. `Channel` reads and writes such frames on a pair of
binary streams (stdin/stdout, or a socket's files) and numbers what it sends (`seq`)."""

from __future__ import annotations

import itertools
import json
import threading
from typing import IO, Any

MAX_FRAME = 64 << 20


class FramingError(Exception):
    """The peer sent something that is not a DAP frame (no Content-Length, bad JSON, too big)."""


def read_frame(stream: IO[bytes]) -> dict | None:
    """The next message from `stream`, or None at end of stream."""
    length: int | None = None
    while True:
        line = stream.readline()
        if not line:
            return None
        line = line.strip()
        if not line:
            if length is None:
                continue  # stray blank lines between frames
            break
        name, _, value = line.decode("ascii", "replace").partition(":")
        if name.strip().lower() == "content-length":
            try:
                length = int(value.strip())
            except ValueError:
                raise FramingError(f"bad Content-Length header: {line!r}") from None
    if not 0 <= length <= MAX_FRAME:
        raise FramingError(f"Content-Length {length} out of range")
    data = stream.read(length)
    if len(data) < length:
        return None
    try:
        msg = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise FramingError(f"a frame's body is not JSON: {e}") from None
    if not isinstance(msg, dict):
        raise FramingError("a DAP message must be a JSON object")
    return msg


def encode_frame(msg: dict) -> bytes:
    body = json.dumps(msg, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode("utf-8")
    return b"Content-Length: %d\r\n\r\n" % len(body) + body


class Channel:
    """One DAP connection: `read()` on the reader side, `send(...)` from any thread."""

    def __init__(self, rfile: IO[bytes], wfile: IO[bytes]) -> None:
        self.rfile, self.wfile = rfile, wfile
        self._lock = threading.Lock()
        self._seq = itertools.count(1)
        self.closed = False

    def read(self) -> dict | None:
        return read_frame(self.rfile)

    def send(self, msg: dict[str, Any]) -> None:
        """Write `msg` with the next `seq`; a closed peer is ignored (the session is ending)."""
        with self._lock:
            if self.closed:
                return
            msg = {"seq": next(self._seq), **msg}
            try:
                self.wfile.write(encode_frame(msg))
                self.wfile.flush()
            except (OSError, ValueError):
                self.closed = True

    def response(self, request: dict, body: Any = None, *, error: str | None = None) -> None:
        msg: dict[str, Any] = {
            "type": "response",
            "request_seq": request.get("seq", 0) if isinstance(request.get("seq"), int) else 0,
            "command": str(request.get("command", "")),
            "success": error is None,
        }
        if error is not None:
            msg["message"] = error
            msg["body"] = {"error": {"id": 1, "format": error.replace("{", "(").replace("}", ")"), "showUser": True}}
        elif body is not None:
            msg["body"] = body
        self.send(msg)

    def event(self, name: str, body: Any = None) -> None:
        msg: dict[str, Any] = {"type": "event", "event": name}
        if body is not None:
            msg["body"] = body
        self.send(msg)


__all__ = ["Channel", "FramingError", "encode_frame", "read_frame"]
