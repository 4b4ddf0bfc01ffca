"""`symphony-lab dap` against a real `symphony serve --plugin debugger` on loopback: the README's
walkthrough (tests/dap_walkthrough.py) with the program sent as source and run in the server's
sandbox, over stdio (the adapter as a subprocess) and over TCP (the adapter serving in this
process), every message checked against the DAP schema; and attaching to a running process."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading

import pytest

from symphony_lab.dap import serve_tcp
from tests.dap_client import DapClient
from tests.dap_walkthrough import ROOT, run_walkthrough
from tests.server_harness import Server

pytest.importorskip("websockets")
pytestmark = pytest.mark.slow

USERS = [{"name": "alice", "token": "tok-alice"}, {"name": "bob", "token": "tok-bob"}]


@pytest.fixture(scope="module")
def server():
    s = Server(USERS, extra=["--plugin", "debugger"])
    yield s
    assert s.stop() == 0, s.log()


def tcp_adapter() -> tuple[int, threading.Thread]:
    box: list[int] = []
    ready = threading.Event()
    t = threading.Thread(
        target=serve_tcp,
        kwargs={"port": 0, "once": True, "ready": lambda p: (box.append(p), ready.set())},
        daemon=True,
    )
    t.start()
    assert ready.wait(30)
    return box[0], t


def test_walkthrough_on_a_server_over_tcp(server):
    port, t = tcp_adapter()
    with socket.create_connection(("127.0.0.1", port), timeout=300) as sock:
        c = DapClient(sock.makefile("rb"), sock.makefile("wb"))
        seen = run_walkthrough(c, {"server": server.url, "token": "tok-alice"}, override_by="setVariable")
    t.join(60)
    assert not t.is_alive()
    assert seen["answer"]["tokens"][1] == seen["runner_up"]


def test_walkthrough_on_a_server_over_stdio(server, tmp_path):
    log = open(tmp_path / "adapter.log", "w")
    p = subprocess.Popen(
        [sys.executable, "-m", "symphony_lab.cli", "dap"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=log,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": ROOT},
    )
    try:
        c = DapClient(p.stdout, p.stdin)
        run_walkthrough(c, {"server": server.url, "token": "tok-alice"}, override_by="evaluate")
        assert p.wait(60) == 0, (tmp_path / "adapter.log").read_text()[-3000:]
    finally:
        if p.poll() is None:
            p.kill()


CHATTER = """
def chatter(sym, n=5000):
    kv = sym.kv_create()
    toks = sym.tokenize("Once upon a time")
    for i in range(n):
        toks = [sym.pred(kv, toks).argmax()]
        sym.send(f"step {i}")
    return "done"
"""


def test_attach_to_a_running_process_pause_break_on_send_and_terminate(server):
    import httpx

    r = httpx.post(
        server.url + "/v1/processes",
        json={"source": CHATTER, "entry": "chatter"},
        headers={"Authorization": "Bearer tok-alice"},
        timeout=60,
    )
    assert r.status_code == 201, r.text
    pid = r.json()["pid"]
    port, t = tcp_adapter()
    with socket.create_connection(("127.0.0.1", port), timeout=300) as sock:
        c = DapClient(sock.makefile("rb"), sock.makefile("wb"))
        c.request("initialize", {"adapterID": "symphony-lip"})
        # another user's token cannot attach to alice's process
        bad = c.request("attach", {"server": server.url, "token": "tok-bob", "pid": pid}, ok=False)
        assert f"no running process {pid}" in bad["message"]
        c.request("disconnect")
    t.join(60)

    # attach, pause, leave: an attached program runs on (the next session's pause stops it afresh)
    port, t = tcp_adapter()
    with socket.create_connection(("127.0.0.1", port), timeout=300) as sock:
        c = DapClient(sock.makefile("rb"), sock.makefile("wb"))
        c.request("initialize", {"adapterID": "symphony-lip"})
        c.request("attach", {"server": server.url, "token": "tok-alice", "pid": pid})
        c.event("initialized")
        c.request("configurationDone")
        c.request("pause", {"threadId": 1})
        c.event("stopped", reason="pause", threadId=1)
        c.request("disconnect")
    t.join(60)

    port, t = tcp_adapter()
    with socket.create_connection(("127.0.0.1", port), timeout=300) as sock:
        c = DapClient(sock.makefile("rb"), sock.makefile("wb"))
        c.request("initialize", {"adapterID": "symphony-lip"})
        c.request("attach", {"server": server.url, "token": "tok-alice", "pid": pid})
        c.event("initialized")
        c.request("configurationDone")
        c.request("pause", {"threadId": 1})
        c.event("stopped", reason="pause", threadId=1)
        top = c.request("stackTrace", {"threadId": 1})["body"]["stackFrames"]
        assert top[0]["source"]["name"] == "<lip chatter>"  # no local file: the server's name for it
        # break on the program's 3rd send from here, then look at what it sent meanwhile
        bps = c.request("setFunctionBreakpoints", {"breakpoints": [{"name": "send", "hitCondition": "3"}]})
        assert bps["body"]["breakpoints"][0]["verified"]
        c.request("continue", {"threadId": 1})
        hit = c.event("stopped", reason="function breakpoint", threadId=1)
        assert hit["body"]["hitBreakpointIds"] == [bps["body"]["breakpoints"][0]["id"]]
        frames = c.request("stackTrace", {"threadId": 1})["body"]["stackFrames"]
        assert frames[0]["name"].startswith("send(")
        sent = [o for o in c.outputs("stdout") if o.startswith("step ")]
        assert len(sent) >= 2 and sent[-1] != sent[-2]  # the program's own messages, as output
        c.request("terminate")
        c.event("exited", exitCode=1)
        c.event("terminated")
        c.request("disconnect")
        c.check_all()
    t.join(60)
    st = httpx.get(f"{server.url}/v1/processes/{pid}", headers={"Authorization": "Bearer tok-alice"}, timeout=30)
    assert st.json()["status"] == "cancelled"
