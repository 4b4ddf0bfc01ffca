"""Request checking: every malformed request gets a 4xx naming exactly what was wrong."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from starlette.requests import Request

from ..errors import KVNotFound, KVPermissionError, SymphonyError
from ..sched.process import LimitExceeded
from .json_text import JSONResponse
from .users import QuotaExceeded


class BadRequest(Exception):
    """An HTTP error with a clear message; rendered as {"error": {...}}."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.type, self.param = status, message, type, param
        self.code = code  # the OpenAI error code (e.g. "context_length_exceeded"); default the status

    def body(self) -> dict:
        code = self.code or self.status
        return {"error": {"type": self.type, "message": self.message, "param": self.param, "code": code}}


def error_response(status: int, message: str, type: str, param: str | None = None) -> JSONResponse:
    return JSONResponse(
        {"error": {"type": type, "message": message, "param": param, "code": status}}, status_code=status
    )


def symphony_status(e: SymphonyError) -> int:
    """The HTTP status of an engine error raised by a client's request."""
    if isinstance(e, KVPermissionError):
        return 403
    if isinstance(e, KVNotFound):
        return 404
    if isinstance(e, (QuotaExceeded, LimitExceeded)):
        return 429
    return 400


_JSON_NAMES = {
    dict: "an object",
    list: "an array",
    str: "a string",
    int: "an integer",
    float: "a number",
    bool: "a boolean",
    type(None): "null",
}


def jtype(v: Any) -> str:
    return _JSON_NAMES.get(type(v), type(v).__name__)


def _matches(v: Any, types: tuple) -> bool:
    if object in types:
        return True
    if isinstance(v, bool):
        return bool in types
    if isinstance(v, int) and float in types:
        return True
    return isinstance(v, types)


def check_fields(body: Any, spec: dict[str, tuple], where: str) -> dict:
    """`spec`: name -> (allowed python types (tuple), required). Unknown fields are refused."""
    if not isinstance(body, dict):
        raise BadRequest(422, f"{where}: the body must be a JSON object, got {jtype(body)}")
    unknown = sorted(set(body) - set(spec))
    if unknown:
        raise BadRequest(
            422,
            f"{where}: unknown field(s) {', '.join(map(repr, unknown))} (allowed: {', '.join(sorted(spec))})",
            param=unknown[0],
        )
    for name, (types, required) in spec.items():
        if name not in body:
            if required:
                raise BadRequest(422, f"{where}: missing required field {name!r}", param=name)
            continue
        v = body[name]
        if not _matches(v, types):
            want = " or ".join(_JSON_NAMES.get(t, t.__name__) for t in types)
            raise BadRequest(422, f"{where}: field {name!r} must be {want}, got {jtype(v)}", param=name)
    return body


def check_text(v: Any, field: str, where: str) -> None:
    """A string field must be Unicode text: JSON's `\\ud800` escapes give a lone surrogate, which
    no UTF-8 encoder (nor any later response naming it) can write."""
    if isinstance(v, str):
        try:
            v.encode()
        except UnicodeEncodeError as e:
            raise BadRequest(
                400,
                f"{where}: field {field!r} holds a lone surrogate ({v[e.start]!a} at index {e.start}): not Unicode text",
                param=field,
            ) from None


BODY_TIMEOUT_S = 15.0  # a body announced but not sent in time (a client, or an attacker, holding the connection)


async def read_json(request: Request, limit: int, timeout: float = BODY_TIMEOUT_S) -> Any:
    """The body as JSON, refusing oversized bodies before reading them whole."""
    cl = request.headers.get("content-length")
    if cl is not None:
        try:
            n = int(cl)
        except ValueError:
            raise BadRequest(400, f"invalid Content-Length header {cl!r}") from None
        if n > limit:
            raise BadRequest(
                413, f"request body of {n} bytes is over the limit of {limit} bytes", type="payload_too_large"
            )
    ctype = request.headers.get("content-type", "application/json").split(";")[0].strip().lower()
    if ctype not in ("application/json", ""):
        raise BadRequest(415, f"request body must be application/json, got {ctype!r}", type="unsupported_media_type")
    buf = bytearray()
    try:
        async with asyncio.timeout(timeout):
            async for chunk in request.stream():
                buf += chunk
                if len(buf) > limit:
                    raise BadRequest(413, f"request body is over the limit of {limit} bytes", type="payload_too_large")
    except TimeoutError:
        raise BadRequest(
            408, f"the request body did not arrive within {timeout:g} s ({len(buf)} bytes came)", type="timeout"
        ) from None
    if not buf:
        raise BadRequest(400, "request body is empty; expected a JSON object")
    return parse_json(bytes(buf))


def parse_json(data: bytes | str) -> Any:
    try:
        return json.loads(data)
    except UnicodeDecodeError:
        raise BadRequest(400, "request body is not UTF-8 text") from None
    except RecursionError:
        raise BadRequest(400, "request body is nested too deeply") from None
    except ValueError as e:
        raise BadRequest(400, f"request body is not valid JSON: {e}") from None
