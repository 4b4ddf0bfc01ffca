"""The server under many clients, and its shutdown: a real `symphony serve` on loopback.

The SIGTERM test stops this module's server, so it runs last (file order).
"""

from __future__ import annotations

import asyncio
import json
import os
import time

import httpx
import pytest
import websockets

from tests.server_harness import LIPS, Server, alive, descendants

TOKEN = "tok-load"
SOURCE = open(LIPS).read()


@pytest.fixture(scope="module")
def server():
    s = Server([{"name": "load", "token": TOKEN, "max_processes": 1000}], ["--max-workers", "24"])
    yield s
    s.stop()


@pytest.mark.slow
def test_200_concurrent_websocket_clients(server):
    """200 WebSocket clients at once, each running a short sandboxed program: all complete."""
    prog = httpx.post(
        server.url + "/v1/programs",
        json={"source": SOURCE, "entry": "tiny"},
        headers={"Authorization": f"Bearer {TOKEN}"},
    ).json()["program"]
    url = server.url.replace("http", "ws") + "/v1/ws"
    n = 200

    async def one(i: int) -> tuple[list, dict]:
        async with websockets.connect(
            url, additional_headers={"Authorization": f"Bearer {TOKEN}"}, open_timeout=120, max_size=None
        ) as ws:
            await ws.send(json.dumps({"op": "run", "program": prog, "args": [i]}))
            msgs = []
            async for raw in ws:
                m = json.loads(raw)
                if m["type"] == "message":
                    msgs.append(m["data"])
                elif m["type"] == "result":
                    return msgs, m
                elif m["type"] == "error":
                    return msgs, m
        return msgs, {"status": "closed early"}

    async def all_of_them():
        return await asyncio.wait_for(asyncio.gather(*(one(i) for i in range(n))), 240)

    t = time.monotonic()
    results = asyncio.run(all_of_them())
    took = time.monotonic() - t
    bad = [(i, r) for i, (msgs, r) in enumerate(results) if r.get("status") != "finished" or msgs != [i]]
    assert not bad, f"{len(bad)} of {n} failed, e.g. {bad[:3]}"
    picks = {r["result"][1] for _, r in results}
    assert [r["result"][0] for _, r in results] == list(range(n))
    assert len(picks) == 1, f"the same input gave different tokens: {picks}"
    print(f"{n} concurrent WebSocket programs in {took:.1f} s")
    h = httpx.get(server.url + "/health").json()
    assert h["status"] == "ok"
    metrics = httpx.get(server.url + "/metrics").text
    started = [line for line in metrics.splitlines() if line.startswith("symphony_sandbox_workers_started_total")]
    assert float(started[0].split()[1]) >= n


def test_sigterm_shuts_down_cleanly_with_no_orphans(server):
    """SIGTERM while sandboxed programs run: the server exits 0 and no worker survives it."""
    from symphony_core.client import Client

    c = Client(server.url, token=TOKEN)
    procs = [c.launch(None, source=SOURCE, entry="waits") for _ in range(3)]

    def comm(p: int) -> str:
        try:
            with open(f"/proc/{p}/comm") as f:
                return f.read().strip()
        except OSError:
            return ""

    deadline = time.time() + 60
    while time.time() < deadline:  # the three programs' workers are up
        tree = descendants(server.proc.pid)
        if sum(1 for p in tree if alive(p) and comm(p) == "symphony-worker") >= 3:
            break
        time.sleep(0.2)
    tree = descendants(server.proc.pid)
    comms = [comm(p) for p in tree if alive(p)]
    assert comms.count("symphony-worker") >= 3 and "symphony-zygote" in comms, comms
    t = time.monotonic()
    rc = server.stop(timeout=30)
    assert rc == 0, server.log()[-3000:]
    assert time.monotonic() - t < 20
    time.sleep(0.5)
    survivors = [p for p in tree if alive(p)]
    assert not survivors, f"orphaned processes after shutdown: {survivors}"
    for p in procs:  # the clients see their programs end, not hang
        assert p.wait(30)
    assert "symphony: stopped" in server.log()
    assert not os.path.exists(f"/proc/{server.proc.pid}")
