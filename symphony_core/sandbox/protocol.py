"""The frame format spoken between the server and a sandboxed worker, both ways.

A frame is `[u32 header length][u32 payload length][header: JSON, UTF-8][payload: raw bytes]`.
Everything a worker sends is parsed as JSON and plain bytes only — never pickle — so a hostile
worker can send the server nothing but data. Sizes are capped on read; a frame over the caps
is a protocol violation and ends the worker.

This module is imported inside the sandbox: it must not import any engine internals.
"""

from __future__ import annotations

import json
import socket
import struct
from typing import Any

HEADER = struct.Struct("<II")
MAX_HEADER = 8 << 20  # JSON part of one frame
MAX_PAYLOAD = 64 << 20  # raw part (logits, masks)


class ProtocolError(Exception):
    """The other side sent something that is not a well-formed frame."""


class FrameTooLarge(ValueError):
    """A frame this side was about to send is over the caps the other side reads with."""


def _header(header: dict, payload_len: int) -> bytes:
    h = json.dumps(header, separators=(",", ":"), allow_nan=False).encode()
    if len(h) > MAX_HEADER or payload_len > MAX_PAYLOAD:
        raise FrameTooLarge(
            f"{len(h)} bytes of JSON and {payload_len} raw bytes; one frame carries at most "
            f"{MAX_HEADER >> 20} MiB of JSON and {MAX_PAYLOAD >> 20} MiB raw"
        )
    return h


def encode(header: dict, payload: bytes | memoryview = b"") -> bytes:
    """The whole frame's bytes."""
    return encode_head(header, len(payload)) + bytes(payload)


def encode_head(header: dict, payload_len: int) -> bytes:
    """A frame's bytes up to its payload (the server's side: its payload, logits, is not capped)."""
    h = _header(header, 0)
    return HEADER.pack(len(h), payload_len) + h


def send_frame(sock: socket.socket, header: dict, payload: bytes | memoryview = b"") -> None:
    """Send one frame (the worker's side); FrameTooLarge, before anything is sent, past the caps."""
    h = _header(header, len(payload))
    if payload:
        sock.sendall(HEADER.pack(len(h), len(payload)) + h)
        sock.sendall(payload)
    else:
        sock.sendall(HEADER.pack(len(h), 0) + h)


def _recv_exact(sock: socket.socket, n: int) -> bytearray:
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = sock.recv_into(view[got:], n - got)
        if k == 0:
            raise EOFError("connection closed")
        got += k
    return buf


def recv_frame(sock: socket.socket, max_payload: int = 1 << 31) -> tuple[dict, bytearray]:
    """Blocking read of one frame (the worker's side: the server it reads from is trusted, and
    logits for many positions can be large)."""
    hl, pl = HEADER.unpack(_recv_exact(sock, HEADER.size))
    if hl > MAX_HEADER or pl > max_payload:
        raise ProtocolError(f"frame too large ({hl} + {pl} bytes)")
    header = json.loads(_recv_exact(sock, hl)) if hl else {}
    payload = _recv_exact(sock, pl) if pl else bytearray()
    return header, payload


class FrameReader:
    """Incremental parser for a non-blocking reader: feed bytes, take whole frames."""

    def __init__(self, max_header: int = MAX_HEADER, max_payload: int = MAX_PAYLOAD) -> None:
        self.buf = bytearray()
        self.max_header, self.max_payload = max_header, max_payload

    def feed(self, data: bytes) -> list[tuple[dict, bytes]]:
        self.buf += data
        out = []
        while len(self.buf) >= HEADER.size:
            hl, pl = HEADER.unpack_from(self.buf)
            if hl > self.max_header or pl > self.max_payload:
                raise ProtocolError(f"frame of {hl} + {pl} bytes is over the limit")
            end = HEADER.size + hl + pl
            if len(self.buf) < end:
                break
            try:
                header = json.loads(bytes(self.buf[HEADER.size : HEADER.size + hl]))
            except (ValueError, RecursionError) as e:
                raise ProtocolError(f"frame header is not JSON: {e}") from None
            if not isinstance(header, dict):
                raise ProtocolError("frame header must be a JSON object")
            payload = bytes(self.buf[HEADER.size + hl : end])
            del self.buf[:end]
            out.append((header, payload))
        return out


def jsonable(obj: Any, what: str) -> Any:
    """`obj` as plain JSON data (tuples become lists); a clear TypeError otherwise."""
    try:
        return json.loads(json.dumps(obj, allow_nan=False))
    except (TypeError, ValueError) as e:
        raise TypeError(f"{what} must be JSON data (str, int, float, bool, None, list, dict): {e}") from None
