"""`symphony-lab dap`: the README's walkthrough (tests/dap_walkthrough.py) as an editor runs it,
over stdio (the adapter as a subprocess, its own engine) and over TCP (the adapter serving in
this process, on the test session's engine), every message checked against the DAP schema."""

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

pytestmark = pytest.mark.slow


def test_walkthrough_over_tcp_in_process(engine):
    box: list[int] = []
    ready = threading.Event()
    t = threading.Thread(
        target=serve_tcp,
        kwargs={"port": 0, "engine": engine, "once": True, "ready": lambda p: (box.append(p), ready.set())},
        daemon=True,
    )
    t.start()
    assert ready.wait(30)
    with socket.create_connection(("127.0.0.1", box[0]), timeout=300) as sock:
        c = DapClient(sock.makefile("rb"), sock.makefile("wb"))
        seen = run_walkthrough(c, {}, override_by="evaluate")
    t.join(60)
    assert not t.is_alive()  # the session ended with the disconnect
    assert seen["checked"] > 40 and {"StoppedEvent", "SetVariableResponse"} - set(c.checked) == {"SetVariableResponse"}


def test_walkthrough_over_stdio(tmp_path):
    env = {**os.environ, "PYTHONPATH": ROOT}
    p = subprocess.Popen(
        [sys.executable, "-m", "symphony_lab.cli", "dap"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=open(tmp_path / "adapter.log", "w"),
        cwd=ROOT,
        env=env,
    )
    try:
        c = DapClient(p.stdout, p.stdin)
        seen = run_walkthrough(c, {"engine": {"num_pages": 512}}, override_by="setVariable")
        assert p.wait(60) == 0, (tmp_path / "adapter.log").read_text()[-3000:]
    finally:
        if p.poll() is None:
            p.kill()
    assert "SetVariableResponse" in c.checked and c.checked["StoppedEvent"] >= 5
    assert seen["answer"]["tokens"][1] == seen["runner_up"]
