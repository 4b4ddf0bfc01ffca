"""A Debug Adapter Protocol client for the tests: framed JSON (Content-Length headers) on a pair of
byte streams, every message it sends and receives checked against the official DAP JSON schema
(tests/data/dap/debugAdapterProtocol.json, vendored with its MIT licence)."""

from __future__ import annotations

import json
import os
import threading
import time
from typing import Any

from jsonschema import Draft4Validator

from symphony_lab.dap.framing import encode_frame, read_frame

SCHEMA_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "dap", "debugAdapterProtocol.json")
with open(SCHEMA_PATH) as _f:
    SCHEMA = json.load(_f)
_validators: dict[str, Draft4Validator] = {}


def _cap(name: str) -> str:
    return name[0].upper() + name[1:]


def schema_check(msg: dict) -> str:
    """Validate `msg` against its definition in the DAP schema (raising on any mismatch); the
    definition's name. A message whose type the schema does not define is itself an error."""
    kind = msg.get("type")
    if kind == "response":
        name = f"{_cap(msg['command'])}Response" if msg.get("success") else "ErrorResponse"
    elif kind == "event":
        name = f"{_cap(msg['event'])}Event"
    elif kind == "request":
        name = f"{_cap(msg['command'])}Request"
    else:
        raise AssertionError(f"not a DAP message: {msg}")
    assert name in SCHEMA["definitions"], f"the DAP schema defines no {name}: {msg}"
    v = _validators.get(name)
    if v is None:
        v = _validators[name] = Draft4Validator({"$ref": f"#/definitions/{name}", "definitions": SCHEMA["definitions"]})
    errors = sorted(v.iter_errors(msg), key=str)
    assert not errors, f"{name} breaks the DAP schema: {errors[0].message} in {json.dumps(msg)[:600]}"
    return name


class DapClient:
    def __init__(self, rfile, wfile) -> None:
        self.rfile, self.wfile = rfile, wfile
        self.seq = 0
        self.messages: list[dict] = []  # everything received, in order
        self.checked: dict[str, int] = {}  # schema definition -> messages checked against it
        self._consumed: set[int] = set()
        self._cv = threading.Condition()
        self._closed = False
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        try:
            while True:
                m = read_frame(self.rfile)
                if m is None:
                    break
                with self._cv:
                    self.messages.append(m)
                    self._cv.notify_all()
        finally:
            with self._cv:
                self._closed = True
                self._cv.notify_all()

    def _count(self, name: str) -> None:
        self.checked[name] = self.checked.get(name, 0) + 1

    def send(self, command: str, arguments: dict | None = None) -> int:
        self.seq += 1
        msg: dict[str, Any] = {"seq": self.seq, "type": "request", "command": command}
        if arguments is not None:
            msg["arguments"] = arguments
        self._count(schema_check(msg))
        self.wfile.write(encode_frame(msg))
        self.wfile.flush()
        return self.seq

    def _wait(self, match, timeout: float, what: str) -> dict:
        deadline = time.monotonic() + timeout
        with self._cv:
            while True:
                for i, m in enumerate(self.messages):
                    if i not in self._consumed and match(m):
                        self._consumed.add(i)
                        self._count(schema_check(m))
                        return m
                left = deadline - time.monotonic()
                if left <= 0 or self._closed:
                    got = [(m.get("event") or m.get("command"), m.get("success")) for m in self.messages[-15:]]
                    raise AssertionError(f"no {what} within {timeout}s (closed={self._closed}); last: {got}")
                self._cv.wait(min(left, 0.5))

    def request(self, command: str, arguments: dict | None = None, *, ok: bool = True, timeout: float = 180) -> dict:
        seq = self.send(command, arguments)
        r = self._wait(
            lambda m: m.get("type") == "response" and m.get("request_seq") == seq, timeout, f"{command} response"
        )
        assert r["command"] == command
        if ok:
            assert r["success"], f"{command} failed: {r.get('message')}"
        else:
            assert not r["success"], f"{command} should have failed: {r}"
        return r

    def event(self, name: str, timeout: float = 180, **body: Any) -> dict:
        def match(m: dict) -> bool:
            if m.get("type") != "event" or m.get("event") != name:
                return False
            b = m.get("body") or {}
            return all(b.get(k) == v for k, v in body.items())

        return self._wait(match, timeout, f"{name} event {body or ''}")

    def check_all(self) -> int:
        """Schema-check every message received (waited for or not); how many."""
        with self._cv:
            msgs = list(self.messages)
        for m in msgs:
            schema_check(m)
        return len(msgs)

    def outputs(self, category: str | None = None) -> list[str]:
        with self._cv:
            return [
                m["body"]["output"]
                for m in self.messages
                if m.get("event") == "output" and (category is None or m["body"].get("category") == category)
            ]
