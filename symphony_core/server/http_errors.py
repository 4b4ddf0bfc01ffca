"""uvicorn's HTTP/1.1 protocol (h11), answering a request it cannot parse (a malformed
`Content-Length`, a bad request line) in the API's JSON error format rather than plain text:
such a request never reaches the app, so the app's error handlers cannot word it."""

from __future__ import annotations

import json

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol


class JSONErrorH11Protocol(H11Protocol):
    def send_400_response(self, msg: str) -> None:
        body = json.dumps(
            {
                "error": {
                    "type": "invalid_request_error",
                    "message": f"malformed HTTP request: {msg}",
                    "param": None,
                    "code": 400,
                }
            }
        ).encode()
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"connection", b"close"),
        ]
        for event in (h11.Response(status_code=400, headers=headers, reason=b"Bad Request"), h11.Data(data=body)):
            self.transport.write(self.conn.send(event))
        self.transport.write(self.conn.send(h11.EndOfMessage()))
        self.transport.close()


__all__ = ["JSONErrorH11Protocol"]
