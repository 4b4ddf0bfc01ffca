"""The jupyter-server extension: authentication, message checking, forwarding to a kernel's lab.

A real `jupyter server` runs with the extension; a real `KernelBridge` (the kernel side) runs
in this process with a recording handler and registers itself in the server's runtime dir, as
a notebook kernel's `symphony_lab.lab` does.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time

import pytest
from jupyter_harness import start_server

from symphony_lab.jupyter import registry
from symphony_lab.jupyter.bridge import KernelBridge
from symphony_lab.jupyter.messages import MalformedMessage, parse_message

KID = "0f1e2d3c-aaaa-bbbb-cccc-123456789abc"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    srv = start_server(tmp_path_factory.mktemp("jserver"))
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def bridge(server):
    seen: list[dict] = []

    def handle(req: dict) -> dict:
        seen.append(req)
        if req["command"] == "trace":
            body = {"traceEvents": [{"ph": "M", "name": "process_name", "pid": 0, "tid": 0, "args": {"name": "x"}}]}
        else:
            body = {"echo": req["command"], "arguments": req["arguments"]}
        return {"type": "response", "request_seq": req["seq"], "command": req["command"], "success": True, "body": body}

    b = KernelBridge(handle, KID, str(server.runtime_dir)).start({"model": "fake"})
    b.seen = seen
    yield b
    b.stop()


def ws_session(server, kernel_id: str, sends: list, expect: int, token: bool = True, timeout: float = 20):
    """Open the lab WebSocket, send `sends`, collect `expect` messages (or the handshake error)."""
    from tornado.httpclient import HTTPRequest
    from tornado.websocket import websocket_connect

    async def go():
        url = f"ws://127.0.0.1:{server.port}/symphony-lab/api/kernels/{kernel_id}/ws"
        headers = {"Authorization": f"token {server.token}"} if token else {}
        conn = await websocket_connect(HTTPRequest(url, headers=headers, connect_timeout=timeout))
        for s in sends:
            await conn.write_message(s if isinstance(s, str) else json.dumps(s))
        got = []
        while len(got) < expect:
            m = await asyncio.wait_for(conn.read_message(), timeout)
            if m is None:
                break
            got.append(json.loads(m))
        conn.close()
        return got

    return asyncio.run(go())


def test_unauthenticated_requests_are_refused(server, bridge):
    for method, path, body in [
        ("GET", "/symphony-lab/api/status", None),
        ("POST", f"/symphony-lab/api/kernels/{KID}/command", b'{"command": "threads"}'),
        ("GET", f"/symphony-lab/api/kernels/{KID}/trace", None),
    ]:
        status, _, _ = server.request(method, path, body, token=False)
        assert status == 403, (method, path, status)
    status, _, _ = server.request(
        "GET", "/symphony-lab/api/status", headers={"Authorization": "token wrong-token"}, token=False
    )
    assert status == 403
    from tornado.httpclient import HTTPClientError

    with pytest.raises(HTTPClientError) as e:
        ws_session(server, KID, [], 1, token=False)
    assert e.value.code == 403
    assert not any(r["command"] == "threads" for r in bridge.seen)


def test_status_lists_version(server, bridge):
    status, body, _ = server.request("GET", "/symphony-lab/api/status")
    assert status == 200
    assert body["version"] and isinstance(body["kernels"], list)
    # our fake kernel is not one of this server's kernels, so it is not listed
    assert all(k["kernel_id"] != KID for k in body["kernels"])


def test_command_is_forwarded_to_the_kernel_lab(server, bridge):
    msg = {"type": "request", "seq": 41, "command": "step", "arguments": {"pid": 3, "tid": 1}}
    status, body, _ = server.request("POST", f"/symphony-lab/api/kernels/{KID}/command", json.dumps(msg).encode())
    assert status == 200, body
    assert body == {
        "type": "response",
        "request_seq": 41,
        "command": "step",
        "success": True,
        "body": {"echo": "step", "arguments": {"pid": 3, "tid": 1}},
    }
    assert bridge.seen[-1]["command"] == "step"


@pytest.mark.parametrize(
    "raw, says",
    [
        (b"{not json", "not JSON"),
        (b"[1, 2]", "expected a JSON object, got an array"),
        (b'{"arguments": {}}', "missing 'command'"),
        (b'{"command": "explode"}', "unknown command 'explode'"),
        (b'{"command": "step", "arguments": [1]}', "'arguments' must be a JSON object"),
        (b'{"command": "step", "arguments": {"pid": "3"}}', "'pid' must be an integer"),
        (b'{"command": "step", "seq": -1}', "'seq' must be a non-negative integer"),
        (b'{"command": "step", "payload": 1}', "unknown field(s) ['payload']"),
        (b'{"command": "launch", "arguments": {"fn": "os:system"}}', "not allowed here"),
        (b'{"command": "lab_view", "arguments": {"bogus": 1}}', "unknown argument(s) ['bogus']"),
        (b"\xff\xfe", "not UTF-8"),
    ],
)
def test_malformed_messages_are_rejected_with_a_clear_error(server, bridge, raw, says):
    n = len(bridge.seen)
    status, body, _ = server.request("POST", f"/symphony-lab/api/kernels/{KID}/command", raw)
    assert status == 400
    assert body["success"] is False and body["error"] == "MalformedMessage"
    assert says in body["message"], body["message"]
    assert len(bridge.seen) == n  # never reached the kernel


def test_unknown_kernel_is_a_clear_404(server, bridge):
    status, body, _ = server.request(
        "POST", "/symphony-lab/api/kernels/no-such-kernel/command", b'{"command": "threads"}'
    )
    assert status == 404
    assert "has no running Symphony Lab" in json.dumps(body)


def test_trace_download(server, bridge):
    status, body, headers = server.request("GET", f"/symphony-lab/api/kernels/{KID}/trace")
    assert status == 200
    assert "attachment" in headers.get("Content-Disposition", "")
    assert body["traceEvents"][0]["ph"] == "M"


def test_websocket_forwards_checks_and_streams_events(server, bridge):
    def later():
        time.sleep(1.0)
        bridge.broadcast({"type": "event", "event": "stopped", "seq": 1, "ts": 0.0, "body": {"pid": 7, "tid": 1}})

    threading.Thread(target=later, daemon=True).start()
    got = ws_session(
        server,
        KID,
        [
            "this is not json",
            {"type": "request", "seq": 5, "command": "continue", "arguments": {"pid": 7}},
            {"type": "request", "seq": 6, "command": "save_recording", "arguments": {"pid": 7, "path": "/etc/x"}},
        ],
        expect=4,
    )
    kinds = [(m["type"], m.get("request_seq"), m.get("success")) for m in got]
    assert ("response", None, False) in kinds  # the non-JSON line
    bad = next(m for m in got if m["type"] == "response" and m.get("request_seq") is None)
    assert "malformed message: not JSON" in bad["message"]
    refused = next(m for m in got if m.get("request_seq") == 6)
    assert refused["success"] is False and "not allowed here" in refused["message"]
    ok = next(m for m in got if m.get("request_seq") == 5)
    assert ok["success"] and ok["body"]["echo"] == "continue"
    ev = next(m for m in got if m["type"] == "event")
    assert ev["event"] == "stopped" and ev["body"]["pid"] == 7


def test_bridge_refuses_a_client_without_the_secret(bridge):
    info = registry.read_entry(KID, bridge.runtime_dir)
    assert info["port"] == bridge.port and info["secret"] == bridge.secret
    with socket.create_connection(("127.0.0.1", bridge.port), timeout=5) as s:
        s.sendall(b'{"secret": "guess"}\n{"command": "threads"}\n')
        reply = s.makefile("rb").readline()
    assert b"unauthenticated" in reply
    assert not any(r["command"] == "threads" for r in bridge.seen)


def test_command_list_matches_the_debugger_protocol():
    from symphony_lab.debugger import protocol
    from symphony_lab.jupyter import messages

    assert messages.COMMANDS == set(protocol.COMMANDS)
    assert messages.PRIVILEGED == set(protocol.PRIVILEGED)
    assert set(messages.REFUSED) >= set(protocol.PRIVILEGED)


def test_parse_message_accepts_the_protocols_requests():
    assert parse_message('{"command": "step", "arguments": {"pid": 1}}') == {
        "type": "request",
        "seq": 0,
        "command": "step",
        "arguments": {"pid": 1},
    }
    assert parse_message({"type": "request", "seq": 2, "command": "lab_view"})["arguments"] == {}
    with pytest.raises(MalformedMessage, match="'type' must be 'request'"):
        parse_message({"type": "event", "command": "step"})
    with pytest.raises(MalformedMessage, match="over the"):
        parse_message("x" * (2 << 20))
